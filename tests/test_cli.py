import json
import re

import pytest

from skillgraft.cli.main import cli


@pytest.mark.model
def test_verify_json(runner):
    """The CLI's report (one sample: tests/test_exactness.py and the README's steps verify more)."""
    result = runner.invoke(cli, ["verify", "--samples", "1", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    for key in ("model", "samples", "sha_equal", "argmax_mismatch", "kl_median", "kl_p99", "fingerprint", "concat", "negative_control"):
        assert key in report
    assert report["samples"] == report["sha_equal"] == 1


def test_user_error_is_one_line_and_exit_1(runner):
    result = runner.invoke(cli, ["verify", "--model", "no-such-model", "--json"])
    assert result.exit_code == 1
    assert result.stderr.strip().startswith("Error: unknown model 'no-such-model'")
    assert "Traceback" not in result.output and len(result.stderr.strip().splitlines()) == 1


def test_models_lists_embedded_models(runner):
    rows = json.loads(runner.invoke(cli, ["models", "--json"]).stdout)["rows"]
    assert {r["name"] for r in rows} == {"smollm2-135m", "gemma3-270m", "qwen2.5-coder-0.5b"}
    assert all(r["installed"] for r in rows)


def test_models_names_the_install_command_only_for_an_encoder_not_installed(runner, monkeypatch):
    from skillgraft.routing.model_parts import SPLIT_MODELS

    for installed in (True, False):
        monkeypatch.setattr(type(SPLIT_MODELS["mpnet"]), "installed", lambda self, installed=installed: installed)
        encoders = json.loads(runner.invoke(cli, ["models", "--json"]).stdout)["encoders"]
        mpnet = next(e for e in encoders if e["name"] == "mpnet")
        assert mpnet["installed"] is installed and ("models install mpnet" in mpnet["description"]) is not installed


@pytest.mark.model
@pytest.mark.sandbox
def test_demo_json_is_ok(runner):
    result = runner.invoke(cli, ["demo", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["ok"] is True and report["steps"]


def invoke_json(runner, *args):
    result = runner.invoke(cli, [*args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.mark.model
@pytest.mark.sandbox
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
    plain = invoke_json(runner, "ask", "what is 6 * 7", "--no-route", "--max-tokens", "4")
    assert (plain["decision"], plain["block_id"], plain["recall"]["decision"]) == ("abstain", None, "abstain")
    assert plain["decoded_tokens"] > 0 and "route=False" in plain["reason"]
    assert len(invoke_json(runner, "list")["rows"]) == 2
    assert invoke_json(runner, "show", "git-squash")["routing_keys"]
    assert invoke_json(runner, "check") == {"blocks": 2, "ok": True, "problems": [], "repaired": []}
    bundle = tmp_path / "bundle.tar"
    assert invoke_json(runner, "export", str(bundle))["blocks"] == 2
    assert invoke_json(runner, "rm", solution["block_id"])["removed"] == solution["block_id"]
    assert invoke_json(runner, "import", str(bundle))["blocks"] == 1
    assert invoke_json(runner, "ledger", "--limit", "5")["rows"]


@pytest.mark.model
def test_a_corrupt_block_is_never_grafted_and_ask_says_which(runner, home, tmp_path):
    manual = tmp_path / "manual.txt"
    manual.write_text("Skill manual: squash commits with git rebase -i HEAD~N and mark the rest as squash.")
    added = invoke_json(runner, "add-manual", "git-squash", str(manual), "--example", "how do I squash commits?")
    path = home / "blocks" / f"{added['sha256']}.kv"
    data = bytearray(path.read_bytes())
    data[1000] ^= 0xFF
    path.write_bytes(bytes(data))
    answer = invoke_json(runner, "ask", "how do I squash commits?", "--max-tokens", "4")
    assert (answer["decision"], answer["block_id"], answer["prefill_tokens_avoided"]) == ("fallback", added["block_id"], 0)
    assert "cannot be read" in answer["reason"] and added["block_id"] in answer["reason"]
    report = runner.invoke(cli, ["check", "--json"])
    assert report.exit_code == 1 and json.loads(report.stdout)["problems"][0]["block_id"] == added["block_id"]


@pytest.mark.model
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


# -- the store folder and the shared options ------------------------------------------------


def test_json_errors_are_one_object_on_stdout(runner, tmp_path):
    missing = runner.invoke(cli, ["list", "--home", str(tmp_path / "nope"), "--json"])
    assert missing.exit_code == 1
    error = json.loads(missing.stdout)["error"]
    assert error["type"] == "StoreError" and str(tmp_path / "nope") in error["message"]
    model = runner.invoke(cli, ["verify", "--model", "no-such-model", "--json"])
    assert model.exit_code == 1
    assert json.loads(model.stdout) == {"error": {"type": "ModelNotFoundError", "message": model.stderr.strip()[len("Error: "):]}}
    plain = runner.invoke(cli, ["verify", "--model", "no-such-model"])
    assert plain.exit_code == 1 and plain.stdout == "" and plain.stderr.startswith("Error: unknown model")
    usage = runner.invoke(cli, ["add-solution", "--json", "-q", "Q?", "-a", "1", "--method", "m.py", "--method-code", "1", "--verify", "python"])
    assert usage.exit_code == 2 and json.loads(usage.stdout)["error"]["type"] == "UsageError"


# -- what the commands print ----------------------------------------------------------------


def test_route_json_lists_the_candidates_and_the_runner_up(runner, stocked):
    routed = invoke_json(runner, "--home", str(stocked.store.home), "route", "how do I squash my last commits?")
    names = {b.id: b.name for b in stocked.store.blocks()}
    assert routed["block_name"] == "git-squash" and routed["runner_up"] in names.values()
    candidates = routed["candidates"]
    assert candidates[0] == {"block_id": routed["block_id"], "name": "git-squash", "score": pytest.approx(routed["score"], abs=1e-5)}
    assert all(names[c["block_id"]] == c["name"] for c in candidates)
    assert [c["score"] for c in candidates] == sorted((c["score"] for c in candidates), reverse=True)


def test_ledger_json_holds_objects_not_json_text(runner, stocked):
    stocked.recall("how do I squash my last commits?")
    rows = invoke_json(runner, "--home", str(stocked.store.home), "ledger")["rows"]
    assert {r["event"] for r in rows} >= {"recall", "deposit"}
    for row in rows:
        assert isinstance(row["timings"], (dict, type(None))), row
        assert isinstance(row["detail"], (dict, type(None))), row
    assert any(r["timings"] and "recall_s" in r["timings"] for r in rows)


@pytest.mark.model
@pytest.mark.sandbox
def test_add_solution_takes_the_method_inline_from_a_file_or_stdin(runner, home):
    inline = invoke_json(runner, "add-solution", "-q", "What is 6*7?", "-a", "42", "--method-code", "print(6 * 7)", "--verify", "python")
    assert inline["verified"] is True
    piped = runner.invoke(cli, ["add-solution", "-q", "What is 2+2?", "-a", "4", "--method", "-", "--verify", "python", "--json"], input="print(2 + 2)\n")
    assert piped.exit_code == 0, piped.output
    wrong = runner.invoke(cli, ["add-solution", "-q", "What is 3+3?", "-a", "6", "--method-code", "print(7)", "--verify", "python"])
    assert wrong.exit_code == 1 and "refused" in wrong.stderr
    both = runner.invoke(cli, ["add-solution", "-q", "Q?", "-a", "1", "--method", "m.py", "--method-code", "print(1)", "--verify", "python"])
    assert both.exit_code == 2 and "not both" in both.output


# -- progress on stderr ---------------------------------------------------------------------


def test_capture_progress_comes_per_decode_chunk(smollm2):
    text = " ".join(f"step {i}: fold the dough." for i in range(140))  # ~1,300 tokens: two whole chunks and a part
    calls = []
    smollm2.capture(text, progress=lambda done, total: calls.append((done, total)))
    total = calls[-1][1]
    n_batch = smollm2.settings.n_batch
    assert total > 2 * n_batch
    assert calls == [(min(done, total), total) for done in range(n_batch, total + n_batch, n_batch)]


@pytest.mark.model
def test_add_manual_writes_one_final_line_when_stderr_is_not_a_terminal_and_refuses_a_taken_name(runner, home, tmp_path):
    manual = tmp_path / "manual.txt"
    manual.write_text("Skill manual: squash commits with git rebase -i HEAD~N and mark the rest as squash.")
    added = runner.invoke(cli, ["add-manual", "git-squash", str(manual)])
    assert added.exit_code == 0, added.output
    assert re.fullmatch(r"capture git-squash: (\d+)/\1 tok in \d+\.\d s\n", added.stderr), added.stderr
    manual.write_text("Skill manual: bake sourdough bread at 250 C in a covered pot.")
    taken = runner.invoke(cli, ["add-manual", "git-squash", str(manual)])
    assert taken.exit_code == 1 and "git-squash" in taken.stderr and "taken" in taken.stderr
    assert len(taken.stderr.strip().splitlines()) == 1


# -- memory verbs ---------------------------------------------------------------------------


def test_memory_verbs(runner, stocked, tmp_path):
    home = ["--home", str(stocked.store.home)]
    manuals = invoke_json(runner, *home, "list", "--kind", "manual")["rows"]
    assert sorted(r["name"] for r in manuals) == ["git-squash", "sourdough"]
    solution = invoke_json(runner, *home, "show", "What is 17 * 23?")
    assert solution["answer"] == "391" and solution["routing_keys"]
    assert invoke_json(runner, *home, "get", solution["id"][:8])["id"] == solution["id"]
    renamed = invoke_json(runner, *home, "rename", "sourdough", "bread")
    assert (renamed["name"], renamed["previous_name"]) == ("bread", "sourdough")
    assert invoke_json(runner, *home, "show", "bread")["id"] == renamed["block_id"]
    text = tmp_path / "new.txt"
    text.write_text("Skill manual: baking bread. Mix, fold, proof overnight, bake covered at 250 C.")
    updated = invoke_json(runner, *home, "update", "bread", "--file", str(text), "-e", "how do I bake bread?")
    assert updated["name"] == "bread" and updated["previous_block_id"] == renamed["block_id"]
    assert invoke_json(runner, *home, "show", "bread")["id"] == updated["block_id"]
    assert invoke_json(runner, *home, "rm", "bread")["removed"] == updated["block_id"]
    missing = runner.invoke(cli, [*home, "show", "bread", "--json"])
    assert missing.exit_code == 1 and json.loads(missing.stdout)["error"]["type"] == "BlockNotFoundError"
    nothing = runner.invoke(cli, [*home, "update", "git-squash"])
    assert nothing.exit_code == 2 and "nothing to update" in nothing.output
    report = invoke_json(runner, *home, "recapture")
    assert report == {"recaptured": [], "unchanged": report["unchanged"], "failed": []} and len(report["unchanged"]) == 2


# -- a manual too long for one block ----------------------------------------------------------


SECTIONS = {
    "Rebasing": "Run git fetch, then git rebase origin/main; fix each conflict, git add the file and continue. ",
    "Squashing": "Run git rebase -i HEAD~N, keep the first commit as pick and mark the others as squash. ",
    "Pushing": "After a rebase, push with git push --force-with-lease so nobody else's work is lost. ",
}


@pytest.mark.model
def test_a_manual_too_long_says_how_to_split_and_split_stores_one_block_per_heading(runner, home, tmp_path, monkeypatch):
    monkeypatch.setenv("SKILLGRAFT_N_CTX", "512")  # 256 tokens of room for a block: a small manual overflows
    manual = tmp_path / "git.md"
    manual.write_text("A git guide.\n\n" + "".join(f"## {title}\n{text * 6}\n\n" for title, text in SECTIONS.items()))
    refused = runner.invoke(cli, ["add-manual", "git-guide", str(manual)])
    assert refused.exit_code == 1 and invoke_json(runner, "list")["rows"] == []
    message = refused.stderr.strip()
    assert len(message.splitlines()) == 1 and "tokens but the context holds 256" in message
    assert "skillgraft add-manual git-guide FILE --split" in message, message
    both = runner.invoke(cli, ["add-manual", "git-guide", str(manual), "--split", "-e", "squash?"])
    assert both.exit_code == 2 and "--example cannot go with --split" in both.output
    parts = invoke_json(runner, "add-manual", "git-guide", str(manual), "--split", "-d", "Git")["parts"]
    assert [(p["name"], p["title"]) for p in parts] == [
        ("git-guide-1", ""), ("git-guide-2", "Rebasing"), ("git-guide-3", "Squashing"), ("git-guide-4", "Pushing")]
    assert all(p["tokens"] <= 256 for p in parts)
    assert invoke_json(runner, "show", "git-guide-3")["description"] == "Git - Squashing"
    assert invoke_json(runner, "route", "how do I mark commits as squash in an interactive rebase")["block_name"] == "git-guide-3"
    again = invoke_json(runner, "add-manual", "git-guide", str(manual), "--split", "-d", "Git")["parts"]
    assert [p["block_id"] for p in again] == [p["block_id"] for p in parts]  # the same parts: nothing new
