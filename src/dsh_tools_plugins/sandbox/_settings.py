"""What a host allows ``run_command``'s commands to reach: the sandbox's settings and
limits, as the host gives them. The public face is :mod:`dsh_tools_plugins.sandbox`."""

from __future__ import annotations

import os
import re
import typing
from collections.abc import Iterable
from typing import Literal

import attrs

__all__ = [
    "ENV_NAME",
    "SANDBOX_HOME",
    "SandboxLimits",
    "SandboxMode",
    "SandboxSettings",
    "SandboxState",
]

SandboxMode = Literal["required", "auto", "off"]
"""``required``: sandbox or refuse; ``auto``: sandbox where possible; ``off``: never."""

_MODES = typing.get_args(SandboxMode)

SANDBOX_HOME = "/tmp/home"
"""``HOME`` inside the sandbox: an empty directory in the private ``/tmp``."""

ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\*?")
"""An environment variable's name, or a prefix of names with a trailing ``*``."""

_GIB = 1024**3


def _positive(instance: object, attribute: attrs.Attribute[int], value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(
            f"sandbox limit {attribute.name} must be a positive integer, got {value!r}"
        )


@attrs.frozen(kw_only=True)
class SandboxLimits:
    """Resource limits of a sandboxed command (each process, unless said otherwise).

    ``processes`` counts every process and thread of the call together (a ``pids``
    cgroup; where none can be made, ``RLIMIT_NPROC``, which does not bind root).
    ``memory_bytes`` caps each process's data (``RLIMIT_DATA``: heap and private
    writable mappings; address space reserved but not written does not count, so
    runtimes that reserve large regions still start). ``file_bytes`` caps the size of a
    file a process writes (``RLIMIT_FSIZE``). ``cpu_seconds`` caps each process's CPU
    time (``RLIMIT_CPU``); the call's timeout bounds wall time separately. Core dumps
    are off. The private ``/tmp`` and ``/dev/shm`` are memory too: together they hold at
    most ``memory_bytes`` (``/tmp`` three quarters of it).
    """

    processes: int = attrs.field(default=1024, validator=_positive)
    memory_bytes: int = attrs.field(default=8 * _GIB, validator=_positive)
    file_bytes: int = attrs.field(default=4 * _GIB, validator=_positive)
    cpu_seconds: int = attrs.field(default=3600, validator=_positive)


def _mode(instance: object, attribute: attrs.Attribute[str], value: str) -> None:
    if value not in _MODES:
        raise ValueError(f'sandbox mode must be "required", "auto" or "off", got {value!r}')


def _boolean(instance: object, attribute: attrs.Attribute[bool], value: bool) -> None:
    if not isinstance(value, bool):
        raise ValueError(f"sandbox {attribute.name} must be true or false, got {value!r}")


def _absolute_paths(value: Iterable[str | os.PathLike[str]]) -> tuple[str, ...]:
    if isinstance(value, (str, os.PathLike)):
        raise ValueError(f"sandbox paths must be a list of paths, got the single path {value!r}")
    paths = []
    for item in value:
        path = os.fspath(item) if isinstance(item, (str, os.PathLike)) else item
        if not isinstance(path, str) or not os.path.isabs(path) or "\x00" in path:
            raise ValueError(f"sandbox paths must be absolute, got {path!r}")
        paths.append(os.path.normpath(path))
    return tuple(paths)


def _env_names(names: Iterable[str]) -> tuple[str, ...]:
    if isinstance(names, str):
        raise ValueError(f"environment names must be a list of names, got the single {names!r}")
    checked = tuple(names)
    for name in checked:
        if not isinstance(name, str) or not ENV_NAME.fullmatch(name):
            raise ValueError(
                f"environment names are letters, digits and _ (with an optional trailing *), "
                f"got {name!r}"
            )
    return checked


def _user(instance: object, attribute: attrs.Attribute[str | int | None], value: object) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise ValueError(f"sandbox user must be a user name or a numeric user id, got {value!r}")
    if isinstance(value, int) and value < 0:
        raise ValueError(f"sandbox user must be a user id of 0 or more, got {value!r}")
    if isinstance(value, str) and (not value.strip() or "\x00" in value or value != value.strip()):
        raise ValueError(f"sandbox user must be a user name, got {value!r}")


@attrs.frozen(kw_only=True)
class SandboxSettings:
    """What a host allows ``run_command``'s commands to reach.

    ``mode``: ``"auto"`` (the default) sandboxes where bubblewrap works and says "not
    sandboxed" on the card and in the result where it does not; ``"required"`` refuses
    (``DENIED``) to run a command it cannot sandbox; ``"off"`` never sandboxes.
    ``network`` lets sandboxed commands use the host's network. ``read_only_paths`` and
    ``read_write_paths`` are absolute host paths mounted at the same place (missing ones
    are skipped), on top of the workspace; each is opened at every call without
    following links, and a call whose path is or passes through a link is refused.
    ``pass_env`` names host environment variables commands get besides
    :data:`DEFAULT_ENV_NAMES` (``NAME`` or ``PREFIX*``), with or without the sandbox.
    ``user`` (a name or a numeric id) is who sandboxed commands run as when the host
    runs as root; unset, that is the owner of the workspace, and a call in a workspace
    that root owns is refused. ``"root"`` (or ``0``) keeps root, mapped to the host's
    root. A host that is not root runs them as itself; ``user`` may then name only that
    user.
    """

    mode: SandboxMode = attrs.field(default="auto", validator=_mode)
    network: bool = attrs.field(default=False, validator=_boolean)
    read_only_paths: tuple[str, ...] = attrs.field(default=(), converter=_absolute_paths)
    read_write_paths: tuple[str, ...] = attrs.field(default=(), converter=_absolute_paths)
    pass_env: tuple[str, ...] = attrs.field(default=(), converter=_env_names)
    user: str | int | None = attrs.field(default=None, validator=_user)
    limits: SandboxLimits = attrs.field(
        factory=SandboxLimits, validator=attrs.validators.instance_of(SandboxLimits)
    )

    @property
    def contained(self) -> bool:
        """Whether every command is sure to run in the sandbox, offline: the mode is
        ``required`` (a command that cannot be sandboxed is refused, never run) and the
        network is off. Permission rules can rely on this (``sandboxed = true``)."""
        return self.mode == "required" and not self.network


@attrs.frozen
class SandboxState:
    """Whether a command runs sandboxed, whether it can reach the network, and why not."""

    sandboxed: bool
    network: bool
    reason: str | None = None
