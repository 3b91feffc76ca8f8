"""The fake engine: :class:`FakeEngine` keeps the contracts of
:class:`~skillgraft.protocols.GraftEngine` with no llama.cpp.

A byte-level tokenizer, a ChatML chat template, and a "KV cache" that is a hash chain over
``(previous digest, token, position)``. A captured payload holds each cell's token,
position and digest, so a restore of the wrong block, at shifted positions or from tampered
bytes leaves a different last digest, hence different logits, just as a real wrong restore
does. Logits are drawn from a generator seeded by the last digest.

Generation is unscripted by default (pseudo-random, not confident tokens) or follows
``reply``: a fixed text, or a function of the rendered context returning the text to
generate (or None for unscripted). A scripted token has a log-probability near 0.
"""

from __future__ import annotations

import hashlib
import re
import struct
import time
from collections import Counter
from typing import Callable, Iterator, Optional, Sequence, Union

import numpy as np

from ..core.chat_layout import split_chat
from ..kv.context import LocalContext
from ..core.progress import Progress
from ..errors import ConfigError, EngineError, InputError, RestoreRejectedError
from ..core.fingerprint import RuntimeFingerprint
from ..core.sampling import SamplingOptions, sample
from ..core.states import (
    KVState, TokenStep, append_tokens, capture_tokens, check_state, graft_tokens, prefill_tokens, require_fits,
)

BOS, EOS, IM_START, IM_END = 256, 257, 258, 259
N_VOCAB = 260
# Control tokens the tokenizer parses with ``special=True`` (BOS is only ever added).
SPECIAL_TOKENS = {"<|endoftext|>": EOS, "<|im_start|>": IM_START, "<|im_end|>": IM_END}
SPECIAL_TEXT = {token: text for text, token in SPECIAL_TOKENS.items()}
END_OF_GENERATION = frozenset({EOS, IM_END})
_SPECIAL_PATTERN = re.compile("(" + "|".join(re.escape(text) for text in SPECIAL_TOKENS) + ")")

PAYLOAD_MAGIC = b"FAKEKV\x00\x01"
PAYLOAD_HEADER = struct.Struct("<8sI")  # magic, number of cells
PAYLOAD_CELL = struct.Struct("<ii32s")  # token, position, digest
SCRIPT_BIAS = 40.0  # added to a scripted token's logit: its log-probability is then ~0

__all__ = [
    "BOS", "END_OF_GENERATION", "EOS", "FakeEngine", "IM_END", "IM_START", "N_VOCAB", "PAYLOAD_CELL", "PAYLOAD_HEADER",
    "PAYLOAD_MAGIC", "Reply", "SCRIPT_BIAS", "SPECIAL_TEXT", "SPECIAL_TOKENS",
]

Reply = Union[str, Callable[[str], Optional[str]], None]


def _chain(previous: bytes, token: int, position: int) -> bytes:
    return hashlib.sha256(previous + struct.pack("<ii", token, position)).digest()


