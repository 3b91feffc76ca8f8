"""Start the pool, the gateway and uvicorn; stop them all on exit (servers by their own PIDs).

:func:`~skillgraft.web.serving.run_app` serves it until a signal.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Union

from ..config import EngineSettings
from ..errors import ConfigError
from ..deposit_policy import DepositPolicy
from ..web.http_guard import HttpLimits
from ..web.serving import is_loopback, run_app
from ..core.deadline import GENERATION_TIMEOUT_S, REQUEST_TIMEOUT_S
from ..core.planning import DEFAULT_CONVERSATION_POLICY

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
    keys_file: Optional[str] = None  # 'NAMESPACE KEY' a line (:mod:`skillgraft.gateway.keys`)
    gate: Optional[str] = None
    catalog: Optional[str] = None
    blocks: Optional[str] = None
    deposits: DepositPolicy = DepositPolicy()
    http: HttpLimits = HttpLimits()
    slot_wait_s: Optional[float] = None  # how long a request waits for a free slot (pool default)
    embedder: Optional[str] = None
    derived_bytes: Optional[int] = None  # the derived prefix states kept on the home's disk (memory default)
    conversations: str = DEFAULT_CONVERSATION_POLICY  # a later turn's skill (core.planning.conversation_recall)
    generation_timeout_s: float = GENERATION_TIMEOUT_S  # an answer's generation, from its slot's lease
    request_timeout_s: float = REQUEST_TIMEOUT_S  # a chat request, from its arrival

    def check(self) -> None:
        if not 0 <= self.port <= 65535:
            raise ConfigError(f"port must be in [0, 65535], got {self.port}")
        if self.n_servers < 1 or self.n_slots < 1:
            raise ConfigError(f"--servers and --slots must be at least 1, got {self.n_servers} and {self.n_slots}")
        if not is_loopback(self.host) and not (self.api_key or self.keys_file):
            raise ConfigError(f"listening on {self.host} (not loopback) needs --api-key or --keys")
        if self.slot_wait_s is not None and self.slot_wait_s <= 0:
            raise ConfigError(f"--slot-wait must be positive, got {self.slot_wait_s}")
        if not (self.generation_timeout_s > 0 and self.request_timeout_s > 0):
            raise ConfigError(f"--generation-timeout and --request-timeout must be positive, got "
                              f"{self.generation_timeout_s} and {self.request_timeout_s}")
        self.deposits.check(self.api_key)
        if self.keys_file and self.deposits.allowed and not self.deposits.key:
            raise ConfigError("--allow-deposits with --keys needs its own --deposit-key: it publishes to the base "
                              "(the default namespace); a namespace's key writes to its own namespace alone")
        self.http.check()

    def keys(self):
        """The keys the gateway accepts (:class:`~skillgraft.gateway.keys.ApiKeys`)."""
        from .keys import ApiKeys

        keys = ApiKeys.of(self.api_key, self.keys_file)
        if self.deposits.key and self.keys_file and keys.principal(f"Bearer {self.deposits.key}".encode()) is not None:
            # one credential would read as that key's namespace (or as an admin) and publish to the base
            raise ConfigError("the deposit key must differ from every key of the key file")
        return keys


def serve(config: GatewayConfig, *, ready: Optional[Callable[[str, list[int]], None]] = None) -> None:
    """Serve until interrupted (SIGINT/SIGTERM). ``ready(url, server_pids)`` is called once
    the servers are up and the gateway listens."""
    from ..web.serving import LOOPBACK_HOSTS
    from .app import create_app
    from ..web.http_guard import protocol_class
    from .pool import ServerPool
    from .service import Gateway

    config.check()
    keys = config.keys()  # a bad key file stops the start before the servers do
    waits = {} if config.slot_wait_s is None else {"lease_timeout_s": config.slot_wait_s}
    pool = ServerPool(config.n_servers, config.n_slots, model=config.model, settings=config.settings, **waits)
    try:
        gateway = Gateway(config.home, pool, gate=config.gate, catalog=config.catalog, blocks=config.blocks,
                          embedder=config.embedder, derived_bytes=config.derived_bytes,
                          conversations=config.conversations, generation_timeout_s=config.generation_timeout_s,
                          request_timeout_s=config.request_timeout_s)
        try:
            app = create_app(gateway, keys=keys, allowed_hosts=None if keys else LOOPBACK_HOSTS,
                             deposits=config.deposits)
            announce = None if ready is None else lambda url: ready(url, [engine.pid for engine in pool.engines])
            run_app(app, config.host, config.port, ready=announce, http=protocol_class(config.http))
        finally:
            gateway.close()
    finally:
        pool.close()
