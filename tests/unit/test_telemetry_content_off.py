"""With content off, no span carries text of a question, a skill or an answer: recalls (graft,
exact, abstain), answers (routed, forced, exact), deposits (a manual, a verified solution whose
name is made from its question, an imported skill) and a deposit that fails are run, and every
attribute of every span (its events' and status too) is searched for those texts."""

from __future__ import annotations

import pytest

from tests.required import need

need("opentelemetry.sdk", "skillgraft[dev]")

from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402

from skillgraft import AnswerOptions  # noqa: E402
from skillgraft.core import telemetry  # noqa: E402
from skillgraft.errors import SkillgraftError  # noqa: E402
from skillgraft.memory import SkillMemory  # noqa: E402
from skillgraft.testing import FakeEngine  # noqa: E402

from .conftest import GIT_MANUAL, GIT_QUERY, OUT_OF_DOMAIN  # noqa: E402
from .skill_folders import write_skill  # noqa: E402

QUESTION, ANSWER = "What is 4721 plus 17, my walrus?", "Walrus total: 4738"
WRONG_QUESTION, WRONG_ANSWER = "What is the zanzibar quokka count?", "Quokkas number eleventy"
REPLY = "Rebase interactively, then squash the zebra commits."
SKILL_NAME = "note-taking"
SKILL_DESCRIPTION = "Taking minutes at a pelican meeting."
SKILL_BODY = "Write the decisions first, then the owners of each marmalade task.\n"
SKILL_QUERY = "how do I take minutes at a pelican meeting?"


@pytest.fixture
def spans():
    """Spans on with content off, into an in-memory exporter; every setting put back afterwards."""
    kept = dict(vars(telemetry._settings))
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    telemetry.configure(enabled=True, content=False, tracer_provider=provider)
    yield exporter
    vars(telemetry._settings).update(kept)


def texts_of(span) -> list[str]:
    """Every text a span carries: its attributes' values, its events' and its status's description."""
    found = [span.name, span.status.description or ""]
    attribute_sets = [span.attributes, *(event.attributes for event in span.events)]
    found += [event.name for event in span.events]
    for attributes in attribute_sets:
        for key, value in (attributes or {}).items():
            found += [key] + [str(v) for v in (value if isinstance(value, (list, tuple)) else [value])]
    return found


def test_no_span_holds_a_question_a_skill_or_an_answer_with_content_off(tmp_path, fake_embedder, spans):
    with SkillMemory(tmp_path / "store", engine=FakeEngine(reply=REPLY), embedder=fake_embedder) as memory:
        manual = memory.add_manual("git-squash", GIT_MANUAL, examples=["how do I squash my last commits?"])
        solution = memory.add_solution(QUESTION, ANSWER, verifier="exact", expected=ANSWER)
        assert solution.name.startswith("solution-what-is-4721")  # made from the question
        with pytest.raises(SkillgraftError):  # fails inside its span: the error's message quotes it
            memory.add_solution(WRONG_QUESTION, WRONG_ANSWER, verifier="exact", expected="12")
        (skill,) = memory.skills.import_folders(write_skill(tmp_path / "skills", SKILL_NAME, SKILL_DESCRIPTION, SKILL_BODY)).imported
        assert [memory.recall(q).decision for q in (GIT_QUERY, QUESTION, OUT_OF_DOMAIN)] == ["graft", "exact", "abstain"]
        grafted = memory.generate(GIT_QUERY, max_tokens=128)
        assert grafted.decision == "graft" and grafted.text == REPLY
        assert memory.generate(QUESTION).text == ANSWER
        forced = memory.answer([("user", SKILL_QUERY)], AnswerOptions(max_tokens=128), block=SKILL_NAME)
        assert forced.note.decision == "graft"
        memory.answer([("user", OUT_OF_DOMAIN)], AnswerOptions(max_tokens=128), route=False)
        memory.recall(SKILL_QUERY, earlier=[GIT_QUERY])

    secrets = [GIT_QUERY, QUESTION, WRONG_QUESTION, OUT_OF_DOMAIN, SKILL_QUERY, "how do I squash my last commits?",
               GIT_MANUAL, SKILL_DESCRIPTION, SKILL_BODY.strip(), ANSWER, WRONG_ANSWER, REPLY,
               manual.name, solution.name, "what-is-4721", SKILL_NAME]
    words = {w.strip("?.,:").casefold() for text in secrets for w in text.split() if len(w.strip("?.,:")) >= 6}
    made = spans.get_finished_spans()
    operations = {span.attributes["gen_ai.operation.name"] for span in made}
    assert operations == {"search_memory", "chat", "update_memory"} and len(made) >= 10
    assert any(span.attributes.get("error.type") for span in made)  # the failed deposit's span is there
    for span in made:
        carried = [text.casefold() for text in texts_of(span)]
        for secret in [*secrets, *words]:
            assert not [text for text in carried if secret.casefold() in text], (span.name, secret)
    ids = {manual.id, solution.id, skill.blocks[0]}
    named = {value for span in made for key in ("gen_ai.skill.name", "gen_ai.skills")
             for value in ((span.attributes.get(key),) if key.endswith("name") else span.attributes.get(key, ()))}
    assert ids <= named <= ids | {None}  # each skill is named by its block's id
