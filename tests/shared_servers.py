"""Real PostgreSQL and S3-API server processes for the shared-store tests.

PostgreSQL comes from the machine's binaries (``initdb``/``postgres``); it refuses to run as
root, so under root it runs as the ``postgres`` (else ``nobody``) system user through
``setpriv``, with a data folder that user owns in a fresh temp folder, listening on a free
loopback port with a password. The S3-API server is moto's, as a process on loopback. Both
are stopped by their own PIDs. Each is started once per test session (the ``postgres`` and
``s3`` fixtures of ``tests/conftest.py``); a test takes a new database or a fresh bucket
prefix. A server that cannot start skips its tests, or fails them under
``SKILLGRAFT_REQUIRE_SERVER=1`` (as ``make test`` sets).
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Optional

import pytest

PASSWORD = "pw-" + uuid.uuid4().hex[:12]  # a secret no message or log may show
S3_KEY, S3_SECRET = "skillgraft-test", "secret-" + uuid.uuid4().hex[:12]


def unavailable(reason: str):
    """Skip, or fail under SKILLGRAFT_REQUIRE_SERVER=1."""
    if os.environ.get("SKILLGRAFT_REQUIRE_SERVER"):
        pytest.fail(f"a test server could not start: {reason}")
    pytest.skip(reason)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_port(port: int, process: subprocess.Popen, timeout_s: float, log: Path) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"exited with {process.returncode}: {log.read_text(errors='replace')[-800:]}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"not listening after {timeout_s:.0f} s: {log.read_text(errors='replace')[-800:]}")


def _stop(process: Optional[subprocess.Popen], sig: int = signal.SIGTERM) -> None:
    if process is None or process.poll() is not None:
        return
    process.send_signal(sig)
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)


def _postgres_bin() -> Optional[Path]:
    for folder in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if Path(folder, "initdb").is_file():
            return Path(folder)
    found = shutil.which("initdb")
    return Path(found).resolve().parent if found else None


class PostgresServer:
    """One ``postgres`` process on a loopback port, its data in a temp folder."""

    def __init__(self) -> None:
        self.bin = _postgres_bin()
        if self.bin is None:
            raise RuntimeError("no initdb/postgres binaries on this machine")
        self.root = Path(tempfile.mkdtemp(prefix="skillgraft-pg-"))
        self.data = self.root / "data"
        self.log = self.root / "postgres.log"
        self.port = free_port()
        self.process: Optional[subprocess.Popen] = None
        self.prefix: list[str] = []
        if os.geteuid() == 0:
            user = next((u for u in ("postgres", "nobody") if _user_exists(u)), None)
            if user is None:
                raise RuntimeError("running as root and no unprivileged user to run postgres as")
            entry = pwd.getpwnam(user)
            os.chown(self.root, entry.pw_uid, entry.pw_gid)
            # setpriv execs the server itself, so the PID started here is postgres's own
            self.prefix = ["setpriv", f"--reuid={entry.pw_uid}", f"--regid={entry.pw_gid}", "--clear-groups"]
            self.user = entry
        self.root.chmod(0o755)
        pwfile = self.root / "pw"
        pwfile.write_text(PASSWORD + "\n")
        if self.prefix:
            os.chown(pwfile, self.user.pw_uid, -1)
        subprocess.run(
            [*self.prefix, str(self.bin / "initdb"), "-D", str(self.data), "-U", "skillgraft", f"--pwfile={pwfile}",
             "--auth=scram-sha-256", "--locale=C", "-E", "UTF8", "--no-sync"],
            check=True, capture_output=True, timeout=120,
        )
        pwfile.unlink()
        self.start()
        self.url = f"postgresql://skillgraft:{PASSWORD}@127.0.0.1:{self.port}/postgres"

    def start(self) -> None:
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(
                [*self.prefix, str(self.bin / "postgres"), "-D", str(self.data), "-p", str(self.port),
                 "-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories=", "-c", "fsync=off"],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            )
        _wait_port(self.port, self.process, 60, self.log)
        self._wait_accepting(60)

    def _wait_accepting(self, timeout_s: float) -> None:
        """Listening is not accepting: a restarted server answers "the database system is
        starting up" while it recovers (seen on busy cores). ``pg_isready`` says when it accepts."""
        deadline = time.monotonic() + timeout_s
        while subprocess.run([str(self.bin / "pg_isready"), "-q", "-h", "127.0.0.1", "-p", str(self.port), "-t", "2"],
                             capture_output=True, timeout=30).returncode != 0:
            if time.monotonic() > deadline or self.process.poll() is not None:
                raise RuntimeError(f"not accepting connections after {timeout_s:.0f} s: "
                                   f"{self.log.read_text(errors='replace')[-800:]}")
            time.sleep(0.1)

    def stop(self) -> None:
        """A fast shutdown (SIGINT), by the PID this object started."""
        _stop(self.process, signal.SIGINT)

    def database(self) -> str:
        """The URL of a new, empty database on this server."""
        import psycopg

        name = "t_" + uuid.uuid4().hex[:12]
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        return self.url.rsplit("/", 1)[0] + "/" + name

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)


def _user_exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
        return True
    except KeyError:
        return False


class S3Server:
    """moto's S3-API server as a process on a loopback port; one bucket."""

    def __init__(self) -> None:
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.root = Path(tempfile.mkdtemp(prefix="skillgraft-s3-"))
        self.log = self.root / "moto.log"
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            )
        _wait_port(self.port, self.process, 60, self.log)
        self.bucket = "skillgraft-blocks"
        self.client().create_bucket(Bucket=self.bucket)

    def env(self) -> dict:
        return {"AWS_ACCESS_KEY_ID": S3_KEY, "AWS_SECRET_ACCESS_KEY": S3_SECRET, "AWS_ENDPOINT_URL": self.endpoint,
                "AWS_REGION": "us-east-1", "AWS_DEFAULT_REGION": "us-east-1"}

    def client(self):
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint, aws_access_key_id=S3_KEY,
                            aws_secret_access_key=S3_SECRET, region_name="us-east-1")

    def prefix_url(self) -> str:
        """A fresh prefix in the bucket, as a blocks URL."""
        return f"s3://{self.bucket}/t-{uuid.uuid4().hex[:12]}"

    def close(self) -> None:
        _stop(self.process)
        shutil.rmtree(self.root, ignore_errors=True)


def start(kind):
    """A started server, or skip/fail with why it could not start."""
    try:
        return kind()
    except (RuntimeError, OSError, subprocess.SubprocessError, ImportError) as exc:
        detail = getattr(exc, "stderr", None)
        unavailable(f"{kind.__name__}: {exc}{(' ' + detail.decode(errors='replace')[-400:]) if detail else ''}")
