"""`dsh-tools explain`, `call --explain` and `replay --explain`, run as installed commands."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from dsh_tools.cli import EXIT_CALL_FAILED, EXIT_OK, EXIT_PLUGINS, EXIT_USAGE, EXIT_WOULD_ASK
from fake_dists import Site, run_dsh
from sandbox_owner import give_away

RULES = """\
default = "allow"

[[rule]]
name = "no-notes"
action = "deny"
tool = "read_file"
argument_equals = {path = "secret.txt"}
reason = "secrets stay secret"

[[rule]]
action = "ask"
tool = "write_file"
"""


@pytest.fixture
def rules(tmp_path: Path) -> Path:
    """The rules file, beside (not inside) the workspace ``tmp_path / "ws"``."""
    path = tmp_path / "rules.toml"
    path.write_text(RULES, encoding="utf-8")
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "notes.txt").write_text("alpha\n", encoding="utf-8")
    return path


def test_explain_exits_0_1_or_10_and_names_the_rule(rules: Path, tmp_path: Path) -> None:
    common = ("--workspace", str(tmp_path / "ws"), "--rules", str(rules), "explain")

    run = run_dsh(*common, "read_file", '{"path": "notes.txt"}')
    denied = run_dsh(*common, "read_file", '{"path": "secret.txt"}')
    asked = run_dsh(*common, "write_file", '{"path": "new.txt", "content": "x"}')
    invalid = run_dsh(*common, "read_file", '{"path": 3}')

    assert (run.returncode, run.stdout) == (EXIT_OK, "would run\n")
    assert denied.returncode == EXIT_CALL_FAILED
    assert denied.stdout.splitlines()[:4] == [
        f"would deny (DENIED): secrets stay secret (permission rule 'no-notes' in {rules})",
        "  decided by pre_execute default_permissions [dsh-tools]",
        f"  rule at {rules}:3",
        "    [[rule]]",
    ]
    assert '    argument_equals = {path = "secret.txt"}' in denied.stdout
    assert asked.returncode == EXIT_WOULD_ASK
    assert "if approved: would run" in asked.stdout
    assert invalid.returncode == EXIT_CALL_FAILED
    assert invalid.stdout.startswith("invalid (INVALID_ARGS)")
    assert not (tmp_path / "ws" / "new.txt").exists()


def test_explain_json_and_no_audit_entry(rules: Path, tmp_path: Path) -> None:
    log = tmp_path / "audit.jsonl"
    run = run_dsh(
        "--workspace",
        str(tmp_path / "ws"),
        "--rules",
        str(rules),
        "--audit-log",
        str(log),
        "explain",
        "--json",
        "read_file",
        '{"path": "secret.txt"}',
    )

    assert run.returncode == EXIT_CALL_FAILED, run.stderr
    data = json.loads(run.stdout)
    assert (data["outcome"], data["code"]) == ("deny", "DENIED")
    assert data["decided_by"]["detail"]["rule"]["name"] == "no-notes"
    assert data["decided_by"]["detail"]["rule"]["line"] == 3
    assert not log.exists()


def test_explain_honours_the_sandbox_flags_as_call_does(tmp_path: Path) -> None:
    """The default rules let commands run without asking only while they are sure to run
    in the sandbox, offline (``--sandbox required``); otherwise they ask."""
    command = ("explain", "run_command", '{"argv": ["echo", "hi"]}')
    env = {"DSH_TOOLS_SANDBOX": "", "DSH_TOOLS_NETWORK": ""}
    give_away(tmp_path)  # else a root host refuses every sandboxed command (see below)

    confined = run_dsh("--workspace", str(tmp_path), "--sandbox", "required", *command, env=env)
    loose = run_dsh("--workspace", str(tmp_path), "--sandbox", "auto", *command, env=env)
    missing = run_dsh("--workspace", str(tmp_path / "nowhere"), *command, env=env)

    assert confined.returncode == EXIT_OK, confined.stdout + confined.stderr
    assert loose.returncode == EXIT_WOULD_ASK, loose.stdout + loose.stderr
    assert missing.returncode == EXIT_USAGE
    assert "--workspace" in missing.stderr


def test_call_explain_prints_the_record_and_replay_explain_reads_it(
    rules: Path, tmp_path: Path
) -> None:
    log = tmp_path / "audit.jsonl"
    common = ("--workspace", str(tmp_path / "ws"), "--rules", str(rules), "--audit-log", str(log))

    denied = run_dsh(*common, "call", "--explain", "read_file", '{"path": "secret.txt"}')
    done = run_dsh(*common, "call", "--explain", "--json", "read_file", '{"path": "notes.txt"}')
    replayed = run_dsh("--workspace", str(tmp_path / "ws"), "replay", "--explain", str(log))

    assert denied.returncode == EXIT_CALL_FAILED
    card, record = denied.stdout.split("decision record of read_file ")
    assert "✗ failed (DENIED)" in card
    assert record.splitlines()[1:3] == [
        "  dispatches: 0, " + record.splitlines()[1].split(", ")[1],
        "  call         pipeline: entered (0 ms)",
    ]
    assert "pre_execute  default_permissions [dsh-tools]: deny: secrets stay secret" in record
    assert f"rule at {rules}:3" in record
    data = json.loads(done.stdout)
    assert data["decisionRecord"]["outcome"] == "ok"
    assert data["decisionRecord"]["dispatches"] == 1
    assert replayed.returncode == EXIT_OK, replayed.stderr
    assert replayed.stdout.count("decision record of read_file") == 2
    assert f"rule at {rules}:3" in replayed.stdout


def test_replay_explain_of_an_old_log_says_there_is_no_record(tmp_path: Path) -> None:
    log = tmp_path / "old.jsonl"
    events = [
        {"event": "tool/call", "time": "t", "call_id": "c1", "name": "list_dir", "agent": None},
        {
            "event": "tool/result",
            "time": "t",
            "call_id": "c1",
            "name": "list_dir",
            "agent": None,
            "is_error": False,
            "content": [],
        },
    ]
    log.write_text("".join(json.dumps(event) + "\n" for event in events), encoding="utf-8")

    replayed = run_dsh("--no-plugins", "replay", "--explain", str(log))

    assert replayed.returncode == EXIT_OK, replayed.stderr
    assert "no decision record (written before records were kept)" in replayed.stdout


def test_the_would_ask_code_is_documented() -> None:
    assert EXIT_WOULD_ASK not in (2, 3, 4)
    cli_page = (Path(__file__).parents[1] / "docs" / "cli.md").read_text(encoding="utf-8")
    assert textwrap.dedent(f"| {EXIT_WOULD_ASK} |") in cli_page


def test_explain_refuses_to_answer_while_a_policy_plugin_failed_to_load(tmp_path: Path) -> None:
    """A policy that did not load cannot say what it would deny: exit 3, as for call."""
    site = Site.fresh(tmp_path / "site")
    site.dist("acme-broken", {"dsh_tools.plugins": {"acme": f"{site.pkg}.missing:Policy"}})
    command = ("--workspace", str(tmp_path), "explain", "list_dir")

    refused = run_dsh(*command, sites=(site,))
    allowed = run_dsh("--allow-broken-plugins", *command, sites=(site,))

    assert refused.returncode == EXIT_PLUGINS
    assert "[dsh_tools.plugins] acme (acme-broken 1.2.3)" in refused.stderr
    assert (allowed.returncode, allowed.stdout) == (EXIT_OK, "would run\n")
