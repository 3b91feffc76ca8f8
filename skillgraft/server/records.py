"""The values a :class:`~skillgraft.server.engine.LlamaServerEngine` returns, and the checks
and parsing of llama-server's ``/completion`` answers they are built from."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence, Union

from ..kv.prefixes import common_prefix
from ..errors import DamagedCellsError, InputError, SlotReuseError
from ..core.states import KVState


@dataclass(frozen=True)
class ServerInfo:
    """Which server an engine talks to, what it is and how it was started."""

    url: str
    build: str
    model_path: str
    n_slots: int
    n_ctx_slot: int
    argv: tuple[str, ...] = ()
    pid: Optional[int] = None
    binary: str = ""
    started: bool = False


@dataclass(frozen=True)
class TopToken:
    token: int
    piece: str
    logprob: float


@dataclass(frozen=True)
class ServerStep:
    """One generated token with the server's top-k log-probabilities (full-vocabulary softmax)."""

    token: int
    piece: str
    logprob: float
    top: tuple[TopToken, ...]


@dataclass(frozen=True)
class StreamChunk:
    """One streamed piece of a completion: its text (stop strings already withheld), its
    tokens, and on the last chunk why the completion ended."""

    text: str
    steps: tuple[ServerStep, ...]
    stopped_by: Optional[str] = None
    cache_n: Optional[int] = None  # on the chunk whose timings were checked: the cells the server reused


@dataclass(frozen=True)
class Completion:
    """A ``/completion`` answer, reduced to what skillgraft checks and reports."""

    slot: int
    steps: tuple[ServerStep, ...]
    text: str
    cache_n: int
    prompt_n: int
    prompt_ms: float
    predicted_ms: float
    wall_s: float
    stopped_by: str = "eos"

    @property
    def tokens(self) -> tuple[int, ...]:
        return tuple(step.token for step in self.steps)


@dataclass(frozen=True)
class Restore:
    slot: int
    n_restored: int
    n_bytes: int
    restore_ms: float
    write_s: float


@dataclass(frozen=True)
class ServerGraft:
    """A graft through the server: the restore and the completion that reused it."""

    block_id: str
    n_block: int
    n_query: int
    restore: Restore
    completion: Completion
    wall_s: float


def completion_from_body(body: dict, wall_s: float) -> Completion:
    """A ``/completion`` answer as a :class:`Completion`."""
    timings = body.get("timings") or {}
    probabilities = body.get("completion_probabilities") or []
    tokens = body.get("tokens") or []
    steps = []
    for index, token in enumerate(tokens):
        entry = probabilities[index] if index < len(probabilities) else {}
        top = tuple(
            TopToken(int(t["id"]), str(t.get("token", "")), top_logprob(t["logprob"]))
            for t in entry.get("top_logprobs", [])
        )
        steps.append(ServerStep(int(token), str(entry.get("token", "")), sampled_logprob(entry), top))
    return Completion(
        slot=int(body.get("id_slot", -1)),
        steps=tuple(steps),
        text=str(body.get("content", "")),
        cache_n=int(timings.get("cache_n", -1)),
        prompt_n=int(timings.get("prompt_n", -1)),
        prompt_ms=float(timings.get("prompt_ms", 0.0)),
        predicted_ms=float(timings.get("predicted_ms", 0.0)),
        wall_s=wall_s,
        stopped_by=stop_type(body),
    )


def sampled_logprob(entry: dict) -> float:
    """The log-probability of a token the server sampled (0 when not asked for). JSON has no NaN
    nor -inf, so the server sends both as null: a token a grammar forced may have underflowed
    (-inf), but null for it and for every top-k token too means NaN logits, which only damaged
    cells give (NaN K/V bytes in any cell the attention reads, free ones too), so
    :class:`DamagedCellsError`, never an answer."""
    value = entry.get("logprob", 0.0)
    if value is not None:
        return float(value)
    top = entry.get("top_logprobs") or []
    if top and all(t.get("logprob") is None for t in top):
        raise DamagedCellsError()
    return float("-inf")


def top_logprob(value: Optional[float]) -> float:
    """A top-k entry's log-probability: null is a probability that underflowed (-inf)."""
    return float("-inf") if value is None else float(value)


def kept_cells(state: KVState, keep: Optional[int]) -> int:
    """How many of ``state``'s cells a continuation keeps (all when ``keep`` is None)."""
    if keep is None:
        return state.n_tokens
    if isinstance(keep, bool) or not isinstance(keep, int) or not 0 < keep <= state.n_tokens:
        raise InputError(f"keep must be an int in [1, {state.n_tokens}], got {keep!r}")
    return keep


def reusable_cells(restored: Sequence[int], prompt: Sequence[int]) -> int:
    """The cells a server reuses from a slot holding ``restored`` for ``prompt``: their common
    prefix, less one when it is the whole prompt (the last token is always evaluated)."""
    return min(common_prefix(restored, prompt), len(prompt) - 1)


def check_reuse(block_id: str, slot: int, cache_n: int, prompt_n: int, reuse: Union[int, tuple[int, int]],
                n_prompt: int) -> None:
    """Raise :class:`SlotReuseError` unless the server reused exactly ``reuse`` cells (or, for
    a range ``(lo, hi)``, between those: a slot may still hold some of the tokens it generated
    last) and evaluated the rest of the ``n_prompt`` prompt tokens."""
    lo, hi = reuse if isinstance(reuse, tuple) else (reuse, reuse)
    if not lo <= cache_n <= hi or prompt_n != n_prompt - cache_n:
        raise SlotReuseError(block_id, slot, cache_n, lo, prompt_n, n_prompt - lo)


def stop_type(body: dict) -> str:
    """Why a completion ended: ``eos``, ``word`` (a stop string), ``limit`` (n_predict) or ``none``."""
    given = body.get("stop_type")
    if isinstance(given, str) and given:
        return given
    if body.get("stopped_limit"):
        return "limit"
    return "word" if body.get("stopped_word") else "eos"


def window_mismatch(slot_tokens: int, asked: int) -> str:
    """Why a server whose slots hold ``slot_tokens`` cannot serve the ``asked`` window: llama-server
    gives a slot no more than the model's trained window, whatever ``-c`` says."""
    said = f"the server's slots hold {slot_tokens} tokens, the settings say {asked}"
    if 0 < slot_tokens < asked:
        return (f"{said}: llama-server gives a slot at most the model's trained window; "
                f"set SKILLGRAFT_N_CTX to {slot_tokens} or less")
    return said
