"""A GBNF grammar compiled by llama.cpp for one model's vocabulary: the in-process sampler's
:class:`~skillgraft.core.sampling.Constraint`.

llama.cpp's grammar sampler decides which tokens keep the text inside the grammar (the same
code llama-server runs for a ``grammar`` request); skillgraft's own sampler asks it about
the argmax first and masks the whole vocabulary only when that token is refused.
"""

from __future__ import annotations

import ctypes

import llama_cpp
import numpy as np

from ..errors import FormatError

TOKEN_DATA = np.dtype([("id", "<i4"), ("logit", "<f4"), ("p", "<f4")])
assert TOKEN_DATA.itemsize == ctypes.sizeof(llama_cpp.llama_token_data)


class NativeGrammar:
    """``grammar`` (GBNF, root rule ``root``) over the vocabulary ``vocab`` of ``n_vocab`` tokens.
    :class:`FormatError` when llama.cpp cannot parse it."""

    def __init__(self, vocab, n_vocab: int, grammar: str, field: str = "response_format") -> None:
        self._sampler = llama_cpp.llama_sampler_init_grammar(vocab, grammar.encode("utf-8"), b"root")
        if not self._sampler:
            raise FormatError(field, "llama.cpp cannot parse the grammar made from it")
        self._data = np.zeros(n_vocab, TOKEN_DATA)
        self._data["id"] = np.arange(n_vocab, dtype=np.int32)
        self._one = np.zeros(1, TOKEN_DATA)

    def _apply(self, data: np.ndarray) -> None:
        array = llama_cpp.llama_token_data_array(
            data.ctypes.data_as(llama_cpp.llama_token_data_p), len(data), -1, False
        )
        llama_cpp.llama_sampler_apply(self._sampler, ctypes.byref(array))

    def allows(self, token: int) -> bool:
        self._one[0] = (token, 0.0, 0.0)
        self._apply(self._one)
        return bool(np.isfinite(self._one["logit"][0]))

    def mask(self, logits: np.ndarray) -> np.ndarray:
        self._data["logit"] = logits
        self._data["p"] = 0.0
        self._apply(self._data)
        masked = logits.astype(np.float64, copy=True)
        masked[~np.isfinite(self._data["logit"])] = -np.inf
        return masked

    def accept(self, token: int) -> None:
        llama_cpp.llama_sampler_accept(self._sampler, int(token))

    def close(self) -> None:
        if self._sampler:
            llama_cpp.llama_sampler_free(self._sampler)
            self._sampler = None

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass
