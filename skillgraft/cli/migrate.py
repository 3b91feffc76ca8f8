"""``skillgraft migrate-store``: copy the store the options name into another, verified."""

from __future__ import annotations

import sys
from typing import Optional

import click

from .common import emit, json_option, open_store

__all__ = ["migrate_store"]


@click.command("migrate-store")
@click.option("--to-home", type=click.Path(file_okay=False), required=True,
              help="The destination's folder (its local cache and index when it is shared).")
@click.option("--to-catalog", default=None, help="The destination's catalog: a postgresql:// URL (default: SQLite in --to-home).")
@click.option("--to-blocks", default=None, help="The destination's blocks: s3://bucket/prefix or file:///path (default: --to-home/blocks).")
@json_option
@click.pass_context
def migrate_store(ctx: click.Context, to_home: str, to_catalog: Optional[str], to_blocks: Optional[str], as_json: bool) -> None:
    """Copy every healthy block, its routing keys, the imported skills, apps and settings into another store.

    The source is the store that --home, --catalog and --blocks (or their environment
    variables) name; the destination is given by --to-home, --to-catalog and --to-blocks,
    so a local folder moves into a shared catalog and bucket, and back. Every payload's
    SHA-256 is verified at the source, on deposit and read back from the destination.
    Copying again is safe. Exit status 1 when a block could not be copied.
    """
    from ..memory.migrate import copy_store
    from ..store.block_store import BlockStore

    source = open_store(ctx)
    target = BlockStore(to_home, catalog=to_catalog or "sqlite", blocks=to_blocks or "", read_only=False)
    ctx.call_on_close(target.close)
    report = copy_store(source, target).as_dict()
    emit(report, as_json, _render)
    if not report["ok"]:
        sys.exit(1)


def _render(report: dict) -> str:
    lines = [f"{len(report['copied'])} blocks copied, {len(report['present'])} already there, "
             f"{report['keys_added']} routing keys added, {len(report['skills'])} skill versions and "
             f"{len(report['apps'])} apps copied"]
    lines += [f"skipped   {_skipped(item)}: {item['problem']}" for item in report["skipped"]]
    return "\n".join(lines)


def _skipped(item: dict) -> str:
    if "block_id" in item:
        return f"{item['block_id']} ({item['name']})"
    return f"skill {item['skill']} v{item['version']}" if "skill" in item else f"app {item['app']!r}"
