"""Every command of the CLI prints its help without a model."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from skillgraft.cli.main import cli


def _commands(group: click.Group, path: tuple[str, ...] = ()):
    for name, command in sorted(group.commands.items()):
        yield (*path, name)
        if isinstance(command, click.Group):
            yield from _commands(command, (*path, name))


COMMANDS = list(_commands(cli))


def test_the_cli_has_commands():
    assert {("add-manual",), ("list",), ("check",)} <= set(COMMANDS)


@pytest.mark.parametrize("path", [(), *COMMANDS], ids=lambda path: " ".join(path) or "skillgraft")
def test_help(path):
    result = CliRunner().invoke(cli, [*path, "--help"])
    assert result.exit_code == 0, result.output
    assert result.output.startswith("Usage: ") and "--help" in result.output
