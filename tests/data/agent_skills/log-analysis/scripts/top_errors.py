#!/usr/bin/env python3
"""Group error lines in text or JSON-lines logs by normalised signature."""
import argparse
import json
import re
from collections import Counter

PATTERNS = [
    (re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", re.I), "<uuid>"),
    (re.compile(r"\b0x[0-9a-f]+\b", re.I), "<hex>"),
    (re.compile(r"[\w.+-]+@[\w-]+\.[\w.]+"), "<email>"),
    (re.compile(r"'[^']*'|\"[^\"]*\""), "<str>"),
    (re.compile(r"\b\d+(\.\d+)?\b"), "<n>"),
]
TS = re.compile(r"^(\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2})?)")


def signature(msg):
    for rx, repl in PATTERNS:
        msg = rx.sub(repl, msg)
    return msg.strip()[:200]


def records(path):
    with open(path, encoding="utf-8", errors="replace") as fh:
        for line in fh:
            line = line.rstrip("\n")
            if line.startswith("{"):
                try:
                    obj = json.loads(line)
                    yield obj.get("ts") or obj.get("time", ""), obj.get("level", ""), obj.get("msg", line)
                    continue
                except ValueError:
                    pass
            m = TS.match(line)
            level = "error" if re.search(r"\b(ERROR|FATAL|CRITICAL)\b", line) else ""
            yield (m.group(1) if m else ""), level, line


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("files", nargs="+")
    ap.add_argument("--since", default="")
    ap.add_argument("--until", default="~")
    ap.add_argument("--top", type=int, default=20)
    args = ap.parse_args()
    counts, first, last, example = Counter(), {}, {}, {}
    for path in args.files:
        for ts, level, msg in records(path):
            if level.lower() not in ("error", "fatal", "critical"):
                continue
            if ts and not (args.since <= ts.replace(" ", "T") <= args.until):
                continue
            sig = signature(msg)
            counts[sig] += 1
            first.setdefault(sig, ts)
            last[sig] = ts
            example.setdefault(sig, msg)
    for sig, n in counts.most_common(args.top):
        print(f"{n:7d}  {first[sig]} .. {last[sig]}  {sig}")
        print(f"         e.g. {example[sig][:300]}")


if __name__ == "__main__":
    main()
