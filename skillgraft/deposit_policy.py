"""Whether remote clients may write to a store, with which key and how often: one policy for
every door that takes deposits (the OpenAI gateway over HTTP, MCP over stdio)."""

from __future__ import annotations

import hmac
import threading
import time
from dataclasses import dataclass
from typing import Optional

from .errors import ConfigError

__all__ = ["DepositPolicy", "DepositRate"]


@dataclass(frozen=True)
class DepositPolicy:
    """Whether remote clients may write to the store, with which key, how often."""

    allowed: bool = False
    key: Optional[str] = None
    per_minute: float = 10.0

    def check(self, api_key: Optional[str]) -> None:
        if self.per_minute <= 0:
            raise ConfigError(f"--deposits-per-minute must be positive, got {self.per_minute}")
        if self.key is not None and not self.allowed:
            raise ConfigError("--deposit-key is given but deposits are off: add --allow-deposits")
        if self.allowed and api_key and not self.key:
            raise ConfigError("--allow-deposits with --api-key needs its own --deposit-key")
        if self.key is not None and api_key is not None and hmac.compare_digest(self.key, api_key):
            raise ConfigError("the deposit key must differ from the API key")


class DepositRate:
    """A token bucket per client address: ``per_minute`` deposits, a burst of as many."""

    def __init__(self, per_minute: float, clock=time.monotonic) -> None:
        self.capacity, self.per_second, self.clock = max(per_minute, 1.0), per_minute / 60.0, clock
        self.buckets: dict[str, tuple[float, float]] = {}
        self.lock = threading.Lock()

    def take(self, client: str) -> float:
        """0 when ``client`` may deposit now (one token taken), else seconds until it may."""
        with self.lock:
            now = self.clock()
            tokens, then = self.buckets.get(client, (self.capacity, now))
            tokens = min(self.capacity, tokens + (now - then) * self.per_second)
            if tokens >= 1:
                self.buckets[client] = (tokens - 1, now)
                if len(self.buckets) > 10_000:  # forget the clients whose buckets are full again
                    for key, (left, at) in list(self.buckets.items()):
                        if left + (now - at) * self.per_second >= self.capacity:
                            del self.buckets[key]
                return 0.0
            self.buckets[client] = (tokens, now)
            return (1 - tokens) / self.per_second
