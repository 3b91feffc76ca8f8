"""The CLI without a model: every command's help, usage errors, refusals before any capture, the
store folder and the shared options, and how progress is drawn."""

import io
import json
import re
import time

import pytest

from skillgraft.cli.main import cli


def all_commands():
    return sorted(cli.commands)


@pytest.mark.parametrize("command", all_commands())
def test_every_command_has_help(runner, command):
    result = runner.invoke(cli, [command, "--help"])
    assert result.exit_code == 0, result.output
    assert "Usage:" in result.output and len(cli.commands[command].help or "") > 20


def test_usage_error_is_exit_2(runner):
    assert runner.invoke(cli, ["verify", "--samples", "zero"]).exit_code == 2


def invoke_json(runner, *args):
    result = runner.invoke(cli, [*args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_wrong_solution_is_refused_with_exit_1(runner, home):
    result = runner.invoke(cli, ["add-solution", "-q", "Capital of France?", "-a", "Lyon", "--verify", "exact", "--expected", "Paris"])
    assert result.exit_code == 1 and "refused" in result.stderr
    assert invoke_json(runner, "list")["rows"] == []


def test_bad_input_files_and_queries(runner, home, tmp_path):
    binary = tmp_path / "manual.bin"
    binary.write_bytes(b"\xff\xfe\x00 not text")
    result = runner.invoke(cli, ["add-manual", "bad", str(binary)])
    assert result.exit_code == 1 and "not UTF-8" in result.stderr
    missing = runner.invoke(cli, ["add-manual", "bad", str(tmp_path / "nope.txt")])
    assert missing.exit_code == 1 and "cannot read" in missing.stderr
    from skillgraft.store.block_store import BlockStore

    BlockStore(home).close()  # route only reads: it needs a store
    assert runner.invoke(cli, ["route", "bad \udcff bytes"]).exit_code == 1
    empty = runner.invoke(cli, ["route", "   "])
    assert empty.exit_code == 1 and "empty" in empty.stderr


READ_COMMANDS = (
    ["list"], ["show", "x"], ["get", "x"], ["route", "squash"], ["ask", "squash"], ["ledger"], ["check"],
    ["export", "bundle.tar"], ["rm", "x"], ["rename", "x", "y"], ["update", "x", "-d", "new"], ["recapture"],
    ["serve", "--port", "0"], ["mcp"],
)


@pytest.mark.parametrize("exists", [False, True])
def test_commands_that_read_refuse_a_folder_without_a_store(runner, tmp_path, exists):
    typo = tmp_path / "stor"
    if exists:
        typo.mkdir()
    for args in READ_COMMANDS:
        result = runner.invoke(cli, ["--home", str(typo), *args])
        assert result.exit_code == 1, (args, result.output)
        line = result.stderr.strip()
        assert len(line.splitlines()) == 1 and str(typo) in line and "add-manual" in line, (args, line)
    assert not (typo / "catalog.db").exists() and exists == typo.exists()


def test_home_and_debug_also_follow_the_command(runner, tmp_path, monkeypatch):
    from skillgraft.store.block_store import BlockStore

    store, decoy = tmp_path / "store", tmp_path / "decoy"
    BlockStore(store).close()
    monkeypatch.setenv("SKILLGRAFT_HOME", str(decoy))
    assert runner.invoke(cli, ["list"]).exit_code == 1
    assert invoke_json(runner, "list", "--home", str(store)) == {"rows": []}
    assert invoke_json(runner, "--home", str(decoy), "list", "--home", str(store)) == {"rows": []}
    debug = runner.invoke(cli, ["show", "nope", "--home", str(store), "--debug"])
    assert type(debug.exception).__name__ == "BlockNotFoundError"


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_activity_draws_only_on_a_terminal_and_erases_itself():
    from skillgraft.cli.main import Activity

    piped = io.StringIO()
    with Activity("capture", "loading the model", unit="tok", stream=piped) as progress:
        progress(512, 1024)
        progress(1024, 1024)
    assert re.fullmatch(r"capture: 1,024/1,024 tok in \d+\.\d s\n", piped.getvalue())
    failed = io.StringIO()
    with pytest.raises(RuntimeError), Activity("verify", "loading", stream=failed):
        raise RuntimeError("the error says it all")
    assert failed.getvalue() == ""
    uncounted = io.StringIO()
    with Activity("route", "loading the embedder", stream=uncounted):
        pass
    assert re.fullmatch(r"route: done in \d+\.\d s\n", uncounted.getvalue())

    terminal = Terminal()
    with Activity("capture", "loading the model", stream=terminal) as progress:
        time.sleep(0.25)
        progress(512, 1024)
        progress(1024, 1024)
    drawn = terminal.getvalue()
    assert "loading the model" in drawn and "50%" in drawn and "100%" in drawn
    assert "\n" not in drawn  # every line drawn is overwritten in place, none stays


def test_demo_shows_each_step_once_on_a_terminal(runner, monkeypatch):
    """The display only: the real demo runs in test_demo_json_is_ok."""
    import skillgraft.cli.common
    import skillgraft.demo

    def fake_demo(model=None, log=None):
        steps = [{"name": f"step {i}", "ok": True, "summary": f"summary {i}"} for i in range(3)]
        for step in steps:
            log(f"[ok] {step['name']}: {step['summary']}")
        return {"steps": steps, "ok": True}

    monkeypatch.setattr(skillgraft.demo, "run_demo", fake_demo)
    monkeypatch.setattr(skillgraft.cli.common, "is_terminal", lambda stream: True)
    result = runner.invoke(cli, ["demo"])
    assert result.exit_code == 0, result.output
    assert all(result.stdout.count(f"summary {i}") == 1 for i in range(3))
    assert "\n" not in result.stderr  # the live status lines are overwritten, not left behind


def test_check_says_what_to_run_for_each_skill_folder_that_changed_vanished_or_broke():
    from skillgraft.cli.blocks import _render_check

    text = _render_check({"blocks": 3, "ok": True, "problems": [], "repaired": [], "skills_changed": [
        {"name": "pdf", "version": 1, "folder": "/s/pdf", "change": "changed", "files": ["SKILL.md"]},
        {"name": "git", "version": 2, "folder": "/s/git", "change": "vanished"},
        {"name": "odd", "version": 1, "folder": "/s/odd", "change": "unreadable", "reason": "has no description"}]})
    pdf, git, odd = text.splitlines()[1:]
    assert "SKILL.md changed: skillgraft skills update pdf" in pdf
    assert "vanished" in git and "skillgraft skills rm git" in git and "update" not in git
    assert "has no description" in odd and "skills update odd" in odd