class FakeEngine(LocalContext):
    """A deterministic stand-in for :class:`~skillgraft.engine.llama.Engine` (see the module docstring).

    ``calls`` counts the calls of ``capture``, ``graft``, ``restore``, ``prefill`` and
    ``generate``, so a test can assert that something was never captured.
    """

    n_vocab = N_VOCAB
    restarts = 0

    @property
    def text(self) -> "FakeEngine":
        """The tokenizer and template (the engine itself, as the server engine's vocabulary)."""
        return self

    def __init__(
        self, model_name: str = "fake-chatml", *, n_ctx: int = 4096, n_batch: int = 512, reply: Reply = None
    ) -> None:
        if n_ctx < 8 or n_batch < 1:
            raise ConfigError(f"a fake engine needs n_ctx >= 8 and n_batch >= 1, got {n_ctx} and {n_batch}")
        self.model_name = model_name
        self.n_ctx = n_ctx
        self.n_batch = n_batch
        self.reply = reply
        self.fingerprint = RuntimeFingerprint(
            gguf_sha256=hashlib.sha256(f"fake model {model_name}".encode()).hexdigest(),
            llama_cpp_python="fake",
            system_info="skillgraft.testing.FakeEngine",
            n_batch=n_batch,
            n_ubatch=n_batch,
            type_k="f16",
            type_v="f16",
            flash_attn=False,
            swa_full=False,
            backend="fake",
        )
        self._root = hashlib.sha256(b"fake kv root " + self.fingerprint.gguf_sha256.encode()).digest()
        self.calls: Counter = Counter()
        self._closed = False
        self.reset()

    def close(self) -> None:
        self._closed = True

    def __enter__(self) -> "FakeEngine":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- tokens and chat ---------------------------------------------------------------------

    def tokenize(self, text: str, *, add_bos: bool = True, special: bool = True) -> list[int]:
        """One id per UTF-8 byte; ``special`` parses the ChatML control tokens."""
        if not isinstance(text, str):
            raise InputError(f"text must be str, got {type(text).__name__}")
        tokens = [BOS] if add_bos else []
        parts = _SPECIAL_PATTERN.split(text) if special else [text]
        for part in parts:
            if part in SPECIAL_TOKENS and special:
                tokens.append(SPECIAL_TOKENS[part])
            else:
                tokens.extend(part.encode("utf-8"))
        return tokens

    def piece(self, token: int, *, special: bool = False) -> bytes:
        """The bytes of one token; control tokens are empty unless ``special``."""
        if 0 <= token < 256:
            return bytes([token])
        return SPECIAL_TEXT.get(token, "").encode() if special else b""

    def detokenize(self, tokens: Sequence[int], *, special: bool = False) -> str:
        return b"".join(self.piece(t, special=special) for t in tokens).decode("utf-8", "replace")

    def is_end_of_generation(self, token: int) -> bool:
        return token in END_OF_GENERATION

    def chat_prompt(self, messages: Sequence[tuple[str, str]], *, add_generation_prompt: bool = True) -> str:
        """ChatML: ``<|im_start|>role\\ncontent<|im_end|>\\n`` per message, then the assistant's opening."""
        parts = []
        for role, content in messages:
            if "\x00" in role or "\x00" in content:
                raise InputError(f"a {role!r} message contains a NUL byte, which would cut it short")
            parts.append(f"<|im_start|>{role}\n{content}<|im_end|>\n")
        if add_generation_prompt:
            parts.append("<|im_start|>assistant\n")
        return "".join(parts)

    def chat_split(self, system: str, user: str = "") -> tuple[str, str]:
        """``(prefix, turn)``: see :func:`skillgraft.core.chat_layout.split_chat`."""
        return split_chat(self, system, user)

    def check_grammar(self, gbnf: str) -> None:
        """Grammars are not compiled by the fake: every one passes."""

    # -- the context -------------------------------------------------------------------------

    def reset(self) -> None:
        """Forget every cell (the derived states pending on them are kept first)."""
        if getattr(self, "_cells", None):
            self._cells_going(0)
        self._cells: list[tuple[int, int, bytes]] = []
        self.n_past = 0
        self._has_logits = False

    @property
    def context_tokens(self) -> list[int]:
        return [token for token, _, _ in self._cells]

    @property
    def held(self) -> Optional[list[int]]:
        """The tokens of the cells held at their own positions (None once shifted), as the engine tracks them."""
        if any(position != index for index, (_, position, _) in enumerate(self._cells)):
            return None
        return self.context_tokens

    def keep_cells(self, n: int) -> None:
        """Keep the first ``n`` cells, forget the rest."""
        self.calls["keep"] += 1
        self._cells_going(n)
        del self._cells[n:]
        self.n_past, self._has_logits = len(self._cells), False

    def context_text(self) -> str:
        """What the context holds, rendered with its control tokens (what ``reply`` is given)."""
        return self.detokenize(self.context_tokens, special=True)

    def _require_open(self) -> None:
        if self._closed:
            raise EngineError(f"the engine {self.model_name} is closed")

    def _decode(self, tokens: Sequence[int], start: int, progress: Progress = None) -> None:
        self._require_open()
        for offset, token in enumerate(tokens):
            if not isinstance(token, (int, np.integer)) or not 0 <= token < N_VOCAB:
                self.reset()
                raise InputError(f"token {token!r} is outside the vocabulary of {N_VOCAB}")
            previous = self._cells[-1][2] if self._cells else self._root
            position = start + offset
            self._cells.append((int(token), position, _chain(previous, int(token), position)))
            if progress and ((offset + 1) % self.n_batch == 0 or offset + 1 == len(tokens)):
                progress(offset + 1, len(tokens))
        self.n_past = start + len(tokens)
        self._has_logits = True

    def prefill(self, tokens: Sequence[int], progress: Progress = None, *, start: int = 0) -> None:
        """Reset and evaluate ``tokens`` at ``[start, start+len)``."""
        self.calls["prefill"] += 1
        tokens = prefill_tokens(self, tokens, start)
        self.reset()
        self._decode(tokens, start, progress)

    def append(self, tokens: Sequence[int]) -> None:
        """Evaluate ``tokens`` after what the context holds."""
        self._decode(append_tokens(self, tokens), self.n_past)

    def shift_positions(self, delta: int) -> None:
        """Move every cell by ``delta`` positions, keeping its digest: not exact, like a K-shift."""
        require_fits(self, self.n_past + delta, "shifted context")
        self._cells = [(token, position + delta, digest) for token, position, digest in self._cells]
        self.n_past += delta

    def logits(self) -> np.ndarray:
        """float32 logits drawn from a generator seeded by the last cell's digest."""
        self._require_open()
        if not self._has_logits:
            raise EngineError("no logits: decode at least one token first (a restored state holds none)")
        seed = int.from_bytes(self._cells[-1][2][:8], "little")
        return np.random.default_rng(seed).standard_normal(N_VOCAB).astype(np.float32)

    def logits_bytes(self) -> bytes:
        return self.logits().tobytes()

    # -- capture and graft -------------------------------------------------------------------

    def state_size(self, n_tokens: int) -> int:
        return PAYLOAD_HEADER.size + n_tokens * PAYLOAD_CELL.size

    def save_state(self) -> bytes:
        """The cells as bytes: a header, then token, position and digest per cell."""
        cells = b"".join(PAYLOAD_CELL.pack(token, position, digest) for token, position, digest in self._cells)
        return PAYLOAD_HEADER.pack(PAYLOAD_MAGIC, len(self._cells)) + cells

    def cut_state(self, state: KVState, n: int) -> KVState:
        """``state`` cut to its first ``n`` tokens and cells."""
        cells = state.payload[PAYLOAD_HEADER.size: PAYLOAD_HEADER.size + n * PAYLOAD_CELL.size]
        payload = PAYLOAD_HEADER.pack(PAYLOAD_MAGIC, n) + cells
        return KVState(tuple(state.tokens[:n]), payload, hashlib.sha256(payload).hexdigest(), state.fingerprint)

    def save_prefix(self, n: int) -> bytes:
        """The first ``n`` cells as a payload (the context is unchanged)."""
        cells = b"".join(PAYLOAD_CELL.pack(token, position, digest) for token, position, digest in self._cells[:n])
        return PAYLOAD_HEADER.pack(PAYLOAD_MAGIC, len(self._cells[:n])) + cells


    def capture(self, source: Union[str, Sequence[int]], progress: Progress = None) -> KVState:
        """Prefill ``source`` (text or token ids) and capture the cells."""
        self.calls["capture"] += 1
        tokens = capture_tokens(self, source)
        started = time.perf_counter()
        self.prefill(tokens, progress)
        payload = self.save_state()
        return KVState(tuple(tokens), payload, hashlib.sha256(payload).hexdigest(), self.fingerprint,
                       time.perf_counter() - started)

    def check_payload(self, state: KVState, block_id: str = "", *, verify_hash: bool = True) -> None:
        """Raise unless ``state`` may be restored under this runtime (as the real engine checks)."""
        check_state(
            state, self.fingerprint, self.n_ctx, self.state_size(state.n_tokens), block_id, verify_hash=verify_hash
        )

    def restore(self, state: KVState, block_id: str = "", *, verify_hash: bool = True) -> float:
        """Replace the context with the payload's cells; return the seconds it took.

        The cells come from the payload, not from ``state.tokens``: a payload of another
        block restores that block, whose logits then differ.
        """
        self.calls["restore"] += 1
        self._require_open()
        self.check_payload(state, block_id, verify_hash=verify_hash)
        self._cells_going(0)  # the cells are replaced
        started = time.perf_counter()
        payload = state.payload  # read once (a file's is read and checked here)
        magic, count = PAYLOAD_HEADER.unpack_from(payload)
        cells = [PAYLOAD_CELL.unpack_from(payload, PAYLOAD_HEADER.size + i * PAYLOAD_CELL.size)
                 for i in range(min(count, state.n_tokens))]
        misplaced = next((i for i, cell in enumerate(cells) if cell[1] != i), None)
        if magic != PAYLOAD_MAGIC or count != state.n_tokens or misplaced is not None:
            self.reset()
            last = cells[-1][1] if cells else -1
            where = "" if misplaced is None else f", cell {misplaced} at position {cells[misplaced][1]}"
            raise RestoreRejectedError(
                block_id, len(payload), len(payload) if magic == PAYLOAD_MAGIC else 0, state.n_tokens,
                last, f"{count} cells for {state.n_tokens} tokens{where}",
            )
        self._cells = cells
        self.n_past = state.n_tokens
        self._has_logits = False
        return time.perf_counter() - started

    def graft(
        self,
        state: KVState,
        query: Union[str, Sequence[int]],
        block_id: str = "",
        *,
        keep: Optional[int] = None,
        verify_hash: bool = True,
    ) -> np.ndarray:
        """Restore ``state``, keep its first ``keep`` cells and evaluate ``query`` after them."""
        self.calls["graft"] += 1
        tokens, keep = graft_tokens(self, state, query, keep)
        self.restore(state, block_id, verify_hash=verify_hash)
        del self._cells[keep:]
        self.n_past = keep
        self._decode(tokens, keep)
        return self.logits()

    # -- generation --------------------------------------------------------------------------

    def _script(self) -> Optional[list[int]]:
        reply = self.reply(self.context_text()) if callable(self.reply) else self.reply
        return None if reply is None else [*reply.encode("utf-8"), IM_END]

    def generate(self, options: SamplingOptions) -> Iterator[TokenStep]:
        """Sample up to ``options.max_tokens`` after the context, as :meth:`Engine.generate` does.
        A ``grammar`` is not enforced: a scripted ``reply`` stands for the constrained text."""
        self.calls["generate"] += 1
        script = self._script()

        def logits(step: int) -> np.ndarray:
            values = self.logits().astype(np.float64)
            if script is not None and step < len(script):
                values[script[step]] += SCRIPT_BIAS
            return values

        yield from sample(self, options, logits)
