"""llama-server as users run it, the peer of every side-by-side benchmark.

``-m -np -c -t -tb -ngl`` and llama-server's own defaults otherwise: its host prompt cache
(``--cache-ram`` 8192 MiB unless ``cache_mib`` says otherwise), flash attention ``auto``, weight
repacking on, one KV cache per slot. Only the context and threads are given, the same as the
gateway's (``SKILLGRAFT_N_CTX`` per slot, ``SKILLGRAFT_THREADS``); the model and binary are the
gateway's. It listens on loopback with a random API key and is stopped by its own PID.
"""

from __future__ import annotations

import secrets
import time
from pathlib import Path
from typing import Optional, Sequence

from ..errors import ServerError

__all__ = ["PlainLlamaServer", "slot_window"]


def slot_window(model: str, slots: int) -> int:
    """The context each of ``slots`` slots gets, for both systems of a benchmark: the model's
    window (``SKILLGRAFT_N_CTX`` when set), less where ``slots`` of them would pass the largest
    window a context takes."""
    from ..config import MAX_CONTEXT
    from ..engine.models import settings_for

    return min(settings_for(model).n_ctx, MAX_CONTEXT // slots)


START_TIMEOUT_S = 300.0
REQUEST_TIMEOUT_S = 900.0


class PlainLlamaServer:
    """One plain llama-server (module docstring) of ``slots`` slots, logging into ``workdir``;
    :attr:`client` an HTTP client carrying its key, :meth:`restart` a fresh process on the same port."""

    def __init__(self, model: str, slots: int, workdir: Path, *, cache_mib: Optional[int] = None,
                 flags: Sequence[str] = ()) -> None:
        from ..engine.models import resolve_model, settings_for
        from ..server.build import binary_version, find_server
        from ..server.process import ServerProcess, free_port

        settings = settings_for(model)
        binary, (_, path) = find_server(), resolve_model(model)
        self.build = binary_version(binary)
        port, self._key = free_port(), secrets.token_urlsafe(24)
        self.argv = [str(binary), "-m", str(path), "--host", "127.0.0.1", "--port", str(port), "-np", str(slots),
                     "-c", str(slots * slot_window(model, slots)), "-t", str(settings.n_threads), "-tb", str(settings.n_threads),
                     "-ngl", str(settings.n_gpu_layers)]
        if cache_mib is not None:
            self.argv += ["--cache-ram", str(cache_mib)]
        self.argv += list(flags)  # another flag than users run it with (a measurement of what it costs)
        self.url, self.headers = f"http://127.0.0.1:{port}", {"Authorization": f"Bearer {self._key}"}
        self.process = ServerProcess(self.argv, Path(workdir) / f"llama-server-{port}.log")
        self.client = None
        self._start()

    @property
    def flags(self) -> list[str]:
        """Its flags after the model, host and port."""
        return self.argv[7:]

    def new_client(self):
        """Another HTTP client of this server (one per concurrent agent)."""
        import httpx

        return httpx.Client(base_url=self.url, timeout=REQUEST_TIMEOUT_S, trust_env=False, headers=self.headers)

    def _start(self) -> None:
        import httpx

        self.process.start(env={"LLAMA_API_KEY": self._key})
        self.client = self.new_client()
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline and self.process.alive:
            try:
                if self.client.get("/health", timeout=5).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        self.stop()
        raise ServerError(f"llama-server did not start:\n{self.process.log_tail()}")

    def restart(self) -> None:
        """Stop it and start it again (nothing it held in memory is kept)."""
        self.stop()
        self._start()

    def stop(self) -> None:
        if self.client is not None:
            self.client.close()
        self.process.stop()
