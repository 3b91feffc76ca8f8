"""What every ``skillgraft`` command shares: the shared options, the error handling of the
group, output (JSON or text), progress on stderr, and opening the store the options name."""

from __future__ import annotations

import json
import shutil
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Optional, TextIO

import click

from ..errors import SkillgraftError, StoreError

# The commands that may create the store folder; every other one needs an existing store
# (serve and mcp create one only when given --create).
ADDING_COMMANDS = frozenset({"add-manual", "add-solution", "import", "solve", "calibrate"})
HOME_HELP = "Store folder (default $SKILLGRAFT_HOME or ~/.skillgraft)."
NAMESPACE_HELP = ("The namespace whose memory to use: its own store in the home, over the home's store as a "
                  "read-only base (default $SKILLGRAFT_NAMESPACE, else default: the home's store).")
DEBUG_HELP = "Show tracebacks for errors."
# The most a text file given to a command (a manual, a method, a list of queries) may hold.
MAX_TEXT_FILE_BYTES = 16 << 20


def _remember(key: str) -> Callable:
    """An option callback that also records the value given in the shared ``ctx.obj``."""

    def callback(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
        if value is not None and value is not False:
            ctx.ensure_object(dict)[key] = value
        return value

    return callback


def _shared_options() -> list[click.Option]:
    """``--home``, ``--namespace`` and ``--debug`` for every command, so they also work after its name."""
    return [
        click.Option(["--home"], type=click.Path(file_okay=False), expose_value=False, callback=_remember("home"), help=HOME_HELP),
        click.Option(["--namespace"], expose_value=False, callback=_remember("namespace"), help=NAMESPACE_HELP),
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
        click.echo(render(data) if render else render_mapping(data))


def render_mapping(data: dict, indent: int = 0) -> str:
    lines = []
    for key, value in data.items():
        if isinstance(value, dict):
            lines.append(" " * indent + f"{key}:")
            lines.append(render_mapping(value, indent + 2))
        else:
            lines.append(" " * indent + f"{key}: {value}")
    return "\n".join(lines)


def is_terminal(stream: TextIO) -> bool:
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


class Activity:
    """What a long command is doing, on stderr: drawn live on a terminal, one final line otherwise.

    On a terminal, while ``status`` is set and no progress has come, a spinner shows it with
    the seconds elapsed (the model and embedder load takes 6-30 s); the first
    ``activity(done, total)`` call turns it into a bar that counts ``done`` of ``total``.
    ``say(line)`` replaces the status. Everything it draws is erased when it ends, so nothing
    is printed twice. When stderr is not a terminal (a pipe, a log file, an agent) nothing is
    drawn; a command that ends normally writes one line saying what it did and how long it took.
    With ``every`` or ``every_s`` set, it also writes a plain line there as counting starts and
    then each ``every`` units or ``every_s`` seconds, whichever comes first, so a long run shows life.
    """

    FRAMES = "|/-\\"

    def __init__(
        self, label: str, status: str = "", *, unit: str = "it", enabled: Optional[bool] = None, stream: Optional[TextIO] = None,
        every: int = 0, every_s: float = 0.0,
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
        self._done, self._total = 0, 0
        self.every, self.every_s = every, every_s
        self._told: Optional[tuple[int, float]] = None  # (done, when) of the last plain line

    def __enter__(self) -> "Activity":
        self._started = time.monotonic()
        if self.status:
            self._spin()
        return self

    def __exit__(self, exc_type, *exc) -> None:
        self._halt_spinner()
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        if not self.enabled and exc_type is None:
            self.stream.write(self.summary() + "\n")
            self.stream.flush()

    def summary(self) -> str:
        """One line: what was done and in how long."""
        elapsed = time.monotonic() - self._started
        if self._total:
            return f"{self.label}: {self._done:,}/{self._total:,} {self.unit} in {elapsed:.1f} s"
        return f"{self.label}: done in {elapsed:.1f} s"

    def __call__(self, done: int, total: int) -> None:
        self._done, self._total = done, total
        if not self.enabled:
            self._tell(done, total)
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

    def _tell(self, done: int, total: int) -> None:
        """A plain progress line off a terminal, when one is due (the summary says the end)."""
        if not (self.every or self.every_s) or (self._told is not None and done >= total):
            return
        now = time.monotonic()
        if self._told is not None and not (self.every and done - self._told[0] >= self.every) \
                and not (self.every_s and now - self._told[1] >= self.every_s):
            return
        self._told = (done, now)
        self.stream.write(f"{self.label}: {done:,}/{total:,} {self.unit} ({now - self._started:.0f} s)\n")
        self.stream.flush()

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
    """A ``progress(done, total)`` callback: a bar on stderr when it is a terminal (and
    ``enabled``), else one final line."""
    return Activity(label, enabled=enabled and is_terminal(sys.stderr))


json_option = click.option(
    "--json", "as_json", is_flag=True, callback=_remember("json"), help="Print one JSON object on stdout."
)
model_option = click.option(
    "--model", "-m", default=None, help="Embedded model name (smollm2-135m, gemma3-270m, qwen2.5-coder-0.5b) or a GGUF path."
)
derived_option = click.option(
    "--derived-mib", default=None, type=click.IntRange(0), envvar="SKILLGRAFT_DERIVED_MIB",
    help="MiB of derived prefix states kept in the home's derived/ folder (default 2048; 0: none; serve: for the "
         "whole gateway, its namespaces sharing it fairly) ($SKILLGRAFT_DERIVED_MIB).",
)
expires_option = click.option(
    "--expires", default=None, metavar="WHEN",
    help="Hide it after WHEN (kept until removed): an ISO 8601 time, UTC unless it says otherwise "
         "(2027-01-31, 2027-01-31T12:00:00Z), or a duration from now (30d, 12h, 90m, 2w).",
)
kv_type_option = click.option(
    "--kv-type", "kv_type", type=click.Choice(["f16", "f32", "q8_0"]), default=None,
    help="KV cache type of keys and values (default $SKILLGRAFT_KV_TYPE or f16; q8_0 turns flash attention on).",
)


def store_home(ctx: click.Context, *, create: bool = False) -> Path:
    """The store folder the options name; it must hold a catalog, its own or a namespace's,
    unless the command adds (or ``create`` is set: ``serve --create``, ``mcp --create``)."""
    from ..config import default_home

    given = (ctx.obj or {}).get("home")
    home = Path(given).expanduser() if given else default_home()
    from ..store.backends import catalog_url

    shared = catalog_url((ctx.obj or {}).get("catalog")) is not None
    adds = create or ctx.command.name in ADDING_COMMANDS
    own = namespace_store(ctx, home)
    if not adds and not shared and not (home / "catalog.db").is_file() and not (own / "catalog.db").is_file() \
            and not holds_namespaces(home):
        raise StoreError(
            f"no skillgraft store at {home} (it holds no catalog.db): check --home or $SKILLGRAFT_HOME; "
            f"a command that adds (add-manual, add-solution, import, solve, calibrate) creates the store, "
            f"and so do serve --create and mcp --create"
        )
    return home


def holds_namespaces(home: Path) -> bool:
    """Whether ``home`` holds the store of a namespace (``--namespace NAME skills import`` made it
    a store before anything was added to its base)."""
    from ..memory.namespaces import namespace_home, namespaces

    return any((namespace_home(home, name) / "catalog.db").is_file() for name in namespaces(home))


def open_memory(ctx: click.Context, model: Optional[str] = None, derived_mib: Optional[int] = None):
    """The SkillMemory of the store the options name (``derived_mib``: its derived states'
    budget, :data:`derived_option`), closed with the command."""
    from ..memory import SkillMemory

    obj = ctx.obj or {}
    memory = SkillMemory.open(store_home(ctx), model=model, catalog=obj.get("catalog"), blocks=obj.get("blocks"),
                              embedder=obj.get("embedder"), namespace=obj.get("namespace"),
                              derived_bytes=mib_bytes(derived_mib))
    ctx.call_on_close(memory.close)
    return memory


def namespace_store(ctx: click.Context, home: Path) -> Path:
    """The store folder of the namespace the options name (``home`` for ``default``)."""
    from ..memory.namespaces import namespace_home

    return namespace_home(home, (ctx.obj or {}).get("namespace"))


def mib_bytes(mib: Optional[int]) -> Optional[int]:
    """``--derived-mib`` in bytes (None: the memory's default)."""
    return None if mib is None else mib << 20


def open_store(ctx: click.Context):
    """The block store of the namespace the options name (its own: never the base it reads)."""
    from ..memory.namespaces import namespace_backends
    from ..store.block_store import BlockStore

    obj = ctx.obj or {}
    home = store_home(ctx)
    catalog, blocks = namespace_backends(obj.get("namespace"), obj.get("catalog"), obj.get("blocks"))
    store = BlockStore(namespace_store(ctx, home), catalog=catalog, blocks=blocks)
    ctx.call_on_close(store.close)
    return store


def read_text_file(path: str, what: str) -> str:
    """The UTF-8 text of ``path``; ``-`` reads standard input. At most ``MAX_TEXT_FILE_BYTES``
    are read: a longer file (or an endless one, say a device) is refused."""
    from ..errors import InputError

    try:
        if path == "-":
            data = getattr(sys.stdin, "buffer", sys.stdin).read(MAX_TEXT_FILE_BYTES + 1)
        else:
            with open(path, "rb") as file:
                data = file.read(MAX_TEXT_FILE_BYTES + 1)
    except OSError as exc:
        raise InputError(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    if len(data) > MAX_TEXT_FILE_BYTES:
        source = "standard input" if path == "-" else path
        raise InputError(f"{what} {source} is over {MAX_TEXT_FILE_BYTES} bytes (a text file holds at most {MAX_TEXT_FILE_BYTES})")
    if isinstance(data, str):
        return data
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        source = "standard input" if path == "-" else path
        raise InputError(f"{what} {source} is not UTF-8 text (byte {exc.start})") from None
