"""Learning on the real encoder (MiniLM): a verified question pulls a later near question to the
skill its answer used, with the verified example beside it, and the near question is answered,
never given the stored answer."""

from __future__ import annotations

from skillgraft import AnswerOptions
from skillgraft.core.placement import EXAMPLES_HEADING
from skillgraft.memory import SkillMemory
from skillgraft.testing import FakeEngine

FORECAST = "Skill manual: the weather forecast. Call get_forecast(city, days) for the coming days' weather of a city."
HISTORY = ("Skill manual: past weather records. Call get_weather_history(city, date) for what the weather was on a "
           "past date.")
LEARNED = "Was it raining in Paris on the 3rd of May 2021?"
NEAR = "Was it raining in Lyon on the 9th of June 2020?"
ANSWER = "[get_weather_history(city='Paris', date='2021-05-03')]"


def test_a_verified_question_pulls_a_near_one_to_its_skill_and_never_answers_it(tmp_path, embedder):
    with SkillMemory(tmp_path, engine=FakeEngine(), embedder=embedder) as memory:
        memory.add_manual("weather-forecast", FORECAST, examples=["what will the weather be in Rome tomorrow?"],
                          capture=False)
        memory.add_manual("weather-history", HISTORY, examples=["how hot was it in Madrid last summer?"], capture=False)
        before = memory.recall(NEAR, log=False)
        assert before.decision == "abstain", before.reason  # no skill is near enough on its own words
        solution = memory.learn(LEARNED, ANSWER, skills=["weather-history"], verifier="exact", expected=ANSWER)
        after = memory.recall(NEAR, log=False)
        assert after.decision == "graft" and after.block_name == "weather-history" and not after.near_miss, after.reason
        assert after.score > before.score and [b.id for b in after.examples] == [solution.id]
        assert memory.recall("what will the weather be in Rome tomorrow?", log=False).block_name == "weather-forecast"
        answer = memory.answer([("system", "You call functions."), ("user", NEAR)], AnswerOptions(max_tokens=8))
        assert answer.note.decision == "graft" and answer.text != ANSWER
        prompt = memory.pipeline().prompt(memory.plan([("system", "You call functions."), ("user", NEAR)]),
                                          AnswerOptions(max_tokens=8))
        text = memory.engine.detokenize(list(prompt.tokens))
        assert text.index(HISTORY) < text.index(EXAMPLES_HEADING) < text.index(ANSWER) < text.index(NEAR)
        assert memory.recall(LEARNED, log=False).decision == "exact"  # its own question gets its verified answer
