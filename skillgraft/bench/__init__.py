"""Benchmarks and plots behind ``skillgraft bench KIND`` (the ``bench`` extra for plots).

Experiments, not the product: nothing in the library imports this package; the CLI's
``bench`` command does, on demand. Its runners load the model on use (attributes are read
lazily), so a module that only reads a benchmark's data files loads no model runtime.
"""

from importlib import import_module

_RUNNERS = {"NEEDLES": ".needles", "bench_needles": ".needles", "bench_route": ".route", "bench_graft": ".runs",
            "bench_paging": ".runs", "bench_positions": ".runs"}

__all__ = ["NEEDLES", "bench_graft", "bench_paging", "bench_positions", "bench_route", "bench_needles"]


def __getattr__(name: str):
    if name not in _RUNNERS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(_RUNNERS[name], __name__), name)
