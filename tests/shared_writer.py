"""A writer process of the shared-store tests: deposits into one host's view of a shared store.

``python tests/shared_writer.py HOME WRITER COUNT [SIZE [KILL_AT]]`` with ``SKILLGRAFT_CATALOG``
and ``SKILLGRAFT_BLOCKS`` set: COUNT manuals of its own, then the manual and the solution every
writer deposits (the same-tokens and same-question races). Prints each block id as it lands.
KILL_AT makes the process SIGKILL itself in its second deposit: ``in-transaction`` (the object
uploaded, the catalog's write lock held, no row yet) or ``cache-write`` (half of the payload
written to this host's cache).
Uses the fakes of :mod:`skillgraft.testing` for capture and embedding (no model to load);
the catalog and the bucket are the real servers.
"""

from __future__ import annotations

import os
import signal
import sys

import skillgraft.store.block_objects as objects_module
from skillgraft.memory import SkillMemory
from skillgraft.testing import FakeEmbedder, FakeEngine

SHARED_MANUAL = "Skill manual: every writer deposits this very text; the store keeps it once."


def kill_in_second(kill_at: str) -> None:
    deposits = []

    def die() -> None:
        os.kill(os.getpid(), signal.SIGKILL)

    if kill_at == "in-transaction":
        def commit(self, block, staged) -> None:
            deposits.append(block.id)
            if len(deposits) == 2:
                die()
        objects_module.ObjectBlocks.commit = commit
    elif kill_at == "cache-write":
        def write_synced(path, payload) -> None:
            deposits.append(path)
            with open(path, "xb") as handle:
                handle.write(payload[: len(payload) // 2] if len(deposits) == 2 else payload)
                handle.flush()
                if len(deposits) == 2:
                    os.fsync(handle.fileno())
                    die()
        objects_module.write_synced = write_synced


def main(home: str, writer: str, count: int, size: int, kill_at: str = "none") -> None:
    kill_in_second(kill_at)
    padding = " ".join(f"w{i}" for i in range(size))
    with SkillMemory(home, engine=FakeEngine(), embedder=FakeEmbedder()) as memory:
        for i in range(count):
            block = memory.add_manual(f"{writer}-{i}", f"Skill manual {writer} number {i}: {padding}",
                                      examples=[f"question {i} of {writer}"])
            print(block.id, flush=True)
        print(memory.add_manual("shared-manual", SHARED_MANUAL).id, flush=True)
        print(memory.add_solution("What is 6 * 7?", "42", method="print(6 * 7)", verifier="python").id, flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]) if len(sys.argv) > 4 else 8, *sys.argv[5:6])
