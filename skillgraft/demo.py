"""``skillgraft demo``: the main job end to end on the embedded default model."""

from __future__ import annotations

import tempfile
import time
from typing import Callable, Optional

from .config import default_model
from .engine import Engine

MANUAL = (
    "Skill manual: squashing commits with git. To squash the last N commits into one, run "
    "`git rebase -i HEAD~N`. In the editor, keep the first line as `pick` and change the "
    "others to `squash` (or `s`). Save and close; git then opens an editor for the combined "
    "commit message. If the commits were already pushed, update the remote with "
    "`git push --force-with-lease`, which refuses to overwrite work you have not seen. "
    "To abort a rebase in progress, run `git rebase --abort`."
)


def run_demo(model: Optional[str] = None, log: Optional[Callable[[str], None]] = None) -> dict:
    """Run the demo; return ``{"steps": [...], "ok": bool}``."""
    say = log or (lambda line: None)
    steps: list[dict] = []

    def step(name: str, ok: bool, summary: str, **data) -> None:
        steps.append({"name": name, "ok": bool(ok), "summary": summary, **data})
        say(f"[{'ok' if ok else 'FAILED'}] {name}: {summary}")

    with tempfile.TemporaryDirectory(prefix="skillgraft-demo-"), Engine(model or default_model()) as engine:
        query = engine.tokenize(" Question: how do I squash my last three commits?", add_bos=False)
        started = time.perf_counter()
        state = engine.capture(MANUAL)
        prefill_s = time.perf_counter() - started
        step(
            "capture manual",
            True,
            f"{state.n_tokens} tokens, {state.n_bytes:,} bytes ({state.bytes_per_token:.0f} per token), sha256 {state.sha256[:12]}",
            tokens=state.n_tokens,
            bytes=state.n_bytes,
        )
        engine.append(query)
        fresh = engine.logits_bytes()
        restore_s = engine.restore(state)
        engine.append(query)
        grafted = engine.logits_bytes()
        step("graft is byte-exact", fresh == grafted, "grafted logits SHA-256-equal to a fresh prefill")
        step(
            "prefill vs restore",
            restore_s < prefill_s,
            f"prefill {prefill_s * 1000:.1f} ms, restore {restore_s * 1000:.2f} ms ({prefill_s / max(restore_s, 1e-9):.0f}x)",
            prefill_s=prefill_s,
            restore_s=restore_s,
        )
    return {"steps": steps, "ok": all(s["ok"] for s in steps)}
