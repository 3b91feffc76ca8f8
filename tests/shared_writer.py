"""A writer process of the shared-store tests: deposits into one host's view of a shared store.

``python tests/shared_writer.py HOME WRITER COUNT [SIZE]`` with ``SKILLGRAFT_CATALOG`` and
``SKILLGRAFT_BLOCKS`` set: COUNT manuals of its own, then the manual and the solution every
writer deposits (the same-tokens and same-question races). Prints each block id as it lands.
Uses the fakes of :mod:`skillgraft.testing` for capture and embedding (no model to load);
the catalog and the bucket are the real servers.
"""

from __future__ import annotations

import sys

from skillgraft.memory import SkillMemory
from skillgraft.testing import FakeEmbedder, FakeEngine

SHARED_MANUAL = "Skill manual: every writer deposits this very text; the store keeps it once."


def main(home: str, writer: str, count: int, size: int) -> None:
    padding = " ".join(f"w{i}" for i in range(size))
    with SkillMemory(home, engine=FakeEngine(), embedder=FakeEmbedder()) as memory:
        for i in range(count):
            block = memory.add_manual(f"{writer}-{i}", f"Skill manual {writer} number {i}: {padding}",
                                      examples=[f"question {i} of {writer}"])
            print(block.id, flush=True)
        print(memory.add_manual("shared-manual", SHARED_MANUAL).id, flush=True)
        print(memory.add_solution("What is 6 * 7?", "42", method="print(6 * 7)", verifier="python").id, flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]) if len(sys.argv) > 4 else 8)
