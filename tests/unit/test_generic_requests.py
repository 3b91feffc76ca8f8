"""The router's prior for "none of these": generic requests keep an imported skill out of a query
they fit clearly better than the skill's own keys; a plain block is never held against them."""

import numpy as np

from skillgraft import SkillMemory
from skillgraft.routing.generic_requests import GENERIC_MARGIN, GENERIC_REQUESTS, GenericPrior
from skillgraft.routing.ranking import Ranking
from skillgraft.testing import FakeEmbedder, FakeEngine

from .skill_folders import write_skill

CHORE = "fix the bug in this function"


def test_a_skill_is_kept_out_only_when_a_generic_request_is_clearly_nearer():
    near = 0.5
    held = Ranking([("s", 0.9)], {"s": near}, -1.0, generic={"s": near + GENERIC_MARGIN})
    assert held.vetoed("s") and held.best() == (None, -1.0)
    assert "generic request" in held.veto_reason("s", "debugging")
    assert not Ranking([("s", 0.9)], {"s": near}, -1.0, generic={"s": near + GENERIC_MARGIN - 0.01}).vetoed("s")
    assert not Ranking([("b", 0.9)], {"b": near}, -1.0).vetoed("b")  # a plain block has no generic cosine


def test_the_generic_requests_are_embedded_once(fake_embedder):
    assert CHORE in GENERIC_REQUESTS and len(set(GENERIC_REQUESTS)) == len(GENERIC_REQUESTS)
    prior = GenericPrior(fake_embedder)
    before = fake_embedder.encoded
    first = prior.nearness(fake_embedder.encode([CHORE, "pdf forms"]))
    prior.nearness(fake_embedder.encode([CHORE]))
    assert fake_embedder.encoded - before == len(GENERIC_REQUESTS) + 3
    assert np.isclose(first[0], 1.0, atol=1e-5) and first[1] < 0.9


def test_a_generic_chore_abstains_on_a_skill_but_reaches_a_manual_that_names_it(fake_memory, tmp_path):
    write_skill(tmp_path, "bug-fixing", "Fix the bug in a function: reproduce it, find the cause, test the fix.",
                "# Bug fixing\n\nReproduce the failure first.\n")
    fake_memory.skills.import_folders(tmp_path)
    assert fake_memory.route("reproduce the failure and find the cause of the bug").decision == "graft"
    recall = fake_memory.route(CHORE)
    assert recall.decision == "abstain" and "generic request" in recall.reason
    fake_memory.add_manual("my-bugs", "Skill manual: run the failing case under the debugger first.", examples=[CHORE])
    assert fake_memory.route(CHORE).block.name == "my-bugs"


def test_a_skills_later_part_is_judged_by_the_skills_nearest_key_not_its_own(tmp_path):
    """A query routed to a split skill gets the part that fits it, and a generic request is held
    against the skill's nearest key: a correction that names the skill for this very query makes
    it nearest (cosine 1), so the query is grafted, whichever part it gets (it was kept out when
    the part's own name and description keys were the measure)."""
    steps = lambda what: " ".join(f"Step {i}: {what}." for i in range(40))  # noqa: E731
    body = (f"# Reproducing\n\n{steps('reproduce the failure again and write down what changed')}\n\n"
            f"# Flamegraph profiling\n\n{steps('record a flamegraph of the slow path and read its widest frames')}\n")
    write_skill(tmp_path / "skills", "bug-fixing", "Fix the bug in a function: reproduce it, find the cause.", body)
    with SkillMemory(tmp_path / "store", engine=FakeEngine(n_ctx=2048), embedder=FakeEmbedder()) as memory:
        memory.skills.import_folders(tmp_path / "skills")
        assert len(memory.skills.get("bug-fixing").parts) > 2
        query = f"{CHORE} flamegraph"
        memory.feedback(query, "bug-fixing")
        recall = memory.route(query)
        assert recall.decision == "graft", recall.reason
        assert memory.skills.of_block(recall.block_id) == "bug-fixing" and recall.block.name != "bug-fixing"
