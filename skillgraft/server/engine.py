"""LlamaServerEngine: capture and graft blocks through a running ``llama-server``.

The server's slot API restores a saved sequence state into a slot and reuses it as a cached
prompt prefix, which is exactly a graft. This engine either starts its own server (loopback,
a free port, a private ``--slot-save-path``, stopped by its own PID) or attaches to one by
URL, and keeps skillgraft's checks in front of the server, which checks almost nothing:

- every flag that changes KV bytes or logits is pinned from :class:`EngineSettings`
  (``-fa off``, ``-ctk/-ctv``, ``-c/-b/-ub/-t``, a KV stream a slot, no prompt cache
  in host memory, ``--swa-full`` for sliding-window models) and recorded in the fingerprint;
- a block's fingerprint, size and SHA-256 are checked before its slot file is written;
- a graft completes with ``id_slot``, ``cache_prompt`` and the block + query as a token
  array, and ``timings.cache_n == N`` and ``prompt_n == q`` are checked every time: a
  silent re-prefill raises :class:`SlotReuseError`;
- after a failed restore the server is restarted before it serves again (a failed restore
  can leave corrupted KV behind, llama.cpp #27068).

The server binary comes from :mod:`skillgraft.server.build`; ``/completion`` calls live in
:mod:`skillgraft.server.completions`, ``/slots`` calls (capture, restore, save, erase) and the
slot files in :mod:`skillgraft.server.slot_states`, the returned values in
:mod:`skillgraft.server.records`; every request is sent by
:func:`skillgraft.server.connection.response_to` (once more on a connection the server dropped
before answering). This module owns the server's lifecycle. Requests on
different slots may run from several threads at once (the gateway leases one slot per
request); restarts and slot-file writes are serialised by the engine.
"""

from __future__ import annotations

import logging
import secrets
import shutil
import threading
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Optional, Sequence, Union

import httpx

from ..config import EngineSettings, default_model
from ..errors import ConfigError, DamagedCellsError, InputError, ServerError
from ..core.fingerprint import RuntimeFingerprint
from ..engine.gguf import gguf_facts
from ..engine.models import resolve_model, settings_for
from .build import binary_version, find_server
from .completions import ServerCompletions
from .connection import response_to
from .process import (
    ServerProcess, free_port, server_argv, server_fingerprint, supports_gpu_offload,
)
from .records import (
    Completion,
    Restore,
    ServerGraft,
    ServerInfo,
    ServerStep,
    StreamChunk,
    TopToken,
    window_mismatch,
)
from .scratch import in_memory_folder, make_private_folder
from .slot_states import SlotFiles, SlotStates
from ..core.chat_layout import split_chat
from ..core.states import require_fits
from ..engine.text import LlamaText

logger = logging.getLogger("skillgraft.server")

STARTUP_TIMEOUT_S = 300.0
REQUEST_TIMEOUT_S = 600.0

__all__ = [
    "Completion", "LlamaServerEngine", "Restore", "ServerGraft", "ServerInfo", "ServerStep", "StreamChunk", "TopToken",
]


