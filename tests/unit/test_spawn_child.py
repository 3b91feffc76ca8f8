"""Servers this process starts (llama-server, a gateway a benchmark or an example starts) never
outlive it: killed, it takes them with it."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the parent-death signal is Linux's")

PARENT = """
import sys, time
from skillgraft.server.process import spawn_child
child = spawn_child([sys.executable, "-c", "import time; time.sleep(120)"], new_session={new_session})
print(child.pid, flush=True)
time.sleep(120)
"""


def _alive(pid: int) -> bool:
    """Running, not a zombie waiting for the init process to reap it."""
    try:
        with open(f"/proc/{pid}/status") as status:
            return not any(line.startswith("State:") and "Z" in line for line in status)
    except FileNotFoundError:
        return False


@pytest.mark.parametrize("new_session", [False, True])
def test_a_child_stops_when_the_process_that_spawned_it_is_killed(new_session):
    parent = subprocess.Popen([sys.executable, "-c", PARENT.format(new_session=new_session)], stdout=subprocess.PIPE, text=True)
    child = int(parent.stdout.readline())
    try:
        assert _alive(child)
        assert (os.getsid(child) == child) is new_session and os.getpgid(child) == child
        parent.kill()
        parent.wait(10)
        deadline = time.monotonic() + 10
        while _alive(child) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(child)
    finally:
        parent.stdout.close()
        if _alive(child):
            os.kill(child, 9)
