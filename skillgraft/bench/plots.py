"""PNG plots of benchmark reports (``skillgraft bench KIND --plot FILE``)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from ..errors import ConfigError


def _pyplot():
    if importlib.util.find_spec("matplotlib") is None:
        raise ConfigError("plots need matplotlib: pip install 'skillgraft[bench]'")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _label_sizes(axis, sizes) -> None:
    """Tick a log axis at the measured sizes only, in plain numbers."""
    from matplotlib.ticker import NullFormatter

    axis.set_xticks(list(sizes))
    axis.set_xticklabels([f"{size:,}" for size in sizes])
    axis.xaxis.set_minor_formatter(NullFormatter())


def plot_report(report: dict, path: Path) -> Path:
    """Draw the report of one benchmark kind into ``path``."""
    plt = _pyplot()
    if report["kind"] == "growth":
        return plot_growth(report, path, plt)
    figure, axis = plt.subplots(figsize=(7, 4.2))
    kind = report["kind"]
    draw = _DRAWINGS.get(kind)
    if draw is None:
        raise ConfigError(f"no plot for benchmark kind {kind!r}")
    draw(axis, report)
    axis.set_title(f"skillgraft bench {kind}" + (f" — {report['model']}" if "model" in report else ""))
    if axis.get_legend_handles_labels()[0]:
        axis.legend()
    axis.grid(True, alpha=0.3)
    return _saved(figure, path)


def _seconds_by_size(axis, sizes) -> None:
    """Log-log axes of median seconds over the tokens in the block."""
    axis.set(xscale="log", yscale="log", xlabel="tokens in the block", ylabel="seconds (median)")
    _label_sizes(axis, sizes)


def _draw_graft(axis, report: dict) -> None:
    rows = report["rows"]
    sizes = [r["tokens"] for r in rows]
    series = [("prefill_s", "cold prefill"), ("restore_plus_one_s", "restore + 1 token"), ("restore_s", "restore"),
              ("floor_s", "native load (floor)"), ("llama_cpp_python_load_state_s", "Llama.load_state")]
    for key, label in series:
        if key in rows[0]:
            axis.plot(sizes, [r[key] for r in rows], marker="o", label=label)
    _seconds_by_size(axis, sizes)


def _draw_paging(axis, report: dict) -> None:
    rows = report["rows"]
    sizes = [r["tokens"] for r in rows]
    for key, label in (("reprefill_s", "re-prefill"), ("first_access_s", "first access"), ("warm_restore_s", "warm restore")):
        axis.plot(sizes, [r[key] for r in rows], marker="o", label=label)
    _seconds_by_size(axis, sizes)


def _draw_server(axis, report: dict) -> None:
    """Each way to the first token over the server, at the sizes it was measured at."""
    rows = report["rows"]
    sizes = [r["tokens"] for r in rows]
    series = [("reprefill_s", "cold prefill (server)"), ("resident_s", "cache_prompt, prefix resident"),
              ("prompt_cache_s", "server RAM prompt cache"), ("graft_s", "graft: restore + first token")]
    for key, label in series:
        points = [(size, r[key]) for size, r in zip(sizes, rows) if r.get(key) is not None]
        if points:
            axis.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=label)
    _seconds_by_size(axis, sizes)


def _draw_route(axis, report: dict) -> None:
    rows = report["rows"]
    for index in ("flat", "hnsw"):
        part = [r for r in rows if r["index"] == index]
        axis.plot([r["keys"] for r in part], [r["search_p50_ms"] for r in part], marker="o", label=f"{index} search p50")
    axis.set(xscale="log", yscale="log", xlabel="routing keys", ylabel="milliseconds")
    _label_sizes(axis, sorted({r["keys"] for r in rows}))


def _draw_positions(axis, report: dict) -> None:
    rows = report["rows"]
    labels = [f"{r['case'].split(':')[0]} {r['offset']}" for r in rows]
    axis.barh(labels, [r["kl_median"] or 0 for r in rows])
    axis.set(xlabel="KL median (nats)")


def _draw_needles(axis, report: dict) -> None:
    rows = report["rows"]
    axis.bar([str(r["depth_block"]) for r in rows], [1 if r["found"] else 0 for r in rows])
    axis.set(xlabel="needle depth (block)", ylabel="found", ylim=(0, 1.2))


def _draw_serve(axis, report: dict) -> None:
    """p50 and p95 seconds per request for each decision that served any."""
    rows = report["rows"]
    decisions = [r["decision"] for r in rows if r["requests"]]
    served = [r for r in rows if r["requests"]]
    positions = range(len(served))
    axis.bar([p - 0.2 for p in positions], [r["p50_s"] for r in served], width=0.4, label="p50")
    axis.bar([p + 0.2 for p in positions], [r["p95_s"] for r in served], width=0.4, label="p95")
    axis.set_xticks(list(positions))
    axis.set_xticklabels([f"{d} ({r['requests']})" for d, r in zip(decisions, served)])
    summary = report["summary"]
    axis.set(yscale="log", ylabel="seconds per request",
             xlabel=f"{summary['clients']} clients, {summary['requests']} requests, {summary['servers']} servers"
                    + (", one killed mid-load" if summary.get("killed_server_pid") else ""))


_DRAWINGS = {"graft": _draw_graft, "paging": _draw_paging, "server": _draw_server, "route": _draw_route,
             "positions": _draw_positions, "needles": _draw_needles, "serve": _draw_serve}


def plot_growth(report: dict, path: Path, plt) -> Path:
    """Four panels over the catalog's size: import rate, route p50 and p99, memory, disk."""
    rows = report["rows"]
    sizes = [r["skills"] for r in rows]
    figure, axes = plt.subplots(2, 2, figsize=(9, 6.4))
    panels = [
        (axes[0][0], [("import_s_per_skill", "import"), ("reimport_s_per_skill", "re-import, unchanged")], 1,
         "seconds a skill"),
        (axes[0][1], [("route_p50_ms", "route p50"), ("route_p99_ms", "route p99")], 1, "milliseconds"),
        (axes[1][0], [("peak_rss_bytes", "peak resident memory")], 1 << 20, "MiB"),
        (axes[1][1], [("disk_bytes", "store on disk")], 1 << 20, "MiB"),
    ]
    for axis, series, scale, unit in panels:
        for key, label in series:
            axis.plot(sizes, [(r[key] or 0) / scale for r in rows], marker="o", label=label)
        axis.set(xscale="log", xlabel="skills in the catalog", ylabel=unit)
        axis.set_ylim(bottom=0)
        _label_sizes(axis, sizes)
        axis.legend()
        axis.grid(True, alpha=0.3)
    figure.suptitle("skillgraft bench growth")
    return _saved(figure, path)


def _saved(figure, path) -> Path:
    """``figure`` laid out, written to ``path`` (its folder made) and closed."""
    import matplotlib.pyplot as plt

    figure.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path
