"""The error a malformed permission rule or rules file raises, naming where it is.
The public face is :mod:`dsh_tools_plugins.permissions`."""

from __future__ import annotations

from dsh_tools.errors import PluginConfigError

__all__ = ["RulesError"]


class RulesError(PluginConfigError, ValueError):
    """Permission rules are malformed; the message names the file, line and rule.

    ``source`` is the file (or ``"<string>"``), ``line``/``column`` are 1-based or
    ``None`` when unknown, ``rule_index`` is the 1-based position of the rule (``None``
    for file-level problems) and ``rule_name`` its ``name``, if any.
    """

    def __init__(
        self,
        problem: str,
        *,
        source: str | None = None,
        line: int | None = None,
        column: int | None = None,
        rule_index: int | None = None,
        rule_name: str | None = None,
    ) -> None:
        self.problem = problem
        self.source = source
        self.line = line
        self.column = column
        self.rule_index = rule_index
        self.rule_name = rule_name
        where = ""
        if source is not None:
            where = source
            if line is not None:
                where += f":{line}"
                if column is not None:
                    where += f":{column}"
            where += ": "
        rule = ""
        if rule_index is not None:
            rule = f"rule #{rule_index}"
            if rule_name:
                rule += f" ({rule_name!r})"
            rule += ": "
        elif rule_name:
            rule = f"rule {rule_name!r}: "
        super().__init__(f"{where}{rule}{problem}")
