"""The ``skillgraft`` command line: a thin click group over the Python API.

Machine-readable commands take ``--json`` and print one JSON object on stdout, errors
included (``{"error": {"type": ..., "message": ...}}``); progress and logs go to stderr and
are drawn only when it is a terminal. Exit codes: 0 ok, 1 a user error (one line, no
traceback unless ``--debug``), 2 usage. ``--home`` and ``--debug`` work before or after the
command name. Commands that only read refuse a store folder that holds no catalog, so a
mistyped ``--home`` is an error instead of a new, empty store.
"""

from __future__ import annotations

import json
import shutil
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Optional, TextIO

import click

from .errors import SkillgraftError, StoreError

# The commands that may create the store folder; every other one needs an existing store.
ADDING_COMMANDS = frozenset({"add-manual", "add-solution", "import", "solve", "calibrate", "serve", "mcp"})
HOME_HELP = "Store folder (default $SKILLGRAFT_HOME or ~/.skillgraft)."
DEBUG_HELP = "Show tracebacks for errors."


def _remember(key: str) -> Callable:
    """An option callback that also records the value given in the shared ``ctx.obj``."""

    def callback(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
        if value is not None and value is not False:
            ctx.ensure_object(dict)[key] = value
        return value

    return callback


def _shared_options() -> list[click.Option]:
    """``--home`` and ``--debug`` for every command, so they also work after its name."""
    return [
        click.Option(["--home"], type=click.Path(file_okay=False), expose_value=False, callback=_remember("home"), help=HOME_HELP),
        click.Option(["--debug"], is_flag=True, expose_value=False, callback=_remember("debug"), help=DEBUG_HELP),
    ]


class SkillgraftGroup(click.Group):
    """Gives every command the shared options, and turns a :class:`SkillgraftError` into
    exit code 1 with one line on stderr (and, under ``--json``, a JSON error object on stdout)."""

    def add_command(self, cmd: click.Command, name: Optional[str] = None) -> None:
        if not any(param.name == "home" for param in cmd.params):
            cmd.params.extend(_shared_options())
        super().add_command(cmd, name)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except SkillgraftError as exc:
            options = ctx.obj or {}
            if options.get("debug") or ctx.params.get("debug"):
                raise
            _json_error(ctx, exc, str(exc))
            click.echo(f"Error: {exc}", err=True)
            ctx.exit(1)
        except click.UsageError as exc:  # click prints it on stderr and exits 2
            _json_error(ctx, exc, exc.format_message())
            raise


def _json_error(ctx: click.Context, exc: Exception, message: str) -> None:
    """Under ``--json``, the error as one JSON object on stdout."""
    if (ctx.obj or {}).get("json"):
        click.echo(json.dumps({"error": {"type": type(exc).__name__, "message": message}}))


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


def is_terminal(stream: TextIO) -> bool:
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


class Activity:
    """What a long command is doing, drawn on stderr only when stderr is a terminal.

    While ``status`` is set and no progress has come, a spinner shows it with the seconds
    elapsed (the model and embedder load takes 6-30 s); the first ``activity(done, total)``
    call turns it into a bar that counts ``done`` of ``total``. ``say(line)`` replaces the
    status. Everything it draws is erased when it ends, so nothing is printed twice.
    """

    FRAMES = "|/-\\"

    def __init__(
        self, label: str, status: str = "", *, unit: str = "it", enabled: Optional[bool] = None, stream: Optional[TextIO] = None
    ):
        self.label = label
        self.unit = unit
        self.status = status
        self.stream = stream or sys.stderr
        self.enabled = is_terminal(self.stream) if enabled is None else enabled
        self._bar = None
        self._stop = threading.Event()
        self._spinner: Optional[threading.Thread] = None
        self._started = time.monotonic()

    def __enter__(self) -> "Activity":
        self._started = time.monotonic()
        if self.status:
            self._spin()
        return self

    def __exit__(self, *exc) -> None:
        self._halt_spinner()
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def __call__(self, done: int, total: int) -> None:
        if not self.enabled:
            return
        self._halt_spinner()
        if self._bar is None:
            from tqdm import tqdm

            # Sizes given, not measured by tqdm: a terminal that reports 0 x 0 would hide the bar.
            rows = max(2, shutil.get_terminal_size().lines)
            self._bar = tqdm(
                total=total, desc=self.label, unit=self.unit, file=self.stream, leave=False, ncols=_width(), nrows=rows,
                mininterval=0,  # calls come per chunk or per block: draw each one
                bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt} {unit} [{elapsed}]",
            )
        self._bar.total = total
        self._bar.update(done - self._bar.n)

    def say(self, line: str) -> None:
        """Show ``line`` as the current status (a log callback)."""
        self.status = line
        if self._bar is None:
            self._spin()

    def _spin(self) -> None:
        if not self.enabled or self._spinner is not None:
            return
        self._stop.clear()
        self._spinner = threading.Thread(target=self._draw, name="skillgraft-activity", daemon=True)
        self._spinner.start()

    def _draw(self) -> None:
        frame = 0
        while True:
            width = _width()
            elapsed = time.monotonic() - self._started
            line = f"{self.FRAMES[frame % len(self.FRAMES)]} {self.status} ({elapsed:.0f} s)"
            self.stream.write("\r\x1b[K" + line[:width])
            self.stream.flush()
            frame += 1
            if self._stop.wait(0.1):
                break
        self.stream.write("\r\x1b[K")
        self.stream.flush()

    def _halt_spinner(self) -> None:
        if self._spinner is not None:
            self._stop.set()
            self._spinner.join()
            self._spinner = None


