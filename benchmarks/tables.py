"""Print the Markdown tables of docs/benchmarks.md from the JSON reports in a folder.

    .venv/bin/python benchmarks/tables.py [FOLDER]      # default docs/data
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

DATA = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/data")


def table(rows: list[dict], columns: list[tuple[str, str, str]]) -> str:
    """``columns``: (key, heading, format spec)."""
    lines = ["| " + " | ".join(h for _, h, _ in columns) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        cells = []
        for key, _, spec in columns:
            value = row.get(key)
            cells.append("—" if value is None else format(value, spec) if spec else str(value))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def load(name: str):
    path = DATA / f"{name}.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):  # missing, or still being written
        return None


def main() -> int:
    graft = load("bench_graft")
    if graft:
        print("## graft\n")
        print(table(graft["rows"], [
            ("tokens", "tokens", ""), ("prefill_s", "prefill s", ".3f"), ("restore_s", "restore s", ".5f"),
            ("restore_plus_one_s", "restore+1 s", ".4f"), ("floor_s", "floor s", ".4f"), ("speedup", "speedup", ".0f"),
            ("restore_vs_floor", "restore/floor", ".2f"), ("first_access_vs_floor", "first access/floor", ".2f"),
            ("vs_llama_cpp_python_load_state", "Llama.load_state/restore", ".1f"),
            ("vs_llama_cpp_python_disk_cache", "LlamaDiskCache/restore", ".1f"), ("bytes_per_token", "bytes/token", ".1f"),
        ]))
        print()
        print(table(graft["rows"], [
            ("tokens", "tokens", ""), ("bytes", "our block bytes", ","), ("native_file_bytes", "native file bytes", ","),
            ("llama_cpp_python_state_bytes", "Llama state bytes", ","), ("llama_cpp_python_scores_bytes", "+ scores bytes", ","),
            ("llama_cpp_python_pickled_bytes", "pickled LlamaState", ","),
            ("llama_cpp_python_load_state_s", "Llama.load_state s", ".4f"),
            ("llama_cpp_python_disk_cache_load_s", "LlamaDiskCache load s", ".4f"),
        ]))
    for name, columns in (
        ("bench_paging", [("tokens", "tokens", ""), ("first_access_s", "first access s", ".4f"), ("warm_restore_s", "warm restore s", ".4f"),
                          ("reprefill_s", "re-prefill s", ".3f"), ("first_vs_warm", "first/warm", ".1f"), ("reprefill_vs_first", "re-prefill/first", ".0f")]),
        ("bench_positions", [("case", "case", ""), ("offset", "offset", ""), ("samples", "samples", ""), ("sha_equal", "SHA-equal", ""),
                             ("argmax_mismatch", "argmax flips", ""), ("kl_median", "KL median", ".2e"), ("kl_p99", "KL p99", ".2e")]),
        ("bench_route", [("keys", "keys", ","), ("index", "index", ""), ("build_s", "build s", ".2f"), ("search_p50_ms", "search p50 ms", ".3f"),
                         ("search_p99_ms", "search p99 ms", ".3f"), ("route_p50_ms", "route p50 ms (embedding + search)", ".2f"),
                         ("route_p90_ms", "route p90 ms", ".2f"), ("recall_at_1_vs_flat", "recall@1 vs flat", ".3f")]),
        ("bench_needles", [("depth_block", "block", ""), ("expected", "needle", ""), ("routed_right", "routed right", ""),
                           ("found", "found", ""), ("graft_s", "graft s", ".4f"),
                           ("load_s", "load s (first access)", ".4f")]),
    ):
        report = load(name)
        if report:
            print(f"\n## {name}\n")
            print(table(report["rows"], columns))
            extra = {k: v for k, v in report.items() if k not in {"rows", "machine"}}
            print("\n" + json.dumps(extra))
    return 0


if __name__ == "__main__":
    sys.exit(main())
