"""Command rules allow by program and arguments, never by text (issue 16, r03_doc_allow_rule.sh).

The allow rule docs/policies.md used to recommend, ``command_matches = '^git (status|diff|
log)\\b'``, allowed ``git status; touch pwned``. A regex over shell text cannot make an
allow rule safe; ``argv_prefix`` matches what will run, and only for one simple command.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dsh_tools._models import Allow
from dsh_tools_plugins._shell import simple_argv
from dsh_tools_plugins.permissions import PermissionRules, Rule, RulesError
from fake_dists import run_dsh
from sandbox_owner import give_away

DOCUMENTED_REGEX_RULE = """\
default = "ask"
[[rule]]
name = "git status and diff"
action = "allow"
tool = "run_command"
command_matches = '^git (status|diff|log)\\b'
"""

ARGV_RULE = """\
default = "ask"
[[rule]]
name = "echo and printf"
action = "allow"
tool = "run_command"
argv_prefix = [["echo"], ["printf", "%s"]]
"""


def run_command_under(rules_text: str, tmp_path: Path, command: str) -> tuple[Path, str, str]:
    """``dsh-tools call run_command`` under these rules: (workspace, exit code, output)."""
    rules = tmp_path / "rules.toml"
    rules.write_text(rules_text, encoding="utf-8")
    workspace = tmp_path / "ws"
    workspace.mkdir(exist_ok=True)
    give_away(workspace)  # a root host runs sandboxed commands as the workspace's owner
    arguments = f'{{"command": "{command}"}}'
    base = ("--workspace", str(workspace), "--rules", str(rules))
    done = run_dsh(*base, "call", "run_command", arguments)
    return workspace, str(done.returncode), done.stdout + done.stderr


def test_the_regex_allow_rule_from_the_old_docs_is_refused(tmp_path: Path) -> None:
    attack = "git status 2>/dev/null; touch pwned; echo ran"
    workspace, code, output = run_command_under(DOCUMENTED_REGEX_RULE, tmp_path, attack)
    assert code == "2"
    assert list(workspace.iterdir()) == []
    rules = tmp_path / "rules.toml"
    assert f"{rules}:6: rule #1 ('git status and diff'): command_matches cannot make" in output
    assert "argv_prefix" in output


def test_an_argv_rule_runs_the_simple_command_and_asks_for_anything_more(tmp_path: Path) -> None:
    workspace, code, output = run_command_under(ARGV_RULE, tmp_path, "echo ran")
    assert code == "0", output
    assert "ran" in output
    for attack in ("echo a; touch pwned", "echo $(touch pwned)", "echo a > pwned"):
        _, code, output = run_command_under(ARGV_RULE, tmp_path, attack)
        assert code == "1"
        assert "✗ failed (DENIED)" in output  # asked, and nobody can answer here
    assert list(workspace.iterdir()) == []


def echo_rules(action: str = "allow") -> PermissionRules:
    return PermissionRules([Rule(action, "run_command", argv_prefix=["echo"])], default="ask")


@pytest.mark.parametrize(
    "command",
    [
        "echo a; touch x",
        "echo a && touch x",
        "echo a || touch x",
        "echo a | sh",
        "echo a & touch x",
        "echo a > x",
        "echo a >> x",
        "echo a < x",
        "echo a 2>x",
        "echo $(touch x)",
        "echo `touch x`",
        'echo "$(touch x)"',
        'echo "`touch x`"',
        'echo "\\$HOME"',
        "echo $HOME",
        "echo ${HOME}",
        "echo $((1+1))",
        "echo a\ntouch x",
        "echo a\rtouch x",
        "echo a\\\ntouch x",
        "echo *",
        "echo ?",
        "echo [ab]",
        "echo {a,b}",
        "echo ~",
        "echo ~root/x",
        "echo --prefix=~/x",
        "echo PATH:~/bin",
        "echo a # comment",
        "echo !!",
        "(echo a)",
        "{ echo a; }",
        "FOO=bar echo a",
        "'FOO=bar' echo a",
        "time echo a",
        "if echo a; then touch x; fi",
        "echo 'unterminated",
        'echo "unterminated',
        "echo trailing\\",
        "",
        "   ",
        "echo a\x00b",
        "echo <(touch x)",
    ],
)
def test_allow_rules_never_match_more_than_one_simple_command(command: str) -> None:
    assert simple_argv(command) is None
    assert echo_rules().decide("run_command", {"command": command}) != Allow()
    # A deny or ask rule cannot rule such a command out, so it applies.
    assert echo_rules("deny").decide("run_command", {"command": command}) != Allow()
    assert echo_rules("ask").decide("run_command", {"command": command}) != Allow()


@pytest.mark.parametrize(
    ("command", "argv"),
    [
        ("echo", ("echo",)),
        ("echo hi", ("echo", "hi")),
        ("  echo   a\tb  ", ("echo", "a", "b")),
        ("echo 'a; b' \"c | d\"", ("echo", "a; b", "c | d")),
        ("echo 'it''s'", ("echo", "its")),
        ("echo 'a $HOME `x` * ~'", ("echo", "a $HOME `x` * ~")),
        ('echo "a \\" b" "back\\\\slash"', ("echo", 'a " b', "back\\slash")),
        ("echo a\\;b a\\ b", ("echo", "a;b", "a b")),
        ("echo key=value --flag=1 -x", ("echo", "key=value", "--flag=1", "-x")),
        ("echo HEAD^ a%b a@b a:b a,b a+b", ("echo", "HEAD^", "a%b", "a@b", "a:b", "a,b", "a+b")),
        ("echo HEAD~1 a~ '~'", ("echo", "HEAD~1", "a~", "~")),
        ("echo 'line\nbreak'", None),
    ],
)
def test_one_simple_command_is_read_as_sh_reads_it(
    command: str, argv: tuple[str, ...] | None
) -> None:
    assert simple_argv(command) == argv
    if argv is not None:
        assert echo_rules().decide("run_command", {"command": command}) == Allow()


_PIECES = [
    *("a", "b", " ", "\t", "=", "-", "^", "%", ":", "é", "\u00a0"),  # plain
    *("\\\\", "\\ ", "\\;", "\\'", '\\"', "\\$", "\\a"),  # escaped outside quotes
    *("''", "'a b'", "'$x;`*'", "'\\'", "'\"'"),  # single-quoted
    *('""', '"a b"', '"\\\\"', '"\\""', '"\\a"', '"\'"', '"*;|"'),  # double-quoted
    *(";", "$", "`", "*", "~", "#", "\n", "'", '"', "\\"),  # special or unbalanced
]
_TRICKY = st.lists(st.sampled_from(_PIECES), max_size=8).map("".join)


@pytest.mark.skipif(shutil.which("sh") is None, reason="needs /bin/sh")
@settings(max_examples=150, deadline=None)
@given(_TRICKY)
def test_what_simple_argv_accepts_is_exactly_what_sh_runs(text: str) -> None:
    """Differential: sh prints each word it passes, and they are the words we read."""
    command = f"printf %s\\\\0 first {text}"
    words = simple_argv(command)
    if words is None:
        return
    shown = subprocess.run(["sh", "-c", command], capture_output=True, check=True, timeout=10)
    assert tuple(shown.stdout.decode("utf-8").split("\0")[:-1]) == words[2:]


def test_argv_form_matches_without_a_shell_and_rest_globs_narrow_it() -> None:
    rules = PermissionRules(
        [
            Rule(
                "allow",
                "run_command",
                argv_prefix=[["git", "status"], ["git", "diff"]],
                argv_rest=["--stat", "--name-only", "[!-]*"],
                name="read-only git",
            )
        ],
        default="deny",
    )

    def decide(**arguments: object) -> object:
        return rules.decide("run_command", arguments)

    assert decide(argv=["git", "status"]) == Allow()
    assert decide(argv=["git", "diff", "--stat", "HEAD~1"]) == Allow()
    assert decide(argv=["git", "diff", "a; rm -rf ~"]) == Allow()  # one literal argument
    assert decide(command="git diff --name-only src") == Allow()
    for refused in (
        {"argv": ["git", "diff", "--output=/home/me/.bashrc"]},
        {"argv": ["git", "-c", "core.pager=sh", "diff"]},
        {"argv": ["/usr/bin/git", "status"]},
        {"argv": ["git"]},
        {"argv": []},
        {"argv": "git status"},
        {"argv": ["git", "status", 3]},
        {"command": "git status", "argv": ["git", "status"]},
        {"command": "git status; rm -rf ~"},
        {},
    ):
        assert decide(**refused) != Allow(), refused


def test_argv_deny_rules_apply_to_commands_they_cannot_see_into() -> None:
    rules = PermissionRules(
        [
            Rule("deny", "run_command", argv_prefix=["rm"], name="no rm"),
            Rule("allow", "run_command", argv_prefix=["ls"]),
        ],
        default="allow",
    )
    assert rules.decide("run_command", {"argv": ["ls", "-l"]}) == Allow()
    assert rules.decide("run_command", {"command": "rm -rf build"}) != Allow()
    assert rules.decide("run_command", {"command": "ls && rm -rf build"}) != Allow()
    assert rules.decide("run_command", {"command": "echo hi"}) == Allow()  # simple, not rm
    assert rules.decide("read_file", {"path": "x"}) == Allow()  # no command: not matched


def test_rule_fields_are_validated() -> None:
    with pytest.raises(RulesError, match="command_matches cannot make an allow rule safe"):
        Rule("allow", "run_command", command_matches="^git status$")
    # Narrowing an argv rule with a regex is fine, and so are regex deny and ask rules.
    Rule("allow", "run_command", argv_prefix=["git", "log"], command_matches="--oneline")
    Rule("deny", "run_command", command_matches=r"\brm\b")
    Rule("ask", "run_command", command_matches=r"\bgit push\b")
    with pytest.raises(RulesError, match="argv_prefix must be a list of non-empty words"):
        Rule("allow", argv_prefix="git status")
    with pytest.raises(RulesError, match="argv_prefix must be"):
        Rule("allow", argv_prefix=[["git", ""]])
    with pytest.raises(RulesError, match="argv_rest needs argv_prefix"):
        Rule("allow", argv_rest=["*"])
    with pytest.raises(RulesError, match="argv_rest must be a list of glob strings"):
        Rule("allow", argv_prefix=["ls"], argv_rest="*")


def test_the_rules_file_in_the_docs_allows_only_what_it_says() -> None:
    page = Path(__file__).resolve().parents[2] / "docs" / "policies.md"
    text = page.read_text(encoding="utf-8")
    example = text.split("A rules file:\n\n```toml\n", 1)[1].split("```", 1)[0]
    rules = PermissionRules.from_toml_text(example, source="docs/policies.md")

    def decide(command: str) -> object:
        return rules.decide("run_command", {"command": command})

    for allowed in ("git status", "git diff --stat HEAD~1", "git log --oneline src"):
        assert decide(allowed) == Allow(), allowed
    for attack in (
        "git status; touch pwned",
        "git status 2>/dev/null; touch pwned; echo ran",
        "git diff --output=/home/me/.bashrc",
        "git log $(touch pwned)",
        "git -c core.pager=sh log",
    ):
        assert decide(attack) != Allow(), attack
    assert decide("git push --force") != Allow()
