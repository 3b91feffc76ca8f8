"""mkdocs hook: the CLI reference, generated from ``--help`` at build time.

``docs/cli.md`` holds the placeholder ``<!-- cli-reference -->``; this hook replaces it
with the group's help and then, for every command of ``skillgraft.cli.main.cli`` in sorted
order, a ``## command`` heading and its ``--help`` output in a fenced text block (a group's
commands each under a ``### group command`` heading). The
reference therefore cannot drift from the code.
"""

from __future__ import annotations

PLACEHOLDER = "<!-- cli-reference -->"


def _help(args: list[str]) -> str:
    from click.testing import CliRunner

    from skillgraft.cli.main import cli

    result = CliRunner().invoke(cli, [*args, "--help"], prog_name="skillgraft", terminal_width=100)
    if result.exit_code != 0:
        raise RuntimeError(f"skillgraft {' '.join(args)} --help exited {result.exit_code}: {result.output}")
    return result.output.rstrip()


def render_reference() -> str:
    """The Markdown that replaces the placeholder."""
    from skillgraft.cli.main import cli

    parts = ["```text", _help([]), "```", ""]
    for name in sorted(cli.commands):
        parts += [f"## {name}", "", "```text", _help([name]), "```", ""]
        for sub in sorted(getattr(cli.commands[name], "commands", {})):  # a group's own commands
            parts += [f"### {name} {sub}", "", "```text", _help([name, sub]), "```", ""]
    return "\n".join(parts)


def on_page_markdown(markdown: str, page, config, files) -> str:
    if page.file.src_uri != "cli.md":
        return markdown
    if PLACEHOLDER not in markdown:
        raise RuntimeError(f"docs/cli.md lost its placeholder {PLACEHOLDER}")
    return markdown.replace(PLACEHOLDER, render_reference())
