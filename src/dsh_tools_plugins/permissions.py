"""Permission rules: allow, deny or ask by tool-name glob and argument predicates.

:class:`PermissionRules` is a ``dsh_tools_pre_execute`` policy built from Python
(``PermissionRules([Rule("deny", "run_command", command_matches=r"\\brm\\b")])``) or from a
TOML file (:meth:`PermissionRules.from_toml`)::

    default = "ask"                  # unmatched calls: "allow", "deny" or "ask"

    [[rule]]
    name = "read anywhere"
    action = "allow"
    tool = ["read_file", "grep"]     # one glob or a list (fnmatch syntax)

    [[rule]]
    name = "no system files"
    action = "deny"
    tool = "*"
    path_prefix = ["/etc", "/usr"]   # every path the tool declares, resolved
    enforce = "guard"                # also a guard: no other plugin can re-allow it

A rule matches a call when its tool glob matches the name and every predicate it has
holds. Among the matching rules **deny wins, then ask, then allow**, whatever their order;
no matching rule means ``default``. A ``deny`` becomes the model-facing reason, an
``ask`` goes to the registry's approval service with a reason naming the rule. A default
of ``"allow"`` abstains (returns ``None``), so later pre-execute policies still decide.

Predicates, all optional:

``path_prefix``
    for a tool that declares its path arguments (:class:`~dsh_tools.ToolPaths`; every
    reference tool does): a ``deny`` or ``ask`` rule matches when *any* place the call may
    touch lies inside a prefix, an ``allow`` rule only when *every* place does. Each
    declared argument is resolved the way the tool resolves it, links followed; relative
    prefixes are resolved through the same tool, absolute ones as given; a pattern
    narrows its search root to its literal directory; anything unresolvable matches deny
    and ask rules and never an allow rule (:mod:`dsh_tools_plugins._reach` has the
    details). For a tool that declares none: the argument named by ``argument``
    (default ``"path"``) is a string inside one of the prefixes. Both sides are
    normalised first (``os.path.normpath``: ``a/./b``, ``a//b`` and ``a/x/../b`` are
    ``a/b``) and compared by whole components, so ``/work/src`` covers ``/work/src`` and
    ``/work/src/x`` but not ``/work/srcx``, and ``/work/src/../../etc/passwd`` is *not*
    inside ``/work/src``. Relative paths are compared as written (no working directory
    is assumed); a relative path that climbs out with ``..`` is never inside a relative
    prefix that does not climb as far.
``argv_prefix``
    the program and arguments the call runs start with these words (``["git", "status"]``),
    or with one of several such lists. They are the ``"argv"`` argument (run without a
    shell), or the ``"command"`` argument split with :mod:`shlex` when it is one simple
    command: no operators, redirections, substitutions, expansions, globbing or leading
    variable assignments (:func:`dsh_tools_plugins._shell.simple_argv` has the details).
``argv_rest``
    with ``argv_prefix``: ``fnmatch`` globs that every word after the prefix must match
    (``[]``: nothing may follow the prefix; absent: anything may).
``command_matches``
    a regular expression searched (``re.search``; anchor it with ``^`` yourself) in the
    ``"command"`` argument, or in the ``"command"``/``"argv"`` list joined with spaces.
    Text says nothing about what a shell will run (``git status; rm -rf ~`` starts with
    ``git status``), so an ``allow`` rule may use it only together with ``argv_prefix``;
    alone it is for ``deny`` and ``ask`` rules.
``argument_equals``
    ``{name = value}``: each named argument equals the JSON value (``true`` is not ``1``).
``sandboxed``
    ``true``: the policy's sandbox settings (a ``[sandbox]`` table, see
    :func:`configured_sandbox`) are *contained*, so every command runs in the sandbox
    offline or not at all (mode ``required``, network off); ``false``: they are not.

A predicate whose argument is missing or of the wrong type does not match (except a
declared path argument of the wrong type, which cannot be resolved). So a ``deny`` rule
with ``path_prefix`` does not stop a call of an undeclared tool that has no ``path``: deny
the tool outright, or use the ``ask`` default, when that matters. The argv predicates are stricter
where a call has a command but no plain argv (a compound shell command, both ``command``
and ``argv``, a malformed ``argv``): an ``allow`` rule does not match it, a ``deny`` or
``ask`` rule does, since the command may run anything.

``enforce = "guard"`` (deny rules only) also returns the rule from a ``dsh_tools_guard``
implementation. Pre-execute is ``firstresult``: another plugin's earlier ``Allow`` would
skip these rules, but guards run for every allowed call and nothing can re-allow them.

A rule whose tool glob matches no tool the registry knows (a typo: ``read-file``,
``Read_File``, `` read_file``) can never decide anything. Rules cannot tell when they
load, since tools may be registered after them: :func:`unmatched_rules` (or
:meth:`PermissionRules.unknown_tools`) finds them once every tool is registered, and
``dsh-tools`` warns of them when it starts (an error under ``--strict`` and in
``dsh-tools check``).

Malformed rule files raise :class:`RulesError` naming the file, the line and the rule. It
is a :class:`~dsh_tools.errors.PluginConfigError`, so the ``default_permissions`` entry
point stops :func:`~dsh_tools.load_plugins` rather than leaving the host without
the rules it asked for. Unknown keys are errors at every level (``acton``,
``comand_matches``), never ignored.
TOML syntax errors carry their own line and column. For a rule that parses but is
invalid, the line is found by counting ``[[rule]]`` headers in the text (the *n*-th
header starts the *n*-th rule), then the offending key's ``key =`` line inside that table
if it is there. Rules written as an inline array (``rule = [{...}]``) have no headers; the
error then points at the ``rule =`` line.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from dsh_tools._plugins.settings import RULES_ENV, plugin_settings

from ._rules.error import RulesError
from ._rules.fields import Action
from ._rules.limit_tables import LimitTables
from ._rules.policy import PermissionRules
from ._rules.rule import Rule
from ._rules.sandbox_table import NETWORK_ENV_VAR, SANDBOX_ENV_VAR, with_overrides
from ._rules.summary import summary
from .sandbox._settings import SandboxSettings

if TYPE_CHECKING:
    from dsh_tools._registry import ToolRegistry

    from .cache import ResultCache
    from .limits import CallBudgets, ConcurrencyLimit

__all__ = [
    "NETWORK_ENV_VAR",
    "RULES_ENV_VAR",
    "SANDBOX_ENV_VAR",
    "Action",
    "PermissionRules",
    "Rule",
    "RulesError",
    "configured_sandbox",
    "default_permissions",
    "default_rules",
    "rules_summary",
    "unmatched_rules",
]

RULES_ENV_VAR: Final = RULES_ENV
"""Environment variable naming the TOML rules file :func:`default_permissions` loads."""

_DEFAULT_SOURCE: Final = "default_rules()"
"""How messages and records name the built-in rules."""


def unmatched_rules(registry: ToolRegistry) -> list[RulesError]:
    """The rules of every :class:`PermissionRules` plugin of ``registry`` whose tool globs
    match no tool the registry shows (:meth:`~dsh_tools.ToolRegistry.names`; tools of
    plugins and of connected MCP servers included), as :meth:`PermissionRules.unknown_tools`
    reports them. Call it once every tool is registered. The built-in
    :func:`default_rules` are not checked: they name the reference tools whether or not
    they are loaded."""
    names = registry.names()
    problems = []
    for _, plugin in registry.plugin_manager.list_name_plugin():
        if isinstance(plugin, PermissionRules) and plugin.source != _DEFAULT_SOURCE:
            problems += plugin.unknown_tools(names)
    return problems


def rules_summary(registry: ToolRegistry) -> list[str]:
    """What the permission rules loaded into ``registry`` do, told to a person: for each
    :class:`PermissionRules` plugin, its source, a line per rule, and what a call no rule
    matches gets, with the tools no rule names (``dsh-tools check`` prints it). Without
    any, one line saying that calls run unless another plugin decides."""
    names = registry.names()
    lines: list[str] = []
    for _, plugin in registry.plugin_manager.list_name_plugin():
        if isinstance(plugin, PermissionRules):
            lines += summary(plugin, names, plugin.source == _DEFAULT_SOURCE)
    return lines or ["permission rules: none loaded, so calls run unless another plugin decides"]


def default_rules(sandbox: SandboxSettings | None = None) -> PermissionRules:
    """The default policy for the reference tools.

    ``read_file``, ``list_dir``, ``glob`` and ``grep`` are allowed; ``write_file`` and
    ``edit_file`` ask. ``run_command`` asks too, unless ``sandbox`` (the settings its
    commands run under) is ``contained``: mode ``required`` and the network off. Then
    every command runs without asking, because the sandbox, not a pattern over the
    command's text, keeps it in the workspace; a command that could reach the network,
    or run outside the sandbox, still asks. Every other tool asks too (``default =
    "ask"``, as in a rules file): a tool these rules do not know, a third-party plugin's
    or a remote MCP server's, may do anything, so a person decides before its first call
    (an ``*-always`` answer is remembered), as agents such as Claude Code ask before an
    unknown tool. A rules file with ``allow`` rules, or ``default = "allow"``, lets them
    run.
    """
    return PermissionRules(
        [
            Rule("allow", ("read_file", "list_dir", "glob", "grep"), name="read-only tools"),
            Rule("ask", ("write_file", "edit_file"), name="tools that change files"),
            Rule(
                "ask",
                "run_command",
                sandboxed=False,
                name="commands not confined to an offline sandbox",
            ),
            Rule(
                "allow",
                "run_command",
                sandboxed=True,
                name="commands confined to an offline sandbox",
            ),
        ],
        default="ask",
        source=_DEFAULT_SOURCE,
        sandbox=sandbox,
    )


def configured_sandbox() -> SandboxSettings:
    """The sandbox settings the host configured, for the entry points.

    The ``[sandbox]`` table of the rules file (the ``rules`` given to
    :func:`~dsh_tools.load_plugins`, else ``$DSH_TOOLS_RULES``), then the
    ``sandbox`` mode and ``network`` (else ``$DSH_TOOLS_SANDBOX`` and
    ``$DSH_TOOLS_NETWORK``) over it: the command's ``--sandbox`` and ``--network`` set
    those, so its flags win over the file. Without any of them: mode ``auto``, network off. A bad
    value raises :class:`RulesError` naming the variable or the file and line.
    """
    path = plugin_settings().rules
    settings = PermissionRules.from_toml(path).sandbox if path else None
    return with_overrides(settings or SandboxSettings())


def default_permissions() -> PermissionRules:
    """The ``dsh_tools.plugins`` entry point factory: the rules in the TOML file
    :func:`~dsh_tools.load_plugins` was given (``rules=``, else
    ``$DSH_TOOLS_RULES``), or :func:`default_rules` when there is none; either way
    with the sandbox settings of :func:`configured_sandbox`, which the ``workspace``
    entry point gives ``run_command`` too.

    A set but unreadable or malformed file raises :class:`RulesError`, a
    :class:`~dsh_tools.errors.PluginConfigError`: :func:`~dsh_tools.load_plugins`
    raises it in turn (strict or not), so a host never runs with no rules, or with the
    defaults, in place of the file it named.
    """
    path = plugin_settings().rules
    if not path:
        return default_rules(with_overrides(SandboxSettings()))
    rules = PermissionRules.from_toml(path)
    sandbox = with_overrides(rules.sandbox or SandboxSettings())
    policy = PermissionRules(
        rules.rules,
        rules.default,
        source=rules.source,
        sandbox=sandbox,
        trusted_mcp_servers=rules.trusted_mcp_servers,
    )
    policy._places = rules._places  # where each rule is, for decision records
    return policy


def configured_limits() -> ConcurrencyLimit | None:
    """The ``limits`` entry point: the ``[limits]`` table of the host's rules file
    (nothing when there is none), in the store its ``store`` names."""
    return _limit_tables().opened().concurrency


def configured_budgets() -> CallBudgets | None:
    """The ``budgets`` entry point: the rules file's ``[[budget]]`` tables."""
    return _limit_tables().opened().budgets


def configured_cache() -> ResultCache | None:
    """The ``cache`` entry point: the rules file's ``[cache]`` table."""
    return _limit_tables().cache


def _limit_tables() -> LimitTables:
    """The limit tables of the host's rules file (the ``rules`` given to ``load_plugins``,
    else ``$DSH_TOOLS_RULES``; none without one); a broken file raises ``RulesError``, so
    the entry point refuses to load."""
    path = plugin_settings().rules
    return PermissionRules.from_toml(path).limits if path else LimitTables()
