"""The sampler every in-process engine shares: seeded, reproducible, with llama.cpp's penalty.

:func:`sample` draws tokens after what a context holds and evaluates each one; the engine
supplies the logits, the token pieces and the one-token append (:class:`Decoder`). Each
step's log-probability and entropy are those of the model's own distribution, before the
repeat penalty. No llama.cpp, no torch.
"""

from __future__ import annotations

import codecs
from dataclasses import dataclass, field
from typing import Callable, Iterator, Optional, Protocol, Sequence

import numpy as np

from ..errors import InputError
from .states import TokenStep


@dataclass(frozen=True)
class SamplingOptions:
    """How to draw up to ``max_tokens`` tokens.

    ``temperature`` 0 is greedy; ``top_p`` keeps the smallest set of tokens whose probability
    reaches it; ``seed`` makes a sampled run reproducible; ``repeat_penalty`` > 1 discourages
    the last ``penalty_last_n`` generated tokens, as llama.cpp's sampler does; ``grammar``
    (GBNF) allows only the tokens that keep the text inside it.
    """

    max_tokens: int
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int = 0
    repeat_penalty: float = 1.0
    penalty_last_n: int = 64
    grammar: Optional[str] = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.max_tokens < 0:
            raise InputError(f"max_tokens must be >= 0, got {self.max_tokens}")


class Decoder(Protocol):
    """What :func:`sample` needs from an engine."""

    n_past: int
    n_ctx: int

    def logits(self) -> np.ndarray: ...

    def piece(self, token: int) -> bytes: ...

    def is_end_of_generation(self, token: int) -> bool: ...

    def append(self, tokens: Sequence[int]) -> None: ...


class Constraint(Protocol):
    """A grammar the sampled text must stay inside (the engine compiles it for its vocabulary)."""

    def allows(self, token: int) -> bool: ...

    def mask(self, logits: np.ndarray) -> np.ndarray:
        """``logits`` with every token the grammar refuses here set to ``-inf``."""
        ...

    def accept(self, token: int) -> None: ...


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """Log-probabilities in float64 from raw logits."""
    values = logits.astype(np.float64)
    values -= values.max()
    return values - np.log(np.exp(values).sum())


def pick(logprobs: np.ndarray, temperature: float, top_p: float, rng: np.random.Generator) -> int:
    """The argmax at temperature 0, else a draw from the tempered top-``p`` distribution."""
    if temperature <= 0:
        return int(np.argmax(logprobs))
    scaled = logprobs / temperature
    probs = np.exp(scaled - scaled.max())
    probs /= probs.sum()
    order = np.argsort(-probs)
    keep = order[: int(np.searchsorted(np.cumsum(probs[order]), top_p) + 1)]
    return int(rng.choice(keep, p=probs[keep] / probs[keep].sum()))


def constrained(logprobs: np.ndarray, temperature: float, top_p: float, rng: np.random.Generator,
                constraint: Constraint) -> int:
    """:func:`pick` among the tokens ``constraint`` allows. At temperature 0 the argmax is
    tried first and the whole vocabulary masked only when the grammar refuses it (as
    llama.cpp's own sampler does), which picks the same token."""
    if temperature <= 0:
        token = int(np.argmax(logprobs))
        if constraint.allows(token):
            return token
    return pick(log_softmax(constraint.mask(logprobs)), temperature, top_p, rng)


def sample(
    engine: Decoder, options: SamplingOptions, logits: Optional[Callable[[int], np.ndarray]] = None,
    constraint: Optional[Constraint] = None,
) -> Iterator[TokenStep]:
    """Draw up to ``options.max_tokens`` tokens after what ``engine`` holds, evaluating each
    but the last (a context holds the prompt and every drawn token before the last one).

    Stops at an end-of-generation token or when the context is full. ``logits(step)``
    replaces ``engine.logits()`` (a fake engine biases it towards a scripted reply);
    ``constraint`` is ``options.grammar`` compiled by the engine. The log-probability and
    entropy of each step are the model's own, before the grammar too.
    """
    rng = np.random.default_rng(options.seed)
    recent: list[int] = []
    # A character may span tokens: each step carries the text its token completes.
    text = codecs.getincrementaldecoder("utf-8")(errors="replace")
    for step in range(options.max_tokens):
        if recent:  # the token drawn last is evaluated only when another one is wanted after it
            engine.append(recent[-1:])
        raw = logits(step) if logits else engine.logits()
        logprobs = log_softmax(raw)
        entropy = float(-(np.exp(logprobs) * logprobs).sum())
        candidates = logprobs
        if options.repeat_penalty != 1.0 and recent:
            penalty = options.repeat_penalty
            seen = np.fromiter(set(recent[-options.penalty_last_n :]), dtype=np.int64)
            raw[seen] = np.where(raw[seen] > 0, raw[seen] / penalty, raw[seen] * penalty)
            candidates = log_softmax(raw)
        if constraint is None:
            token = pick(candidates, options.temperature, options.top_p, rng)
        else:
            token = constrained(candidates, options.temperature, options.top_p, rng, constraint)
        if engine.is_end_of_generation(token):
            return
        if constraint is not None:
            constraint.accept(token)
        piece = text.decode(engine.piece(token))
        if engine.n_past + 1 > engine.n_ctx:
            return
        recent.append(token)
        yield TokenStep(token, piece, float(logprobs[token]), entropy)
