"""Text in and out of a llama.cpp model: its tokenizer, its token pieces and its chat template.

:class:`LlamaText` wraps a loaded model's vocabulary; :class:`~skillgraft.engine.llama.Engine`
owns one and delegates to it. It holds pointers into the model and lives as long as it.
"""

from __future__ import annotations

import ctypes
import threading
from collections import OrderedDict
from typing import Optional, Sequence

import llama_cpp

from ..errors import EngineError, InputError

# llama.cpp's built-in chat templates, for GGUFs that carry none.
_BUILTIN_TEMPLATES = {"gemma": b"gemma", "llama": b"llama3", "phi": b"phi3"}


# An agent sends the same long system prompt, tools and turns with every request: the tokens
# of recent long texts are kept (a few MB at most) instead of tokenizing them again, and so are
# those of the template's own short texts (its turn markers, parsed for control tokens: ~40 us
# each, several a request).
TOKENS_KEPT = 64
TOKENS_KEPT_MIN_CHARS = 512
TOKENS_KEPT_MAX_CHARS = 256 * 1024
GRAMMARS_KEPT = 32


class LlamaText:
    """The tokenizer and chat template of the llama.cpp model ``model`` (a native pointer)."""

    def __init__(self, model, model_name: str, *, owned: bool = False) -> None:
        self._model = model
        self._owned = owned
        self._vocab = llama_cpp.llama_model_get_vocab(model)
        self.model_name = model_name
        self.n_vocab = llama_cpp.llama_vocab_n_tokens(self._vocab)
        self._kept: OrderedDict[tuple[str, bool, bool], tuple[int, ...]] = OrderedDict()
        self._parsed: OrderedDict[str, None] = OrderedDict()
        self._kept_lock = threading.Lock()

    @classmethod
    def open(cls, path, model_name: str) -> "LlamaText":
        """The tokenizer and template of the GGUF at ``path``, its vocabulary loaded alone (no
        weights): how a llama-server engine renders and tokenizes exactly as the in-process
        engine does."""
        from .native import init_backend

        init_backend()
        params = llama_cpp.llama_model_default_params()
        params.vocab_only = True
        model = llama_cpp.llama_model_load_from_file(str(path).encode(), params)
        if not model:
            raise EngineError(f"llama.cpp could not read the vocabulary of {path}")
        return cls(model, model_name, owned=True)

    def close(self) -> None:
        """Free a vocabulary this object loaded itself."""
        if self._owned and self._model:
            llama_cpp.llama_model_free(self._model)
            self._model = None

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    def metadata(self, key: str) -> Optional[str]:
        """A GGUF metadata value as text, or None."""
        buf = ctypes.create_string_buffer(4096)
        n = llama_cpp.llama_model_meta_val_str(self._model, key.encode(), buf, len(buf))
        return buf.value.decode("utf-8", "replace") if n >= 0 else None

    def tokenize(self, text: str, *, add_bos: bool = True, special: bool = True) -> list[int]:
        """Token ids of ``text``; ``special`` parses control tokens such as ``<|im_start|>``."""
        if not isinstance(text, str):
            raise InputError(f"text must be str, got {type(text).__name__}")
        if not (special or TOKENS_KEPT_MIN_CHARS <= len(text)) or len(text) > TOKENS_KEPT_MAX_CHARS:
            return self._tokenize(text, add_bos, special)
        key = (text, bool(add_bos), bool(special))
        with self._kept_lock:
            kept = self._kept.get(key)
            if kept is not None:
                self._kept.move_to_end(key)
                return list(kept)
        tokens = self._tokenize(text, add_bos, special)
        with self._kept_lock:
            self._kept[key] = tuple(tokens)
            while len(self._kept) > TOKENS_KEPT:
                self._kept.popitem(last=False)
        return tokens

    def _tokenize(self, text: str, add_bos: bool, special: bool) -> list[int]:
        data = text.encode("utf-8")
        capacity = len(data) + 16
        while True:
            buf = (llama_cpp.llama_token * capacity)()
            n = llama_cpp.llama_tokenize(self._vocab, data, len(data), buf, capacity, add_bos, special)
            if n >= 0:
                return list(buf[:n])
            capacity = -n

    def piece(self, token: int) -> bytes:
        """The bytes of one token (control tokens rendered as empty)."""
        buf = ctypes.create_string_buffer(64)
        n = llama_cpp.llama_token_to_piece(self._vocab, token, buf, len(buf), 0, False)
        if n < 0:
            buf = ctypes.create_string_buffer(-n)
            n = llama_cpp.llama_token_to_piece(self._vocab, token, buf, len(buf), 0, False)
        return buf.raw[:n]

    def detokenize(self, tokens: Sequence[int]) -> str:
        return b"".join(self.piece(t) for t in tokens).decode("utf-8", "replace")

    def is_end_of_generation(self, token: int) -> bool:
        return bool(llama_cpp.llama_vocab_is_eog(self._vocab, token))

    def grammar(self, gbnf: str):
        """``gbnf`` compiled for this vocabulary (a :class:`~skillgraft.engine.grammar.NativeGrammar`);
        :class:`~skillgraft.errors.FormatError` when llama.cpp cannot parse it."""
        from .grammar import NativeGrammar

        return NativeGrammar(self._vocab, self.n_vocab, gbnf)

    def check_grammar(self, gbnf: str) -> None:
        """Raise :class:`~skillgraft.errors.FormatError` unless llama.cpp parses ``gbnf`` (the
        last :data:`GRAMMARS_KEPT` that parsed are known: an agent sends the same tools each call)."""
        with self._kept_lock:
            if gbnf in self._parsed:
                self._parsed.move_to_end(gbnf)
                return
        self.grammar(gbnf).close()
        with self._kept_lock:
            self._parsed[gbnf] = None
            while len(self._parsed) > GRAMMARS_KEPT:
                self._parsed.popitem(last=False)

    def chat_prompt(self, messages: Sequence[tuple[str, str]], *, add_generation_prompt: bool = True) -> str:
        """Render ``[(role, content), ...]`` with the model's own chat template."""
        template = llama_cpp.llama_model_chat_template(self._model, None)
        if not template:
            arch = self.metadata("general.architecture") or ""
            template = _BUILTIN_TEMPLATES.get(arch.rstrip("0123456789"), b"chatml")
        for role, content in messages:
            if "\x00" in role or "\x00" in content:
                raise InputError(f"a {role!r} message contains a NUL byte, which would cut it short")
        encoded = [(role.encode(), content.encode("utf-8")) for role, content in messages]
        chat = (llama_cpp.llama_chat_message * len(encoded))(*[llama_cpp.llama_chat_message(r, c) for r, c in encoded])
        size = 2 * sum(len(c) + len(r) for r, c in encoded) + 1024
        for _ in range(2):
            buf = ctypes.create_string_buffer(size)
            n = llama_cpp.llama_chat_apply_template(template, chat, len(encoded), add_generation_prompt, buf, size)
            if n < 0:
                raise EngineError(f"llama.cpp does not support the chat template of {self.model_name}")
            if n <= size:
                return buf.raw[:n].decode("utf-8", "replace")
            size = n + 1
        raise EngineError("chat template output kept growing")
