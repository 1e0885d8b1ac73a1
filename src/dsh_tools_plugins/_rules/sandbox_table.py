"""The sandbox settings a host configures for ``run_command``: the rules file's
``[sandbox]`` table (and ``[sandbox.limits]``) read into
:class:`~dsh_tools_plugins.sandbox.SandboxSettings`, and the environment variables that
override it. Errors are :class:`RulesError` naming the line or the variable. The public
face is :mod:`dsh_tools_plugins.permissions` (``configured_sandbox``)."""

from __future__ import annotations

from typing import Final

import attrs

from dsh_tools._plugins.settings import NETWORK_ENV, SANDBOX_ENV, plugin_settings

from ..sandbox._settings import SandboxLimits, SandboxMode, SandboxSettings
from .error import RulesError
from .toml_places import key_line, region, top_key_line

__all__ = ["NETWORK_ENV_VAR", "SANDBOX_ENV_VAR", "sandbox_from_table", "with_overrides"]

SANDBOX_ENV_VAR: Final = SANDBOX_ENV
"""Environment variable (``auto``, ``required`` or ``off``; the command's ``--sandbox``)
that overrides the rules file's ``[sandbox] mode``."""

NETWORK_ENV_VAR: Final = NETWORK_ENV
"""Environment variable (``on`` or ``off``; the command's ``--network``/``--no-network``)
that overrides the rules file's ``[sandbox] network``."""

_SANDBOX_KEYS: Final = frozenset(attrs.fields_dict(SandboxSettings))
_SANDBOX_MODES: Final[dict[str, SandboxMode]] = {
    "required": "required",
    "auto": "auto",
    "off": "off",
}
_LIMIT_KEYS: Final = frozenset(attrs.fields_dict(SandboxLimits))


def sandbox_from_table(text: str, source: str, table: object) -> SandboxSettings:
    """The ``[sandbox]`` table as :class:`SandboxSettings`; every problem is a
    :class:`RulesError` naming the line of the key at fault."""
    written = region(text, "sandbox")

    def fail(problem: str, key: str | None = None) -> RulesError:
        line = key_line(text, key, *written) if key is not None and written else None
        return RulesError(problem, source=source, line=line or top_key_line(text, "sandbox"))

    if not isinstance(table, dict):
        raise fail(f"sandbox must be a table ([sandbox]), got {table!r}")
    for keys, where, given in (
        (_SANDBOX_KEYS, "[sandbox]", table),
        (_LIMIT_KEYS, "[sandbox.limits]", table.get("limits", {})),
    ):
        if not isinstance(given, dict):
            raise fail(f"sandbox.limits must be a table, got {given!r}", "limits")
        unknown = sorted(set(given) - keys)
        if unknown:
            raise fail(
                f"unknown key {unknown[0]!r} in {where} (known keys: {', '.join(sorted(keys))})",
                unknown[0],
            )
    settings = dict(table)
    limits = settings.pop("limits", {})
    for record, given in ((SandboxLimits, limits), (SandboxSettings, settings)):
        for key, value in given.items():
            try:
                record(**{key: value})
            except ValueError as error:
                named = key in str(error).split()  # "sandbox mode must be ...": says which
                raise fail(str(error) if named else f"{key}: {error}", key) from None
    return SandboxSettings(**settings, limits=SandboxLimits(**limits))


def with_overrides(settings: SandboxSettings) -> SandboxSettings:
    """``settings`` with the host's sandbox mode and network applied (``load_plugins``'
    ``sandbox`` and ``network``, else ``$DSH_TOOLS_SANDBOX`` and ``$DSH_TOOLS_NETWORK``)."""
    given = plugin_settings()  # load_plugins' arguments were checked: a bad value is $VAR's
    mode, network = given.sandbox, given.network
    if mode:
        if mode not in _SANDBOX_MODES:
            raise RulesError(
                f'must be "required", "auto" or "off", got {mode!r}', source=f"${SANDBOX_ENV_VAR}"
            )
        settings = attrs.evolve(settings, mode=_SANDBOX_MODES[mode])
    if network:
        if network not in ("on", "off"):
            raise RulesError(
                f'must be "on" or "off", got {network!r}', source=f"${NETWORK_ENV_VAR}"
            )
        settings = attrs.evolve(settings, network=network == "on")
    return settings
