"""Writing a benchmark script's JSON report: to its file under docs/data, and to stdout."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional


def write_report(report: dict, out: Optional[str]) -> int:
    """Write ``report`` to ``out`` (folders made; None: nowhere) and print it; the script's exit status."""
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(json.dumps(report, indent=2) + "\n")
    json.dump(report, sys.stdout, indent=2)
    print()
    return 0