def _width() -> int:
    """Columns to draw in: the terminal's (80 when it does not say), less one so lines never wrap."""
    return max(20, shutil.get_terminal_size().columns - 1)


def progress_bar(label: str, enabled: bool = True) -> Activity:
    """A ``progress(done, total)`` callback drawing a bar on stderr when it is a terminal."""
    return Activity(label, enabled=enabled and is_terminal(sys.stderr))


json_option = click.option(
    "--json", "as_json", is_flag=True, callback=_remember("json"), help="Print one JSON object on stdout."
)
model_option = click.option(
    "--model", "-m", default=None, help="Embedded model name (smollm2-135m, gemma3-270m) or a GGUF path."
)


@click.group(cls=SkillgraftGroup)
@click.version_option(package_name="skillgraft")
@click.option("--debug", is_flag=True, help=DEBUG_HELP + " Also accepted after the command name.")
@click.option(
    "--home",
    envvar="SKILLGRAFT_HOME",
    type=click.Path(file_okay=False),
    help=HOME_HELP[:-1] + "; also accepted after the command name, where it wins.",
)
@click.option("--catalog", envvar="SKILLGRAFT_CATALOG", default=None,
              help="A shared catalog, postgresql://… (default $SKILLGRAFT_CATALOG, else SQLite in the home).")
@click.option("--blocks", envvar="SKILLGRAFT_BLOCKS", default=None,
              help="Shared blocks, s3://bucket/prefix or file:///path (default $SKILLGRAFT_BLOCKS, else the home).")
@click.pass_context
def cli(ctx: click.Context, debug: bool, home: Optional[str], catalog: Optional[str], blocks: Optional[str]) -> None:
    """skillgraft: a verified memory of skills for a frozen local language model.

    Skill manuals and verified solutions are prefilled once, their KV state is captured
    byte-exactly into block files and grafted back into fresh contexts on demand.
    """
    ctx.obj = {"home": home, "debug": debug, "catalog": catalog, "blocks": blocks}


def store_home(ctx: click.Context) -> Path:
    """The store folder the options name; it must hold a catalog unless the command adds."""
    from .config import default_home

    given = (ctx.obj or {}).get("home")
    home = Path(given).expanduser() if given else default_home()
    from .backends import catalog_url

    shared = catalog_url((ctx.obj or {}).get("catalog")) is not None
    if ctx.command.name not in ADDING_COMMANDS and not shared and not (home / "catalog.db").is_file():
        raise StoreError(
            f"no skillgraft store at {home} (it holds no catalog.db): check --home or $SKILLGRAFT_HOME; "
            f"a command that adds (add-manual, add-solution, import, solve, calibrate) creates the store"
        )
    return home


