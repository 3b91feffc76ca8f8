"""The confidence gate and the near-miss rule: whether a grafted answer stands.

After a graft, the gate takes the mean log-probability of the first ``GATE_TOKENS``
generated tokens and compares it with a threshold (the store's setting ``GATE_SETTING``,
else ``DEFAULT_GATE_LOGPROB``). Independently of the gate, a grafted *solution* whose
stored answer is repeated for another question (a near miss) never stands.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field, replace
from typing import Optional, Sequence

from .blocks import Block
from .questions import is_its_question
from ..errors import InputError
from .states import TokenStep

# Mean log-probability of the first grafted tokens below which the graft is not trusted:
# the highest value that kept every right answer of the gate evaluation (docs/routing.md).
DEFAULT_GATE_LOGPROB = -0.75
GATE_TOKENS = 8
GATE_SETTING = "gate.mean_logprob"
# The decision a grafted answer that did not stand reads: it was generated again plainly.
FELL_BACK = "fallback"
# What the gate does with a graft whose first tokens are not confident: report it
# ("advisory", the default: see docs/routing.md, the gate evaluation) or answer plainly.
GATE_POLICIES = ("advisory", "enforce")
DEFAULT_GATE = "advisory"


@dataclass(frozen=True)
class Confidence:
    """How sure the model was of an answer's first tokens: their mean log-probability
    (None when nothing was generated) against ``threshold``."""

    confident: bool
    mean_logprob: Optional[float]
    threshold: float
    reason: str

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class GateVerdict(Confidence):
    """Whether a grafted answer stands: ``fell_back`` when it had to be generated again
    plainly, and ``reason`` says why (a near miss, or not confident)."""

    fell_back: bool = False


def confidence(steps: Sequence[TokenStep], threshold: float) -> Confidence:
    """Mean log-probability of the first generated tokens against ``threshold``."""
    head = list(steps)[:GATE_TOKENS]
    if not head:
        return Confidence(False, None, threshold, "no tokens generated")
    mean = sum(s.logprob for s in head) / len(head)
    confident = mean >= threshold
    relation = ">=" if confident else "<"
    return Confidence(
        confident,
        round(mean, 4),
        threshold,
        f"mean log-probability of the first {len(head)} tokens {mean:.3f} {relation} {threshold:.3f}",
    )


def gate_policy(value) -> str:
    """``"advisory"`` or ``"enforce"`` from a policy name, a bool (True: enforce) or None (the default)."""
    if value is None:
        return DEFAULT_GATE
    if isinstance(value, bool):
        return "enforce" if value else "advisory"
    if value not in GATE_POLICIES:
        raise InputError(f"gate must be one of {', '.join(GATE_POLICIES)} (or a bool), got {value!r}")
    return value


def graft_verdict(block: Block, text: str, confident: Confidence, *, enforce: bool = False, query: str = "") -> GateVerdict:
    """Whether a grafted answer stands: the near-miss rule, then (with ``enforce``) the confidence gate.

    ``confident`` is :func:`confidence` of the answer's steps. The verdict has ``fell_back``
    set when the answer must be generated again plainly: always when a solution's stored
    answer is repeated for another question (``query``: a near miss; the solution's own
    question may repeat it, as when a response format needs it written), and when the gate is
    enforced and the first tokens are not confident; ``reason`` says which.
    """
    verdict = GateVerdict(**asdict(confident))
    own_question = is_its_question(block, query)
    if block.kind == "solution" and not own_question and repeats_answer(text, block.answer, query):
        return replace(verdict, fell_back=True, reason=(
            f"near miss: the grafted answer repeats the stored answer {block.answer!r} of another question "
            f"({block.question!r}); generated plainly"
        ))
    if enforce and not confident.confident:
        return replace(verdict, fell_back=True, reason=f"graft not confident: {confident.reason}; generated plainly")
    return verdict


@dataclass(frozen=True)
class GateCase:
    """One grafted answer of a gate calibration: was it right, and how sure was the model."""

    query: str
    block: str
    correct: bool
    mean_logprob: Optional[float]


@dataclass(frozen=True)
class GateCalibration:
    """The threshold :meth:`memory.confidence_gate.calibrate <skillgraft.memory.confidence_gate.ConfidenceGate.calibrate>` chose, and what it does
    to the cases: ``right`` answers all kept, ``wrong_turned_away`` of ``wrong`` refused."""

    threshold: float
    cases: int
    right: int
    wrong_turned_away: int
    wrong: int
    rows: tuple[GateCase, ...] = field(repr=False)

    def as_dict(self) -> dict:
        return {**asdict(self), "rows": [asdict(row) for row in self.rows]}


def calibrate_threshold(rows: Sequence[GateCase]) -> GateCalibration:
    """The highest threshold that keeps every right answer (just under the least sure one)."""
    right = [r.mean_logprob for r in rows if r.correct and r.mean_logprob is not None]
    if not right:
        raise InputError("no grafted answer was right, so no threshold can keep the right ones")
    threshold = round(min(right) - 0.005, 4)
    wrong = [r for r in rows if not r.correct]
    turned_away = sum(1 for r in wrong if r.mean_logprob is None or r.mean_logprob < threshold)
    return GateCalibration(threshold, len(rows), len(right), turned_away, len(wrong), tuple(rows))


def repeats_answer(text: str, answer: Optional[str], query: str = "") -> bool:
    """Whether ``text`` states ``answer`` (a whole token; ``1591`` also as ``1,591``) more often
    than ``query`` itself does: echoing a number of the question is not a copy."""
    if not answer or not text:
        return False
    forms = {answer.strip()}
    if re.fullmatch(r"-?\d+", answer.strip()):
        forms.add(f"{int(answer):,}")
    patterns = [re.compile(rf"(?<![\w.]){re.escape(form)}(?![\w]|\.\d)") for form in forms if form]
    count = lambda where: sum(len(p.findall(where)) for p in patterns)  # noqa: E731
    return count(text) > count(query)
