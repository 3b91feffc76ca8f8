"""Files the CLI reads (manuals, methods, query lists) are read up to a bound, never whole."""

from __future__ import annotations

import os

import pytest
from click.testing import CliRunner

from skillgraft.cli import common as cli_common
from skillgraft.cli.main import cli
from skillgraft.errors import InputError


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="needs /dev/zero")
def test_an_endless_file_is_refused_not_read_whole(tmp_path, monkeypatch):
    monkeypatch.setattr(cli_common, "MAX_TEXT_FILE_BYTES", 1 << 16)
    with pytest.raises(InputError, match="over 65536 bytes"):
        cli_common.read_text_file("/dev/zero", "manual")
    result = CliRunner().invoke(cli, ["--home", str(tmp_path / "store"), "add-manual", "zeros", "/dev/zero"])
    assert result.exit_code != 0 and "over 65536 bytes" in result.output
    assert not (tmp_path / "store").exists()


def test_a_file_at_the_limit_is_read(tmp_path, monkeypatch):
    monkeypatch.setattr(cli_common, "MAX_TEXT_FILE_BYTES", 1024)
    (tmp_path / "at").write_bytes(b"a" * 1024)
    (tmp_path / "over").write_bytes(b"a" * 1025)
    assert cli_common.read_text_file(str(tmp_path / "at"), "manual") == "a" * 1024
    with pytest.raises(InputError, match="manual .*over is over 1024 bytes"):
        cli_common.read_text_file(str(tmp_path / "over"), "manual")
