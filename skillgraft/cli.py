"""The ``skillgraft`` command line: a thin click group over the Python API.

Machine-readable commands take ``--json`` and print one JSON object on stdout; progress
and logs go to stderr. Exit codes: 0 ok, 1 a user error (one line, no traceback unless
``--debug``), 2 usage.
"""

from __future__ import annotations

import json
import sys
from contextlib import contextmanager
from typing import Any, Callable, Iterator, Optional

import click

from .errors import SkillgraftError


class SkillgraftGroup(click.Group):
    """Turns a :class:`SkillgraftError` into a one-line message and exit code 1."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except SkillgraftError as exc:
            if ctx.params.get("debug"):
                raise
            click.echo(f"Error: {exc}", err=True)
            ctx.exit(1)


def emit(data: dict, as_json: bool, render: Optional[Callable[[dict], str]] = None) -> None:
    """Print ``data`` as one JSON object, or as text for people."""
    if as_json:
        click.echo(json.dumps(data, default=str))
    else:
        click.echo(render(data) if render else _render_mapping(data))


def _render_mapping(data: dict, indent: int = 0) -> str:
    lines = []
    for key, value in data.items():
        if isinstance(value, dict):
            lines.append(" " * indent + f"{key}:")
            lines.append(_render_mapping(value, indent + 2))
        else:
            lines.append(" " * indent + f"{key}: {value}")
    return "\n".join(lines)


@contextmanager
def progress_bar(label: str, enabled: bool = True) -> Iterator[Callable[[int, int], None]]:
    """A ``progress(done, total)`` callback drawing a bar on stderr."""
    from tqdm import tqdm

    bar = None

    def update(done: int, total: int) -> None:
        nonlocal bar
        if bar is None:
            bar = tqdm(total=total, desc=label, file=sys.stderr, disable=not enabled, leave=False)
        bar.total = total
        bar.n = done
        bar.refresh()

    try:
        yield update
    finally:
        if bar is not None:
            bar.close()


json_option = click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout.")
model_option = click.option(
    "--model", "-m", default=None, help="Embedded model name (smollm2-135m, gemma3-270m) or a GGUF path."
)


@click.group(cls=SkillgraftGroup)
@click.version_option(package_name="skillgraft")
@click.option("--debug", is_flag=True, help="Show tracebacks for errors.")
def cli(debug: bool) -> None:
    """skillgraft: a verified memory of skills for a frozen local language model.

    Skill manuals and verified solutions are prefilled once, their KV state is captured
    byte-exactly into block files and grafted back into fresh contexts on demand.
    """


@cli.command()
@model_option
@click.option("--samples", "-n", default=50, show_default=True, type=click.IntRange(1, 10_000), help="Samples to compare.")
@click.option("--seed", default=0, show_default=True, help="Seed of the prefixes and queries.")
@json_option
def verify(model: Optional[str], samples: int, seed: int, as_json: bool) -> None:
    """Byte-exactness self-test: grafted logits against fresh ones.

    Each sample is a seeded prefix from a built-in corpus, captured, grafted into a
    cleared context and queried; its logits are compared with a fresh run that decodes
    in the same chunks (and, as `concat`, with one concatenated prefill). A negative
    control that must not be exact shows the check can fail.
    """
    from .config import default_model
    from .exactness import verify as run_verify

    with progress_bar("verify", not as_json or sys.stderr.isatty()) as progress:
        report = run_verify(model or default_model(), samples, seed=seed, progress=progress)
    emit(report, as_json, _render_verify)


def _render_verify(report: dict) -> str:
    control, concat = report["negative_control"], report["concat"]
    return "\n".join(
        [
            f"model            {report['model']}  (fingerprint {report['fingerprint']['id']})",
            f"graft vs fresh   {report['sha_equal']}/{report['samples']} SHA-equal, "
            f"{report['argmax_mismatch']} argmax flips, KL median {report['kl_median']:.3g}, p99 {report['kl_p99']:.3g}",
            f"graft vs concat  {concat['sha_equal']}/{concat['samples']} SHA-equal, "
            f"{concat['argmax_mismatch']} argmax flips, KL median {concat['kl_median']:.3g}",
            f"negative control {control['sha_equal']}/{control['samples']} SHA-equal "
            f"({control['kind']}), KL median {control['kl_median']:.3g}",
            f"bytes per token  {report['bytes_per_token']} (KV {report['kv_bytes_per_token']:.0f})",
        ]
    )


@cli.command()
@json_option
def models(as_json: bool) -> None:
    """List the embedded models and whether their package is installed."""
    from .models import EMBEDDED_MODELS

    rows = [
        {"name": m.name, "package": m.distribution, "installed": m.installed(), "description": m.description}
        for m in EMBEDDED_MODELS.values()
    ]
    emit({"rows": rows}, as_json, _render_models)


def _render_models(data: dict) -> str:
    return "\n".join(
        f"{row['name']:14} {'installed' if row['installed'] else 'missing  '}  {row['description']}" for row in data["rows"]
    )


@cli.command()
@model_option
@json_option
def demo(model: Optional[str], as_json: bool) -> None:
    """The main job end to end on the embedded default model, in a temporary store."""
    from .demo import run_demo

    report = run_demo(model=model, log=None if as_json else lambda line: click.echo(line, err=True))
    emit(report, as_json, _render_demo)
    if not report["ok"]:
        sys.exit(1)


def _render_demo(report: dict) -> str:
    width = max(len(step["name"]) for step in report["steps"])
    lines = [f"{'step':{width}}  ok   result"]
    for step in report["steps"]:
        lines.append(f"{step['name']:{width}}  {'yes' if step['ok'] else 'NO ':3}  {step['summary']}")
    lines.append(f"ok: {str(report['ok']).lower()}")
    return "\n".join(lines)
