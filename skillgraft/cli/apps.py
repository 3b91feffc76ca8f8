"""``skillgraft apps``: apps' own prefixes (their system prompts) by name, for ``skills warm --app``."""

from __future__ import annotations

import click

from .common import SkillgraftGroup, emit, json_option, open_memory, read_text_file


@click.group("apps", cls=SkillgraftGroup)
def apps() -> None:
    """Apps' own prefixes: the system prompt an app sends first, stored by name.

    `skillgraft skills warm NAME... --app APP` captures skills behind an app's prefix as its
    chats will use them. A prefix is the app's system prompt alone; tools sent as the OpenAI
    `tools` parameter are described at the end of that prompt, so it warms the chats without tools.
    """


@apps.command("add")
@click.argument("name")
@click.option("--prefix", "--system", "prefix_file", required=True, type=click.Path(dir_okay=False, allow_dash=True),
              help="A file holding the app's system prompt ('-': standard input).")
@click.option("--replace", is_flag=True, help="Replace the prefix of an app stored under NAME already.")
@json_option
@click.pass_context
def add_app(ctx, name, prefix_file, replace, as_json) -> None:
    """Store app NAME's system prompt, read from the --prefix file."""
    system = read_text_file(prefix_file, "the app's prefix")
    emit(open_memory(ctx).apps.add(name, system, replace=replace).as_dict(), as_json, _render_app)


@apps.command("list")
@json_option
@click.pass_context
def list_apps(ctx, as_json) -> None:
    """List the stored apps and the size of their prefixes."""
    rows = [app.as_dict() for app in open_memory(ctx).apps.list()]
    emit({"rows": rows}, as_json, lambda d: "\n".join(_render_app(row) for row in d["rows"]) or "(no apps)")


@apps.command("remove")
@click.argument("name")
@json_option
@click.pass_context
def remove_app(ctx, name, as_json) -> None:
    """Forget app NAME (what was warmed behind it stays cached until evicted)."""
    open_memory(ctx).apps.remove(name)
    emit({"removed": name}, as_json, lambda d: f"removed app {d['removed']}")


def _render_app(row: dict) -> str:
    first = row["system"].strip().splitlines()[0] if row["system"].strip() else ""
    return f"{row['name']:24} {row['chars']:>8} chars  {first[:60]}"
