"""Start the pool, the gateway and uvicorn; stop them all on exit (servers by their own PIDs).

:func:`run_app` serves an ASGI app until a signal: the gateway, or the inspector alone (``skillgraft ui``).
"""

from __future__ import annotations

import ipaddress
import logging
import signal
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Union

from ..config import EngineSettings
from ..errors import ConfigError
from .access import DepositPolicy
from .http_guard import HttpLimits

logger = logging.getLogger("skillgraft.gateway")


@dataclass(frozen=True)
class GatewayConfig:
    home: Union[str, Path]
    host: str = "127.0.0.1"
    port: int = 8080
    n_servers: int = 1
    n_slots: int = 1
    model: Optional[str] = None
    settings: Optional[EngineSettings] = None
    api_key: Optional[str] = None
    gate: Optional[str] = None
    catalog: Optional[str] = None
    blocks: Optional[str] = None
    deposits: DepositPolicy = DepositPolicy()
    http: HttpLimits = HttpLimits()
    slot_wait_s: Optional[float] = None  # how long a request waits for a free slot (pool default)
    embedder: Optional[str] = None

    def check(self) -> None:
        if not 0 <= self.port <= 65535:
            raise ConfigError(f"port must be in [0, 65535], got {self.port}")
        if self.n_servers < 1 or self.n_slots < 1:
            raise ConfigError(f"--servers and --slots must be at least 1, got {self.n_servers} and {self.n_slots}")
        if not is_loopback(self.host) and not self.api_key:
            raise ConfigError(f"listening on {self.host} (not loopback) needs --api-key")
        if self.slot_wait_s is not None and self.slot_wait_s <= 0:
            raise ConfigError(f"--slot-wait must be positive, got {self.slot_wait_s}")
        self.deposits.check(self.api_key)
        self.http.check()


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


def serve(config: GatewayConfig, *, ready: Optional[Callable[[str, list[int]], None]] = None) -> None:
    """Serve until interrupted (SIGINT/SIGTERM). ``ready(url, server_pids)`` is called once
    the servers are up and the gateway listens."""
    from .app import LOOPBACK_HOSTS, create_app
    from .http_guard import protocol_class
    from .pool import ServerPool
    from .service import Gateway

    config.check()
    waits = {} if config.slot_wait_s is None else {"lease_timeout_s": config.slot_wait_s}
    pool = ServerPool(config.n_servers, config.n_slots, model=config.model, settings=config.settings, **waits)
    try:
        gateway = Gateway(config.home, pool, gate=config.gate, catalog=config.catalog, blocks=config.blocks,
                          embedder=config.embedder)
        try:
            app = create_app(gateway, api_key=config.api_key, allowed_hosts=None if config.api_key else LOOPBACK_HOSTS,
                             deposits=config.deposits)
            announce = None if ready is None else lambda url: ready(url, [engine.pid for engine in pool.engines])
            run_app(app, config.host, config.port, ready=announce, http=protocol_class(config.http))
        finally:
            gateway.close()
    finally:
        pool.close()


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