def open_memory(ctx: click.Context, model: Optional[str] = None):
    """The SkillMemory of the store the options name, closed with the command."""
    from .memory import SkillMemory

    obj = ctx.obj or {}
    memory = SkillMemory.open(store_home(ctx), model=model, catalog=obj.get("catalog"), blocks=obj.get("blocks"))
    ctx.call_on_close(memory.close)
    return memory


def open_store(ctx: click.Context):
    from .store import BlockStore

    obj = ctx.obj or {}
    store = BlockStore(store_home(ctx), catalog=obj.get("catalog"), blocks=obj.get("blocks"))
    ctx.call_on_close(store.close)
    return store


def read_text_file(path: str, what: str) -> str:
    """The UTF-8 text of ``path``; ``-`` reads standard input."""
    from .errors import InputError

    try:
        if path == "-":
            data = getattr(sys.stdin, "buffer", sys.stdin).read()
        else:
            with open(path, "rb") as file:
                data = file.read()
    except OSError as exc:
        raise InputError(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    if isinstance(data, str):
        return data
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        source = "standard input" if path == "-" else path
        raise InputError(f"{what} {source} is not UTF-8 text (byte {exc.start})") from None


@cli.command()
@model_option
@click.option("--samples", "-n", default=50, show_default=True, type=click.IntRange(1, 10_000), help="Samples to compare.")
@click.option("--seed", default=0, show_default=True, help="Seed of the prefixes and queries.")
@click.option(
    "--engine", "engine_kind", type=click.Choice(["in-process", "server"]), default="in-process", show_default=True,
    help="Graft in this process, or through a llama-server started here (the built one).",
)
@json_option
def verify(model: Optional[str], samples: int, seed: int, engine_kind: str, as_json: bool) -> None:
    """Byte-exactness self-test: grafted logits against fresh ones.

    Each sample is a seeded prefix from a built-in corpus, captured, grafted into a
    cleared context and queried; its logits are compared with a fresh run that decodes
    in the same chunks (and, as `concat`, with one concatenated prefill). A negative
    control that must not be exact shows the check can fail. With `--engine server` the
    graft goes through a real llama-server: its next-token distribution and a greedy
    continuation are compared with the server's own fresh prefill, plus the byte round
    trip, the cache_n check and agreement with the in-process engine.
    """
    from .config import default_model

    model = model or default_model()
    with Activity("verify", f"loading {model}") as progress:
        if engine_kind == "server":
            from .engine import Engine
            from .server_checks import verify_server
            from .server_engine import LlamaServerEngine

            with LlamaServerEngine(model) as server, Engine(model) as local:
                report = verify_server(server, samples, seed=seed, in_process=local, progress=progress).to_dict()
            emit(report, as_json)
            return
        from .exactness import verify as run_verify

        report = run_verify(model, samples, seed=seed, progress=progress)
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


# -- the store ------------------------------------------------------------------------------


@cli.command("add-manual")
@click.argument("name")
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--example", "-e", "examples", multiple=True, help="An example query that should reach this manual.")
@click.option("--description", "-d", default="", help="One sentence saying what the skill is for.")
@model_option
@json_option
@click.pass_context
def add_manual(ctx, name, file, examples, description, model, as_json) -> None:
    """Capture the skill manual in FILE as a block named NAME.

    The manual is prefilled once and its KV state stored; NAME, the description and
    every --example become routing keys. Use - as FILE to read standard input. A name
    that is taken, or a text already stored under another name, is refused before any
    capture.
    """
    text = read_text_file(file, "manual")
    memory = open_memory(ctx, model)
    with Activity(f"capture {name}", f"loading {memory.model}", unit="tok") as progress:
        block = memory.add_manual(name, text, examples=list(examples), description=description, progress=progress)
    emit(_block_result(block), as_json)


def _block_result(block, **extra) -> dict:
    return {
        "block_id": block.id,
        "name": block.name,
        "tokens": block.n_tokens,
        "bytes": block.n_bytes,
        "sha256": block.sha256,
        **extra,
    }


@cli.command("list")
@click.option("--kind", type=click.Choice(["manual", "solution"]), help="Only blocks of this kind.")
@json_option
@click.pass_context
def list_blocks(ctx, kind, as_json) -> None:
    """List the blocks in the store."""
    rows = [b.summary() for b in open_memory(ctx).list(kind=kind, include_quarantined=True)]
    emit(
        {"rows": rows},
        as_json,
        lambda d: "\n".join(
            f"{r['id']}  {r['kind']:8} {r['status']:11} {r['n_tokens']:>6} tok  {r['name']}" for r in d["rows"]
        )
        or "(the store is empty)",
    )


@click.command()
@click.argument("ref")
@json_option
@click.pass_context
def show(ctx, ref, as_json) -> None:
    """Show one block and its routing keys.

    REF is a block id, a unique id prefix, a name, or the question of a verified
    solution. `get` is the same command.
    """
    memory = open_memory(ctx)
    block = memory.get(ref)
    keys = [{"kind": k["kind"], "text": k["text"]} for k in memory.store.routing_keys(block.id)]
    emit({**block.summary(), "routing_keys": keys}, as_json, _render_block)


cli.add_command(show)
cli.add_command(show, "get")


def _render_block(data: dict) -> str:
    fields = {k: v for k, v in data.items() if k != "routing_keys" and v is not None}
    keys = [f"  {key['kind']:11} {key['text']}" for key in data["routing_keys"]]
    return _render_mapping(fields) + "\nrouting_keys:" + ("\n" + "\n".join(keys) if keys else " (none)")


@cli.command()
@click.argument("ref")
@click.option("--file", "-f", "file", type=click.Path(dir_okay=False), help="New text, re-captured (- reads standard input).")
@click.option("--example", "-e", "examples", multiple=True, help="Replaces the example queries (repeat for several).")
@click.option("--description", "-d", default=None, help="Replaces the description.")
@model_option
@json_option
@click.pass_context
def update(ctx, ref, file, examples, description, model, as_json) -> None:
    """Change a block and keep its name: new text (re-captured), examples or description.

    REF is a block id, a unique id prefix, a name or a solution's question. A new text
    gives a new block id; the old block is removed once the new one is stored.
    """
    if file is None and not examples and description is None:
        raise click.UsageError("nothing to update: give --file, --example or --description")
    text = read_text_file(file, "text") if file is not None else None
    memory = open_memory(ctx, model)
    before = memory.get(ref)
    with Activity(f"capture {before.name}", f"loading {memory.model}", unit="tok") as progress:
        block = memory.update(
            before.id, text=text, examples=list(examples) or None, description=description, progress=progress
        )
    emit(_block_result(block, previous_block_id=before.id), as_json)


@cli.command()
@click.argument("ref")
@click.argument("new_name")
@json_option
@click.pass_context
def rename(ctx, ref, new_name, as_json) -> None:
    """Give a block (by id, id prefix, name or question) the name NEW_NAME."""
    memory = open_memory(ctx)
    before = memory.get(ref)
    block = memory.rename(before.id, new_name)
    emit({"block_id": block.id, "name": block.name, "previous_name": before.name}, as_json)


@cli.command()
@click.argument("ref")
@json_option
@click.pass_context
def rm(ctx, ref, as_json) -> None:
    """Remove a block (by id, id prefix, name or question): its row, routing keys and file."""
    block = open_memory(ctx).delete(ref)
    emit({"removed": block.id, "name": block.name}, as_json)


@cli.command()
@model_option
@json_option
@click.pass_context
def recapture(ctx, model, as_json) -> None:
    """Capture every block again under the current runtime (model, build, settings).

    After an upgrade or a settings change, blocks captured under the old runtime no
    longer graft; this prefills each one's stored source text again and stores the new
    state under the same name.
    """
    memory = open_memory(ctx, model)
    with Activity("recapture", f"loading {memory.model}", unit="block") as progress:
        report = memory.recapture(progress=progress).as_dict()
    emit(report, as_json, _render_recapture)
    if report["failed"]:
        sys.exit(1)


def _render_recapture(report: dict) -> str:
    lines = [f"{len(report['recaptured'])} recaptured, {len(report['unchanged'])} unchanged, {len(report['failed'])} failed"]
    lines += [f"recaptured {r['name']}: {r['old']} -> {r['new']}" for r in report["recaptured"]]
    lines += [f"failed     {r['name']} ({r['block_id']}): {r['error']}" for r in report["failed"]]
    return "\n".join(lines)


@cli.command()
@click.option("--repair", is_flag=True, help="Settle what is wrong: quarantine, re-capture, clean up.")
@model_option
@json_option
@click.pass_context
def check(ctx, repair, model, as_json) -> None:
    """Verify every block file against the catalog (size and SHA-256).

    With --repair: corrupt files go to quarantine/, blocks are re-captured from their
    stored source text when the runtime matches (byte-identical), temp files of
    interrupted writes are deleted and files without a catalog row are quarantined.
    """
    store_home(ctx)
    try:
        memory = open_memory(ctx, model)
    except StoreError as exc:  # a catalog that cannot even be opened is the problem to report
        report = {"blocks": 0, "ok": False, "problems": [{"block_id": None, "problem": str(exc)}], "repaired": []}
    else:
        report = memory.check(repair=repair).as_dict()
    emit(report, as_json, _render_check)
    if not report["ok"]:
        sys.exit(1)


def _render_check(report: dict) -> str:
    lines = [f"{report['blocks']} blocks, {'ok' if report['ok'] else 'problems found'}"]
    for item in report["repaired"]:
        lines.append(f"repaired  {item.get('block_id') or item.get('file')}: {item['problem']} -> {item['action']}")
    for item in report["problems"]:
        lines.append(f"problem   {item.get('block_id') or item.get('file')}: {item['problem']}")
    return "\n".join(lines)


@cli.command("export")
@click.argument("path", type=click.Path(dir_okay=False))
@json_option
@click.pass_context
def export_command(ctx, path, as_json) -> None:
    """Write every healthy block to a portable bundle (a tar file) at PATH.

    The bundle is written to a new file beside PATH and renamed over it: a link at PATH is
    replaced, never written through.
    """
    from .bundles import export_bundle

    with progress_bar("export", not as_json) as progress:
        report = export_bundle(open_store(ctx), path, progress)
    emit(report.as_dict(), as_json)


@cli.command("import")
@click.argument("path", type=click.Path(dir_okay=False, exists=True))
@click.option(
    "--allow-foreign",
    is_flag=True,
    help="Also take blocks captured under another runtime: re-captured here from their source text "
    "(kept as they are with --trust-payloads).",
)
@click.option(
    "--trust-payloads",
    is_flag=True,
    help="Skip recomputing each payload from its source text (sizes, SHA-256 and ids are still checked; "
    "solutions are still re-verified).",
)
@model_option
@json_option
@click.pass_context
def import_command(ctx, path, allow_foreign, trust_payloads, model, as_json) -> None:
    """Check and import a bundle, all or nothing; report what was imported and what was skipped, and why.

    Each payload is recomputed from its source text (one prefill per block) and must match;
    each solution is re-verified by re-running its method; routing vectors are embedded
    again. A malformed or unsafe bundle imports nothing.
    """
    from .bundles import import_bundle

    memory = open_memory(ctx, model)
    with progress_bar("import", not as_json) as progress:
        report = import_bundle(
            memory, path, allow_foreign=allow_foreign, trust_payloads=trust_payloads, progress=progress
        )
    emit(report.as_dict(), as_json, _render_import)


def _render_import(data: dict) -> str:
    lines = [f"imported {data['blocks']} blocks, skipped {len(data['skipped'])}"]
    lines += [f"imported  {b['block_id']} {b['name']}: {b['how']}" for b in data["imported"]]
    lines += [f"skipped   {b['block_id']} {b['name']}: {b['reason']}" for b in data["skipped"]]
    return "\n".join(lines)


# -- routing and generation -----------------------------------------------------------------


@cli.command()
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
    data.setdefault("runner_up", recall.runner_up)
    data["candidates"] = [_candidate(memory, item) for item in recall.candidates]
    emit(data, as_json, _render_route)


def _candidate(memory, item) -> dict:
    """One ranked ``(block_id, score)`` of a recall as a row with the block's name."""
    block_id, score = (item["block_id"], item["score"]) if isinstance(item, dict) else item
    return {"block_id": block_id, "name": memory.store.get(block_id).name, "score": round(float(score), 6)}


def _render_route(data: dict) -> str:
    fields = {k: v for k, v in data.items() if k != "candidates"}
    rows = [f"  {c['score']:.3f}  {c['block_id']}  {c['name']}" for c in data["candidates"]]
    return "\n".join([_render_mapping(fields), "candidates:" + ("" if rows else " (none)"), *rows])


@cli.command()
@click.option("--in", "in_file", required=True, type=click.Path(dir_okay=False), help="In-domain queries: QUERY<TAB>BLOCK per line.")
@click.option("--ood", "ood_file", required=True, type=click.Path(dir_okay=False), help="Out-of-domain queries, one per line.")
@click.option("--max-false-accept", type=click.FloatRange(0, 1), help="Cap on the out-of-domain accept rate.")
@json_option
@click.pass_context
def calibrate(ctx, in_file, ood_file, max_false_accept, as_json) -> None:
    """Choose and store the abstain threshold from labelled queries."""
    from .errors import InputError

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
    emit(report, as_json)


@cli.command("add-solution")
@click.option("--question", "-q", required=True, help="The question the solution answers.")
@click.option("--answer", "-a", required=True, help="The answer to deposit.")
@click.option("--method", "method_file", type=click.Path(dir_okay=False), help="File with the method: python code for --verify python (- reads standard input).")
@click.option("--method-code", help="The method itself, inline (instead of --method FILE).")
@click.option("--verify", "verifier", required=True, type=click.Choice(["python", "exact", "numeric"]), help="How to verify.")
@click.option("--expected", help="Ground truth for --verify exact or numeric.")
@model_option
@json_option
@click.pass_context
def add_solution(ctx, question, answer, method_file, method_code, verifier, expected, model, as_json) -> None:
    """Verify a solution and deposit it; a failing one is refused and nothing is stored.

    The method (what --verify python runs) comes from --method FILE or, inline, from
    --method-code CODE; give one of them at most.
    """
    if method_file is not None and method_code is not None:
        raise click.UsageError("give --method FILE or --method-code CODE, not both")
    code = read_text_file(method_file, "method") if method_file is not None else method_code
    memory = open_memory(ctx, model)
    with Activity("add-solution", f"verifying, then capturing with {memory.model}"):
        block = memory.add_solution(question, answer, method=code, verifier=verifier, expected=expected)
    emit({"block_id": block.id, "verified": True, "verifier": block.verifier, "question": block.question}, as_json)


@cli.command()
@click.argument("query")
@click.option("--max-tokens", default=128, show_default=True, type=click.IntRange(1, 4096))
@click.option("--voice", is_flag=True, help="On an exact hit, let the model voice the verified answer (<= 8 tokens).")
@click.option("--no-gate", is_flag=True, help="Keep a grafted answer even when it is not confident.")
@model_option
@json_option
@click.pass_context
def ask(ctx, query, max_tokens, voice, no_gate, model, as_json) -> None:
    """Recall, then generate: the verified answer, a grafted block, or plain generation."""
    memory = open_memory(ctx, model)
    with Activity("ask", f"loading the embedder and {memory.model}, then generating"):
        result = memory.generate(query, max_tokens=max_tokens, voice=voice, gate=not no_gate)
    emit(result.as_dict(), as_json, lambda d: f"{d['text']}\n\n[{d['decision']}] {d['recall']['reason']}")


@cli.command()
@click.argument("problem")
@click.option("--verify", "verifier", required=True, type=click.Choice(["exact", "numeric"]), help="Ground-truth check.")
@click.option("--expected", required=True, help="The ground truth the verifier compares with.")
@click.option("--samples", default=4, show_default=True, type=click.IntRange(0, 64), help="Best-of-n samples after the base attempt.")
@model_option
@json_option
@click.pass_context
def solve(ctx, problem, verifier, expected, samples, model, as_json) -> None:
    """The flywheel: base attempt, then best-of-n; the first verified answer is deposited."""
    from .flywheel import make_verifier, solve as run_solve

    memory = open_memory(ctx, model)
    with Activity("solve", f"solving with {memory.model}: a base attempt, then up to {samples} samples"):
        result = run_solve(memory, problem, make_verifier(verifier, expected), samples=samples)
    emit(result.as_dict(), as_json)
    if not result.verified:
        sys.exit(1)


@cli.command()
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


# -- benchmarks -----------------------------------------------------------------------------


def _int_list(value: str) -> list[int]:
    try:
        numbers = [int(part) for part in value.split(",") if part.strip()]
    except ValueError:
        raise click.BadParameter(f"expected comma-separated integers, got {value!r}") from None
    if not numbers or min(numbers) <= 0:
        raise click.BadParameter("sizes must be positive")
    return numbers


@cli.command()
@click.argument("kind", type=click.Choice(["graft", "paging", "positions", "route", "needles", "server", "serve"]))
@model_option
@click.option("--tokens", default="256,1024,2048,4096,8192", show_default=True, help="Block sizes (graft, paging).")
@click.option("--keys", default="1000,10000,100000", show_default=True, help="Index sizes (route).")
@click.option("--repeats", default=3, show_default=True, type=click.IntRange(1, 100), help="Repetitions; the median is kept.")
@click.option("--samples", default=50, show_default=True, type=click.IntRange(1, 10_000), help="Samples (positions).")
@click.option("--blocks", default=64, show_default=True, type=click.IntRange(2, 10_000), help="Blocks (needles).")
@click.option("--no-peers", is_flag=True, help="Skip llama-cpp-python's own state APIs (graft).")
@click.option("--clients", default=4, show_default=True, type=click.IntRange(1, 64), help="Concurrent clients (serve).")
@click.option("--requests", default=8, show_default=True, type=click.IntRange(1, 10_000), help="Requests per client (serve).")
@click.option("--servers", default=2, show_default=True, type=click.IntRange(1, 16), help="llama-servers in the pool (serve).")
@click.option("--kill", is_flag=True, help="SIGKILL a llama-server a third of the way through the load (serve).")
@click.option("--plot", type=click.Path(dir_okay=False), help="Also draw the result into this PNG file.")
@json_option
def bench(kind, model, tokens, keys, repeats, samples, blocks, no_peers, clients, requests, servers, kill, plot, as_json) -> None:
    """Cost and exactness benchmarks, measured side by side in one run (median of repeats).

    KIND is graft (prefill vs restore vs the native floor vs llama-cpp-python),
    paging (first access vs warm restore vs re-prefill), positions (own, shifted and
    sequential exactness), route (flat vs HNSW search), needles (a store far larger
    than the serving window, with planted facts), server (a graft through llama-server
    vs its cold prefill and its own prompt caches) or serve (the gateway under load from
    openai clients, optionally with a llama-server killed mid-load).
    """
    from . import bench as benchmarks
    from .config import default_model

    model = model or default_model()
    with Activity(f"bench {kind}", "preparing") as progress:
        if kind == "graft":
            report = benchmarks.bench_graft(model, _int_list(tokens), repeats, peers=not no_peers, progress=progress)
        elif kind == "paging":
            report = benchmarks.bench_paging(model, _int_list(tokens), repeats, progress=progress)
        elif kind == "positions":
            report = benchmarks.bench_positions(model, samples, progress=progress)
        elif kind == "route":
            report = benchmarks.bench_route(_int_list(keys), progress=progress)
        elif kind == "server":
            from .server_checks import bench_server

            report = bench_server(model, _int_list(tokens), repeats, progress=progress)
        elif kind == "serve":
            from .bench.serve import bench_serve

            report = bench_serve(clients=clients, requests=requests, servers=servers, kill=kill, model=model, progress=progress)
        else:
            report = benchmarks.bench_needles(model, blocks, progress=progress)
    if plot:
        from .bench.plots import plot_report

        report["plot"] = str(plot_report(report, plot))
    emit(report, as_json, _render_bench)


def _render_bench(report: dict) -> str:
    rows = report["rows"]
    if not rows:
        return "(no rows)"
    columns = [k for k, v in rows[0].items() if isinstance(v, (int, float, str)) and k not in {"question", "answer"}][:9]
    fmt = lambda v: f"{v:.4g}" if isinstance(v, float) else str(v)  # noqa: E731
    lines = ["  ".join(f"{c:>14.14}" for c in columns)]
    lines += ["  ".join(f"{fmt(r.get(c, '')):>14.14}" for c in columns) for r in rows]
    return "\n".join(lines)


def _register_gateway_commands() -> None:
    from .cli_gateway import mcp_command, serve_command

    cli.add_command(serve_command)
    cli.add_command(mcp_command)


def _register_store_commands() -> None:
    from .cli_migrate import migrate_store

    cli.add_command(migrate_store)


_register_gateway_commands()
_register_store_commands()
