import json

import pytest

from skillgraft.cli import cli


def all_commands():
    return sorted(cli.commands)


@pytest.mark.parametrize("command", all_commands())
def test_every_command_has_help(runner, command):
    result = runner.invoke(cli, [command, "--help"])
    assert result.exit_code == 0, result.output
    assert "Usage:" in result.output and len(cli.commands[command].help or "") > 20


def test_verify_json(runner):
    result = runner.invoke(cli, ["verify", "--samples", "2", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    for key in ("model", "samples", "sha_equal", "argmax_mismatch", "kl_median", "kl_p99", "fingerprint", "concat", "negative_control"):
        assert key in report
    assert report["sha_equal"] == 2


def test_user_error_is_one_line_and_exit_1(runner):
    result = runner.invoke(cli, ["verify", "--model", "no-such-model", "--json"])
    assert result.exit_code == 1
    assert result.stderr.strip().startswith("Error: unknown model 'no-such-model'")
    assert "Traceback" not in result.output and len(result.stderr.strip().splitlines()) == 1


def test_usage_error_is_exit_2(runner):
    assert runner.invoke(cli, ["verify", "--samples", "zero"]).exit_code == 2


def test_models_lists_embedded_models(runner):
    rows = json.loads(runner.invoke(cli, ["models", "--json"]).stdout)["rows"]
    assert {r["name"] for r in rows} == {"smollm2-135m", "gemma3-270m"}
    assert all(r["installed"] for r in rows)


def test_demo_json_is_ok(runner):
    result = runner.invoke(cli, ["demo", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["ok"] is True and report["steps"]


def invoke_json(runner, *args):
    result = runner.invoke(cli, [*args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_store_commands_round_trip(runner, home, tmp_path):
    manual = tmp_path / "manual.txt"
    manual.write_text("Skill manual: squash commits with git rebase -i HEAD~N and mark the rest as squash.")
    added = invoke_json(runner, "add-manual", "git-squash", str(manual), "--example", "how do I squash commits?")
    assert set(added) >= {"block_id", "tokens", "bytes", "sha256"}
    assert (home / "blocks" / f"{added['sha256']}.kv").stat().st_size == added["bytes"]
    routed = invoke_json(runner, "route", "squash my commits please")
    assert routed["decision"] == "graft" and routed["block_id"] == added["block_id"]
    assert set(routed) >= {"decision", "block_id", "score", "threshold", "reason"}
    method = tmp_path / "method.py"
    method.write_text("print(6 * 7)")
    solution = invoke_json(runner, "add-solution", "-q", "What is 6*7?", "-a", "42", "--method", str(method), "--verify", "python")
    assert solution["verified"] is True and solution["verifier"] == "python"
    asked = invoke_json(runner, "ask", "what is 6 * 7")
    assert (asked["decision"], asked["text"], asked["decoded_tokens"]) == ("exact", "42", 0)
    assert set(asked) >= {"text", "decision", "block_id", "decoded_tokens", "timings"}
    assert len(invoke_json(runner, "list")["rows"]) == 2
    assert invoke_json(runner, "show", "git-squash")["routing_keys"]
    assert invoke_json(runner, "check") == {"blocks": 2, "ok": True, "problems": [], "repaired": []}
    bundle = tmp_path / "bundle.tar"
    assert invoke_json(runner, "export", str(bundle))["blocks"] == 2
    assert invoke_json(runner, "rm", solution["block_id"])["removed"] == solution["block_id"]
    assert invoke_json(runner, "import", str(bundle))["blocks"] == 1
    assert invoke_json(runner, "ledger", "--limit", "5")["rows"]


def test_wrong_solution_is_refused_with_exit_1(runner, home):
    result = runner.invoke(cli, ["add-solution", "-q", "Capital of France?", "-a", "Lyon", "--verify", "exact", "--expected", "Paris"])
    assert result.exit_code == 1 and "refused" in result.stderr
    assert invoke_json(runner, "list")["rows"] == []


def test_corrupt_block_makes_ask_fail_with_one_line_naming_it(runner, home, tmp_path):
    manual = tmp_path / "manual.txt"
    manual.write_text("Skill manual: squash commits with git rebase -i HEAD~N and mark the rest as squash.")
    added = invoke_json(runner, "add-manual", "git-squash", str(manual), "--example", "how do I squash commits?")
    path = home / "blocks" / f"{added['sha256']}.kv"
    data = bytearray(path.read_bytes())
    data[1000] ^= 0xFF
    path.write_bytes(bytes(data))
    result = runner.invoke(cli, ["ask", "how do I squash commits?"])
    assert result.exit_code == 1
    assert added["block_id"] in result.stderr and len(result.stderr.strip().splitlines()) == 1
    report = runner.invoke(cli, ["check", "--json"])
    assert report.exit_code == 1 and json.loads(report.stdout)["problems"][0]["block_id"] == added["block_id"]


def test_bad_input_files_and_queries(runner, home, tmp_path):
    binary = tmp_path / "manual.bin"
    binary.write_bytes(b"\xff\xfe\x00 not text")
    result = runner.invoke(cli, ["add-manual", "bad", str(binary)])
    assert result.exit_code == 1 and "not UTF-8" in result.stderr
    missing = runner.invoke(cli, ["add-manual", "bad", str(tmp_path / "nope.txt")])
    assert missing.exit_code == 1 and "cannot read" in missing.stderr
    assert runner.invoke(cli, ["route", "bad \udcff bytes"]).exit_code == 1
    empty = runner.invoke(cli, ["route", "   "])
    assert empty.exit_code == 1 and "empty" in empty.stderr


def test_calibrate_from_files(runner, home, tmp_path):
    manual = tmp_path / "manual.txt"
    manual.write_text("Skill manual: squash commits with git rebase -i HEAD~N and mark the rest as squash.")
    invoke_json(runner, "add-manual", "git-squash", str(manual), "--example", "how do I squash commits?")
    (tmp_path / "in.tsv").write_text("squash the last two commits\tgit-squash\ncombine my commits\tgit-squash\n")
    (tmp_path / "ood.txt").write_text("what's the weather tomorrow\nbook a flight to Rome\n")
    report = invoke_json(runner, "calibrate", "--in", str(tmp_path / "in.tsv"), "--ood", str(tmp_path / "ood.txt"))
    assert set(report) >= {"threshold", "false_accept", "false_abstain"}
    (tmp_path / "bad.tsv").write_text("no tab here\n")
    bad = runner.invoke(cli, ["calibrate", "--in", str(tmp_path / "bad.tsv"), "--ood", str(tmp_path / "ood.txt")])
    assert bad.exit_code == 1 and "line 1" in bad.stderr
