"""The agent benchmark over real skill folders: its query file, its rows and its refusals."""

import json

import pytest
from click.testing import CliRunner

from skillgraft.bench import agent_skills
from skillgraft.cli.main import cli
from skillgraft.errors import InputError


def test_each_skill_gets_its_requests_in_file_order(tmp_path):
    path = tmp_path / "q.json"
    path.write_text(json.dumps({"in_scope": {"calibrate": [["a one", "a"], ["b one", "b"]],
                                             "test": [["a two", "a"]]}, "off_topic": {}}))
    assert agent_skills._questions(path) == {"a": ["a one", "a two"], "b": ["b one"]}


@pytest.mark.parametrize("content", ["not json", json.dumps({"off_topic": {}}), json.dumps({"in_scope": {"test": [["x"]]}}),
                                     json.dumps({"in_scope": {"test": [[1, "a"]]}}), json.dumps({"in_scope": {}})])
def test_a_file_that_is_no_query_file_is_refused(tmp_path, content):
    path = tmp_path / "q.json"
    path.write_text(content)
    with pytest.raises(InputError):
        agent_skills._questions(path)


def _record(system, round_, scenario, seconds, block="pdf/body", expected="pdf/body"):
    return {"system": system, "round": round_, "scenario": scenario, "seconds": seconds, "decision": "graft",
            "block": block, "expected": expected, "question": "q"}


def test_rows_pair_the_systems_and_the_restart_is_its_own_measure():
    records = []
    for system, first, restart, warm in (("skillgraft", 10.0, 0.4, 0.3), ("llama-server", 9.0, 9.2, 8.0)):
        records += [_record(system, 1, "round 1", first), _record(system, 1, "round 1", first + 2),
                    _record(system, 2, "after a restart", restart), _record(system, 2, "round 2", warm),
                    _record(system, 3, "after a restart", restart), _record(system, 3, "round 3", warm)]
    records[3] = _record("skillgraft", 2, "round 2", 0.3, block="docx/body")
    rows = {r["measure"]: r for r in agent_skills._rows(records)}
    assert rows["round 1 (first sighting)"]["skillgraft_s"] == 11.0 and rows["round 1 (first sighting)"]["llama_server_s"] == 10.0
    assert rows["first request after a restart"]["ratio"] == round(0.4 / 9.2, 4)
    summary = agent_skills._summary(agent_skills._rows(records))
    assert summary["restart_speedup"] == round(9.2 / 0.4, 2) and summary["first_sighting_ratio"] == 1.1
    decisions = agent_skills._decisions(records)
    assert decisions["graft_on_expected"] == 5 and decisions["mismatches"][0]["block"] == "docx/body"


def test_the_cli_asks_for_the_requests(tmp_path):
    (tmp_path / "skills").mkdir()
    result = CliRunner().invoke(cli, ["bench", "agent", "--skills", str(tmp_path / "skills")])
    assert result.exit_code != 0 and "--queries" in result.output


def test_the_systems_take_turns_question_by_question_restarted_before_rounds_two_and_three():
    class System:
        name = "s"

        def __init__(self):
            self.calls = []

        def ask(self, agent, turns, part):
            self.calls.append(turns[-1]["content"])
            return {"seconds": 0.1}

        def restart(self):
            self.calls.append("restart")

    system, records = System(), []
    plan = {"a": ("qa", "a#1"), "b": ("qb", "b#1")}
    segments = agent_skills._segments(system, "agent", plan, records.append)
    assert next(segments) == "round 1: a" and system.calls == ["qa"]  # a segment is one question
    assert list(segments) == ["round 1: b", "round 2: a", "round 2: b", "round 3: a", "round 3: b"]
    assert system.calls == ["qa", "qb", "restart", "qa", "qb", "restart", "qa", "qb"]
    assert [r["scenario"] for r in records] == ["round 1", "round 1", "after a restart", "round 2", "after a restart", "round 3"]
