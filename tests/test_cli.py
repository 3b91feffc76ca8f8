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
