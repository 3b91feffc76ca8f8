"""The gateway's Prometheus metrics, in a registry of its own (``GET /metrics``)."""

from __future__ import annotations

from typing import Callable, Optional

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class GatewayMetrics:
    """Requests by decision, restore/graft/request latency, slot leases and server restarts."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "skillgraft_requests", "Chat requests answered, by memory decision", ["decision"], registry=self.registry
        )
        self.errors = Counter("skillgraft_errors", "Requests answered with an error, by status", ["status"], registry=self.registry)
        self.request_seconds = Histogram(
            "skillgraft_request_seconds", "Time to answer a chat request (to the first byte when streamed)",
            ["decision"], buckets=LATENCY_BUCKETS, registry=self.registry,
        )
        self.restore_seconds = Histogram(
            "skillgraft_restore_seconds", "Slot restore time reported by llama-server", buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.graft_seconds = Histogram(
            "skillgraft_graft_seconds", "Restore plus generation of a grafted answer", buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.reused_cells = Counter(
            "skillgraft_reused_cells", "Prompt cells reused instead of prefilled, by where they came from "
            "(block, derived, slot)", ["source"], registry=self.registry,
        )
        self.slots_leased = Gauge("skillgraft_slots_leased", "Slots held by requests now", registry=self.registry)
        self.slots_total = Gauge("skillgraft_slots", "Slots in the server pool", registry=self.registry)
        self.restarts = Gauge("skillgraft_server_restarts", "llama-server restarts since the gateway started", registry=self.registry)

    def request(self, decision: str, seconds: float) -> None:
        self.requests.labels(decision=decision).inc()
        self.request_seconds.labels(decision=decision).observe(seconds)

    def reused(self, source: str, cells: int) -> None:
        if cells and source:
            self.reused_cells.labels(source=source).inc(cells)

    def error(self, status: int) -> None:
        self.errors.labels(status=str(status)).inc()

    def restore(self, seconds: float) -> None:
        self.restore_seconds.observe(seconds)

    def graft(self, seconds: float) -> None:
        self.graft_seconds.observe(seconds)

    def render(self, pool_status: Optional[Callable[[], object]] = None) -> bytes:
        """The Prometheus text exposition, with the pool's gauges read now."""
        if pool_status is not None:
            status = pool_status()
            self.slots_leased.set(status.slots_leased)
            self.slots_total.set(status.slots_total)
            self.restarts.set(status.restarts)
        return generate_latest(self.registry)
