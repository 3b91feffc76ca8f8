"""Serve an ASGI app with uvicorn until a signal: the gateway, or the inspector alone (``skillgraft ui``)."""

from __future__ import annotations

import ipaddress
import signal
from contextlib import contextmanager
from typing import Callable, Optional

LOOPBACK_HOSTS = ["127.0.0.1", "localhost", "[::1]", "::1"]


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _stop_on_signals(server) -> None:
    """SIGINT/SIGTERM end ``server.run()`` normally, so the pool is closed by its owner (uvicorn
    would re-raise the signal after its shutdown and skip that)."""

    @contextmanager
    def capture_signals():
        previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
        for sig in previous:
            signal.signal(sig, lambda *_: setattr(server, "should_exit", True))
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    server.capture_signals = capture_signals


def run_app(app, host: str, port: int, *, ready: Optional[Callable[[str], None]] = None, http="auto") -> None:
    """Serve the ASGI ``app`` with uvicorn (``http``: its HTTP protocol) until SIGINT/SIGTERM;
    ``ready(url)`` once it listens (on the port bound, for port 0)."""
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(
        app, host=host, port=port, log_level="warning", access_log=False, timeout_graceful_shutdown=5, http=http,
    ))
    if ready is not None:
        original = server.startup

        async def startup(sockets=None):
            await original(sockets)
            bound = server.servers[0].sockets[0].getsockname() if server.servers else (host, port)
            ready(f"http://{host}:{bound[1]}")

        server.startup = startup
    _stop_on_signals(server)
    server.run()
