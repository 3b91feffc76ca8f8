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


# All clients together may write this many times each one may (a burst of as many): the cap
# that holds however many credentials or addresses a writer has.
ALL_CLIENTS_FACTOR = 4
ALL = "*"


class DepositRate:
    """A token bucket per client (:mod:`skillgraft.web.clients`: its credential, else its
    address), ``per_minute`` writes and a burst of as many, and one for all clients together,
    :data:`ALL_CLIENTS_FACTOR` times that."""

    def __init__(self, per_minute: float, clock=time.monotonic, *, all_factor: float = ALL_CLIENTS_FACTOR) -> None:
        self.capacity, self.per_second, self.clock = max(per_minute, 1.0), per_minute / 60.0, clock
        self.all_factor = all_factor
        self.buckets: dict[str, tuple[float, float]] = {}
        self.lock = threading.Lock()

    def _level(self, key: str, now: float) -> float:
        scale = self.all_factor if key == ALL else 1.0
        tokens, then = self.buckets.get(key, (self.capacity * scale, now))
        return min(self.capacity * scale, tokens + (now - then) * self.per_second * scale)

    def take(self, client: str) -> float:
        """0 when ``client`` may write now (a token taken from its bucket and from all
        clients'), else seconds until it may."""
        with self.lock:
            now = self.clock()
            mine, everyone = self._level(client, now), self._level(ALL, now)
            if mine >= 1 and everyone >= 1:
                self.buckets[client], self.buckets[ALL] = (mine - 1, now), (everyone - 1, now)
                if len(self.buckets) > 10_000:  # forget the clients whose buckets are full again
                    for key, (left, at) in list(self.buckets.items()):
                        if key != ALL and left + (now - at) * self.per_second >= self.capacity:
                            del self.buckets[key]
                return 0.0
            self.buckets[client], self.buckets[ALL] = (mine, now), (everyone, now)
            return max((1 - mine) / self.per_second, (1 - everyone) / (self.per_second * self.all_factor), 0.0)