class LlamaServerEngine(SlotStates, ServerCompletions):
    """Grafts blocks into a llama-server: started here (default) or attached by ``url``.

    Started: ``model`` is a model name or GGUF path; the server gets a private slot folder
    and ``n_slots`` slots (each its own KV stream; the model's window divided among them unless
    ``settings`` give one a slot), and a random API key. Attached:
    ``url`` names a server started with the same flags, ``slot_dir`` its ``--slot-save-path``
    (writable here), ``settings`` the values it was started with and ``api_key`` its key;
    the fingerprint then names the server's own build, so only blocks captured through such
    a server graft into it, and its backend follows ``settings.n_gpu_layers``.
    """

    def __init__(
        self,
        model: Union[str, Path, None] = None,
        settings: Optional[EngineSettings] = None,
        *,
        url: Optional[str] = None,
        slot_dir: Union[str, Path, None] = None,
        n_slots: int = 1,
        binary: Union[str, Path, None] = None,
        startup_timeout: float = STARTUP_TIMEOUT_S,
        slot_file_cache_bytes: int = 1 << 30,
        prompt_cache_mib: int = 0,
        api_key: Optional[str] = None,
    ) -> None:
        if n_slots < 1:
            raise ConfigError(f"n_slots must be at least 1, got {n_slots}")
        self.model_name, self.model_path = resolve_model(model or default_model())
        self.settings = settings_for(self.model_path, settings, n_slots)
        self.sliding_window = gguf_facts(self.model_path).sliding_window
        self.text = LlamaText.open(self.model_path, self.model_name)
        if self.sliding_window and self.settings.swa_full is False:
            raise ConfigError(
                f"{self.model_name} uses sliding-window attention (window {self.sliding_window}): "
                "grafts are exact only with swa_full=True"
            )
        self.n_slots = n_slots
        self._slot_contexts: dict = {}  # slot -> its AnswerContext, made on first use
        self.prompt_cache_mib = prompt_cache_mib
        self.startup_timeout = startup_timeout
        self._process: Optional[ServerProcess] = None
        self._private_dir: Optional[Path] = None
        self._needs_restart = False
        self._starting = False
        self._lifecycle = threading.RLock()
        # A started server gets a random key: loopback is reachable by every local user.
        self._api_key = api_key if url is not None else secrets.token_urlsafe(24)
        self.completions = 0
        self.restarts = 0
        self._client: Optional[httpx.Client] = None
        if url is None:
            self._private_dir = make_private_folder(slot_file_cache_bytes)
            self.slot_dir = self._private_dir / "slots"
            self.slot_dir.mkdir(mode=0o700)
            self.binary = Path(binary) if binary else find_server()
            self.build = binary_version(self.binary)
            self._start()
        else:
            if slot_dir is None:
                raise ConfigError("attaching to a server needs slot_dir, the folder it was given as --slot-save-path")
            self.slot_dir = Path(slot_dir)
            if not self.slot_dir.is_dir():
                raise ConfigError(f"slot_dir {self.slot_dir} is not a folder")
            self.binary = None
            self._connect(url.rstrip("/"))
            self.build = self._props().get("build_info", "")
        self.slot_files = SlotFiles(self.slot_dir, slot_file_cache_bytes,
                                    in_memory=self._private_dir is not None and in_memory_folder(self._private_dir))
        self.server = self._describe()
        self._state_header, self._state_per_token = self._measure_state_layout()  # learns the KV streams too
        self.fingerprint = self._build_fingerprint()

    # -- lifecycle -------------------------------------------------------------------------

    def _start(self) -> None:
        assert self._private_dir is not None
        self.forget_held()  # a new process holds nothing of the old one's slots
        log_path = self._private_dir / "server.log"
        last_error = ""
        for _ in range(3):  # another process may take the free port before the server binds it
            port = free_port()
            argv = server_argv(
                self.binary, self.model_path, self.settings, port=port, slot_dir=self.slot_dir,
                n_slots=self.n_slots, swa_full=self._swa_full_flag(), prompt_cache_mib=self.prompt_cache_mib,
            )
            log_path.write_bytes(b"")
            self._process = ServerProcess(argv, log_path)
            self._process.start(env={"LLAMA_API_KEY": self._api_key})
            self._connect(f"http://127.0.0.1:{port}")
            try:
                self._wait_ready()
                self._needs_restart = False
                return
            except ServerError as exc:
                last_error = str(exc)
                self._process.stop()
                if "address already in use" not in self._process.log_text().lower():
                    break
        raise ServerError(last_error)

    def _swa_full_flag(self) -> bool:
        return self.sliding_window > 0

    def _connect(self, url: str) -> None:
        # The old client is left to the collector: requests on other slots may still hold it.
        self.url = url
        headers = {"Authorization": f"Bearer {self._api_key}"} if self._api_key else None
        self._client = httpx.Client(base_url=url, timeout=REQUEST_TIMEOUT_S, trust_env=False, headers=headers)

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if self._process is not None and not self._process.alive:
                raise ServerError(f"llama-server exited while starting:\n{self._process.log_tail()}")
            try:
                if self._client.get("/health", timeout=5).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise ServerError(f"llama-server was not ready after {self.startup_timeout:.0f} s")

    def restart(self) -> None:
        """Stop the server and start it again with the same flags (started servers only)."""
        if self._process is None:
            raise ServerError(f"the server at {self.url} was not started here: restart it, then attach again")
        with self._lifecycle:
            self._process.stop()
            self._starting = True
            try:
                self._start()
                self.server = self._describe()
                self.restarts += 1
            finally:
                self._starting = False

    def ensure_running(self) -> bool:
        """Restart a started server whose process has died; True when it had to."""
        with self._lifecycle:
            if self._process is None or self._process.alive or self._starting:
                return False
            logger.warning("llama-server (pid %s) is not running: restarting it", self._process.pid)
            self.restart()
            return True

    def close(self) -> None:
        """Stop a server started here, remove its private folder, close the client and free
        the vocabulary."""
        if self._process is not None:
            self._process.stop()
            self._process = None
        if self._client is not None:
            self._client.close()
            self._client = None
        if self._private_dir is not None:
            shutil.rmtree(self._private_dir, ignore_errors=True)
            self._private_dir = None
        text = getattr(self, "text", None)
        if text is not None:
            text.close()

    def __enter__(self) -> "LlamaServerEngine":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    @property
    def pid(self) -> Optional[int]:
        return self._process.pid if self._process else None

    def exited_within(self, timeout: float) -> bool:
        """Whether a server started here has ended, waiting up to ``timeout`` seconds for it to."""
        return self._process is not None and self._process.exited_within(timeout)

    @property
    def alive(self) -> bool:
        """Whether a server started here is running (attached servers: whether not closed)."""
        return self._process.alive if self._process is not None else self._client is not None

    # -- HTTP ------------------------------------------------------------------------------

    def _request(self, method: str, path: str, **kwargs) -> dict:
        if self._client is None:
            raise ServerError("the engine is closed")
        if not self._starting:
            self.ensure_running()
        try:
            # Once more on a connection the server dropped before answering (response_to's rule).
            with response_to(self._client, method, path, **kwargs) as response:
                response.read()
        except (httpx.HTTPError, RuntimeError) as exc:  # RuntimeError: a client replaced by a restart
            raise ServerError(f"{method} {self.url}{path} failed: {exc!r}") from None
        try:
            body = response.json()
        except ValueError:
            body = {"raw": response.text[:500]}
        if response.status_code != 200:
            message = body.get("error", {}).get("message") if isinstance(body.get("error"), dict) else body
            raise ServerError(f"{method} {path} answered {response.status_code}: {message}")
        if not isinstance(body, dict):
            raise ServerError(f"{method} {path} answered {type(body).__name__}, expected a JSON object")
        return body

    def _props(self) -> dict:
        return self._request("GET", "/props")

    def _describe(self) -> ServerInfo:
        props = self._props()
        n_ctx_slot = int(props.get("default_generation_settings", {}).get("n_ctx", 0))
        info = ServerInfo(
            url=self.url,
            build=str(props.get("build_info", self.build)),
            model_path=str(props.get("model_path", "")),
            n_slots=int(props.get("total_slots", 0)),
            n_ctx_slot=n_ctx_slot,
            argv=tuple(self._process.argv) if self._process else (),
            pid=self.pid,
            binary=str(self.binary or ""),
            started=self._process is not None,
        )
        if info.n_slots != self.n_slots:
            raise ConfigError(f"the server has {info.n_slots} slots, the engine was told {self.n_slots}")
        if info.n_ctx_slot != self.settings.n_ctx:
            raise ConfigError(window_mismatch(info.n_ctx_slot, self.settings.n_ctx))
        return info

    # -- fingerprint -----------------------------------------------------------------------

    def _build_fingerprint(self) -> RuntimeFingerprint:
        return server_fingerprint(
            self.binary, self.build, started=self._process is not None, model_path=self.model_path,
            settings=self.settings, sliding_window=self.sliding_window, n_slots=self.n_slots,
            kv_unified=self.slot_files.n_stream == 1,
            gpu_offload=supports_gpu_offload(self._process.log_text() if self._process else None),
        )

    # -- tokens and chat -------------------------------------------------------------------

    @property
    def n_ctx(self) -> int:
        return self.settings.n_ctx

    def tokenize(self, text: str, *, add_bos: bool = True, special: bool = True) -> list[int]:
        """Token ids, from the model's own vocabulary loaded here (as the in-process engine has them)."""
        return self.text.tokenize(text, add_bos=add_bos, special=special)

    def detokenize(self, tokens: Sequence[int]) -> str:
        return self.text.detokenize(tokens)

    def piece(self, token: int) -> bytes:
        return self.text.piece(token)

    def is_end_of_generation(self, token: int) -> bool:
        return self.text.is_end_of_generation(token)

    def chat_prompt(self, messages: Sequence[tuple[str, str]], *, add_generation_prompt: bool = True) -> str:
        """Render a chat with the model's own template, here (the in-process engine's rendering:
        the server's ``/apply-template`` may fall back to another template)."""
        return self.text.chat_prompt(messages, add_generation_prompt=add_generation_prompt)

    def chat_split(self, system: str, user: str = "") -> tuple[str, str]:
        """``(prefix, turn)``: see :func:`skillgraft.core.chat_layout.split_chat`."""
        return split_chat(self, system, user)

    def check_grammar(self, gbnf: str) -> None:
        """Raise :class:`~skillgraft.errors.FormatError` unless llama.cpp parses ``gbnf`` (checked
        here, with the model's vocabulary, before the server is asked)."""
        self.text.check_grammar(gbnf)

    def answer_slot(self, slot: int = 0):
        """Slot ``slot`` held for one answer (callers serialise answers on one slot)."""
        return nullcontext(self.context(slot).answering())

    # -- slots -----------------------------------------------------------------------------

    def _check_slot(self, slot: int) -> int:
        if isinstance(slot, bool) or not isinstance(slot, int) or not 0 <= slot < self.n_slots:
            raise InputError(f"slot must be an int in [0, {self.n_slots}), got {slot!r}")
        return slot

    def _require_serving(self) -> None:
        if not self._needs_restart:
            return
        with self._lifecycle:  # another thread may be restarting it already
            if self._process is not None and self._needs_restart:
                logger.warning("restarting llama-server (pid %s): its cells may be damaged", self._process.pid)
                self.restart()
        if self._needs_restart:
            raise ServerError(
                f"the cells of the server at {self.url} may be damaged (a failed restore, NaN logits); "
                "it must be restarted before it serves again"
            )

    def _cells_damaged(self) -> DamagedCellsError:
        """The error for NaN logits from this server, which is restarted before it serves again
        (an erase does not clear NaN values from its cells)."""
        with self._lifecycle:
            self._needs_restart = True
        return DamagedCellsError(self.url)

    def require_fits(self, n_tokens: int, what: str = "text") -> None:
        require_fits(self, n_tokens, what)
