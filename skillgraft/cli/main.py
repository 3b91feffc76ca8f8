"""The ``skillgraft`` command line: a thin click group over the Python API.

Machine-readable commands take ``--json`` and print one JSON object on stdout, errors
included (``{"error": {"type": ..., "message": ...}}``); progress and logs go to stderr and
are drawn only when it is a terminal. Exit codes: 0 ok, 1 a user error (one line, no
traceback unless ``--debug``), 2 usage. ``--home`` and ``--debug`` work before or after the
command name. Commands that only read refuse a store folder that holds no catalog, so a
mistyped ``--home`` is an error instead of a new, empty store.

The commands live in :mod:`.blocks` (deposit, inspect, change, move blocks),
:mod:`.runs` (route, answer, check), :mod:`.bench` (measure), :mod:`.routing` (feedback,
reembed), :mod:`.gateway` and :mod:`.migrate`; what they share in :mod:`.common`.
"""

from __future__ import annotations

from typing import Optional

import click

from .common import DEBUG_HELP, HOME_HELP, NAMESPACE_HELP, Activity, SkillgraftGroup

__all__ = ["Activity", "cli"]  # the group, and what tests use from here


@click.group(cls=SkillgraftGroup)
@click.version_option(package_name="skillgraft")
@click.option("--debug", is_flag=True, help=DEBUG_HELP + " Also accepted after the command name.")
@click.option(
    "--home",
    envvar="SKILLGRAFT_HOME",
    type=click.Path(file_okay=False),
    help=HOME_HELP[:-1] + "; also accepted after the command name, where it wins.",
)
@click.option("--namespace", envvar="SKILLGRAFT_NAMESPACE", default=None,
              help=NAMESPACE_HELP[:-1] + "; also accepted after the command name, where it wins.")
@click.option("--catalog", envvar="SKILLGRAFT_CATALOG", default=None,
              help="A shared catalog, postgresql://… (default $SKILLGRAFT_CATALOG, else SQLite in the home).")
@click.option("--blocks", envvar="SKILLGRAFT_BLOCKS", default=None,
              help="Shared blocks, s3://bucket/prefix or file:///path (default $SKILLGRAFT_BLOCKS, else the home).")
@click.option("--embedder", envvar="SKILLGRAFT_EMBEDDER", default=None,
              help="Text encoder: minilm, mpnet, a model folder or an http(s):// embeddings endpoint "
                   "(default $SKILLGRAFT_EMBEDDER, else the store's own, else minilm).")
@click.pass_context
def cli(ctx: click.Context, debug: bool, home: Optional[str], namespace: Optional[str], catalog: Optional[str],
        blocks: Optional[str], embedder: Optional[str]) -> None:
    """skillgraft: a verified memory of skills for a frozen local language model.

    Skill manuals and verified solutions, stored as text or as captured KV state, are placed
    after the app's own prompt and tools on demand; their cells are made once and found again.
    """
    ctx.obj = {"home": home, "debug": debug, "namespace": namespace, "catalog": catalog, "blocks": blocks,
               "embedder": embedder}


def _register_commands() -> None:
    from .apps import apps
    from . import blocks as cli_blocks
    from .bench import bench
    from . import runs as cli_runs
    from .gateway import mcp_command, serve_command, ui_command
    from .migrate import migrate_store
    from .namespaces import namespaces
    from .routing import feedback, reembed
    from .skills import skills

    for command in (
        cli_blocks.add_manual, cli_blocks.add_solution, cli_blocks.list_blocks, cli_blocks.update, cli_blocks.rename,
        cli_blocks.rm, cli_blocks.recapture, cli_blocks.check, cli_blocks.export_command, cli_blocks.import_command,
        cli_runs.verify, cli_runs.models, cli_runs.demo, cli_runs.route, cli_runs.calibrate, cli_runs.ask,
        cli_runs.solve, cli_runs.ledger, bench, serve_command, ui_command, mcp_command, migrate_store, feedback,
        reembed, skills, namespaces, apps,
    ):
        cli.add_command(command)
    cli.add_command(cli_blocks.show)
    cli.add_command(cli_blocks.show, "get")


_register_commands()
