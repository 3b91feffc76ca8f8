"""``skillgraft namespaces``: the namespaces of a home, and deleting one."""

from __future__ import annotations

import click

from .common import SkillgraftGroup, emit, json_option, store_home


@click.group("namespaces", cls=SkillgraftGroup)
def namespaces() -> None:
    """The namespaces of the home: each a store of its own over the home's store as a read-only base."""


@namespaces.command("list")
@json_option
@click.pass_context
def list_namespaces(ctx, as_json) -> None:
    """List the namespaces of the home (besides default, the home's own): those recorded in its
    shared catalog when it has one, else those with a store in its folder."""
    from ..memory.namespaces import namespaces as names

    rows = names(store_home(ctx), (ctx.obj or {}).get("catalog"))
    emit({"namespaces": rows}, as_json, lambda d: "\n".join(d["namespaces"]) or "(no namespace but default)")


@namespaces.command("delete")
@click.argument("name")
@json_option
@click.pass_context
def delete(ctx, name, as_json) -> None:
    """Delete namespace NAME and everything of its store: skills, solutions, corrections, ledger,
    blocks and KV states (on a shared store: its schema, the objects under its prefix and this
    host's folder; run it again to finish one cut short). The base (default) and the other
    namespaces are left as they are; a gateway serving NAME should be stopped first."""
    from ..memory.namespaces import delete_namespace

    obj = ctx.obj or {}
    removed = delete_namespace(store_home(ctx), name, obj.get("catalog"), obj.get("blocks"))
    emit(removed.as_dict(), as_json,
         lambda d: f"deleted namespace {d['namespace']}: {d['files']} files, {d['bytes']:,} B ({d['folder']})"
         + (f", {d['objects']} objects, {d['object_bytes']:,} B" if d["objects"] else "")
         + (f", schema {d['schema']}" if d["schema"] else ""))
