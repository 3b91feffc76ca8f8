"""A key file holds secrets: one its group or others can read or write is refused at the start,
with an error that names the file, its mode and the chmod to run, before any server starts."""

from __future__ import annotations

import pytest

from skillgraft.errors import ConfigError
from skillgraft.gateway.keys import Principal, read_keys
from tests.required import need

KEY_A, ADMIN_KEY = "key-of-team-a-0001", "the-admin-key-0003"


def key_file(tmp_path, mode: int):
    path = tmp_path / "keys"
    path.write_text(f"team-a {KEY_A}\nadmin {ADMIN_KEY}\n")
    path.chmod(mode)
    return path


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o660, 0o606, 0o620, 0o602, 0o777])
def test_a_key_file_others_can_read_or_write_is_refused(tmp_path, mode):
    path = key_file(tmp_path, mode)
    with pytest.raises(ConfigError) as raised:
        read_keys(path)
    message = str(raised.value)
    assert str(path) in message and f"{mode:04o}" in message and f"chmod 600 {path}" in message


@pytest.mark.parametrize("mode", [0o600, 0o400])
def test_a_key_file_its_owner_alone_reads_is_read(tmp_path, mode):
    assert read_keys(key_file(tmp_path, mode)) == {KEY_A: Principal("team-a"), ADMIN_KEY: Principal(admin=True)}


def test_serve_stops_on_an_open_key_file_before_any_server_starts(tmp_path, monkeypatch):
    need("fastapi", "skillgraft[serve]")
    from click.testing import CliRunner

    from skillgraft.cli.main import cli
    from skillgraft.gateway import pool

    def no_pool(*args, **kwargs):
        raise AssertionError("the servers started before the key file was checked")

    monkeypatch.setattr(pool, "ServerPool", no_pool)
    path = key_file(tmp_path, 0o644)
    result = CliRunner().invoke(cli, ["--home", str(tmp_path / "store"), "serve", "--create", "--port", "0",
                                 "--keys", str(path)])
    assert result.exit_code == 1, result.output
    assert "chmod 600" in result.stderr and "0644" in result.stderr
