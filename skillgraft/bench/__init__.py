"""Benchmarks and plots behind ``skillgraft bench KIND`` (the ``bench`` extra for plots).

Experiments, not the product: nothing in the library imports this package; the CLI's
``bench`` command does, on demand.
"""

from .needles import NEEDLES, bench_needles
from .route import bench_route
from .runs import bench_graft, bench_paging, bench_positions

__all__ = ["NEEDLES", "bench_graft", "bench_paging", "bench_positions", "bench_route", "bench_needles"]
