"""Work kept off an answer's path: a started llama-server's slot folder in memory when there is room
(swept when its process is gone), kept states handed to their backend's stage, payloads written in
chunks, and a state being kept awaited only when it could serve the prompt."""

import os
import subprocess
import sys
import threading

import pytest

from skillgraft.errors import ConfigError
from skillgraft.server import scratch


def test_a_memory_folder_with_room_is_used(tmp_path, monkeypatch):
    monkeypatch.delenv(scratch.SETTING, raising=False)
    assert scratch.memory_root(1 << 20, tmp_path) == tmp_path


def test_a_memory_folder_without_room_for_twice_the_budget_is_not(tmp_path, monkeypatch):
    monkeypatch.delenv(scratch.SETTING, raising=False)
    free = os.statvfs(tmp_path).f_bavail * os.statvfs(tmp_path).f_frsize
    assert scratch.memory_root(free // 2 + (1 << 20), tmp_path) is None


def test_the_environment_can_keep_the_folder_on_disk(tmp_path, monkeypatch):
    monkeypatch.setenv(scratch.SETTING, "disk")
    assert scratch.memory_root(1, tmp_path) is None
    monkeypatch.setenv(scratch.SETTING, "ram")
    with pytest.raises(ConfigError, match=scratch.SETTING):
        scratch.memory_root(1, tmp_path)


def test_a_missing_memory_folder_means_the_disk(tmp_path, monkeypatch):
    monkeypatch.delenv(scratch.SETTING, raising=False)
    assert scratch.memory_root(1, tmp_path / "absent") is None


def test_the_folder_is_private_and_named_after_its_process(tmp_path, monkeypatch):
    monkeypatch.delenv(scratch.SETTING, raising=False)
    monkeypatch.setattr(scratch, "MEMORY_FOLDER", tmp_path)
    folder = scratch.make_private_folder(1 << 20)
    assert folder.parent == tmp_path
    assert folder.name.startswith(f"{scratch.PREFIX}{os.getpid()}-")
    assert folder.stat().st_mode & 0o777 == 0o700


def test_folders_of_dead_processes_are_swept_and_live_ones_kept(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(dead.stdout)
    gone = tmp_path / f"{scratch.PREFIX}{dead_pid}-abc"
    (gone / "slots").mkdir(parents=True)
    (gone / "slots" / "x.slot").write_bytes(b"x" * 10)
    mine = tmp_path / f"{scratch.PREFIX}{os.getpid()}-def"
    mine.mkdir()
    parent = tmp_path / f"{scratch.PREFIX}{os.getppid()}-ghi"
    parent.mkdir()
    other = tmp_path / "not-ours-123"
    other.mkdir()
    assert scratch.sweep_dead(tmp_path) == 1
    assert not gone.exists() and mine.is_dir() and parent.is_dir() and other.is_dir()


class Prefixes:
    """A prefix cache that only records what it is asked to keep."""

    def __init__(self):
        self.kept = []

    def keep(self, state, parent=None):
        self.kept.append(state)


def test_a_state_kept_from_a_context_goes_to_its_backends_stage():
    from skillgraft.kv.context import PendingCapture, keep_due

    prefixes, staged = Prefixes(), []
    due = [PendingCapture((1, 2, 3), "", prefixes), PendingCapture((1, 2), "", prefixes)]
    kept = keep_due(due, lambda prefixes: [b"abc", None], "fingerprint", on_kept=staged.append)
    assert kept == 1 and staged == prefixes.kept and staged[0].tokens == (1, 2, 3)


@pytest.mark.parametrize("size", [0, 1, 1 << 20, (1 << 20) + 1, 3 * (1 << 20) - 7])
def test_large_payloads_are_written_whole_a_chunk_at_a_time(tmp_path, size):
    from skillgraft.core.states import WRITE_CHUNK, write_in_chunks

    class Counting:
        def __init__(self, handle):
            self.handle, self.sizes = handle, []

        def write(self, data):
            self.sizes.append(len(data))
            return self.handle.write(data)

    data = os.urandom(size)
    with open(tmp_path / "f", "wb") as handle:
        counting = Counting(handle)
        write_in_chunks(counting, data)
    assert (tmp_path / "f").read_bytes() == data
    assert all(n <= WRITE_CHUNK for n in counting.sizes) and len(counting.sizes) == -(-size // WRITE_CHUNK)


def test_a_prompt_waits_for_a_state_being_kept_only_when_it_could_give_more_than_the_cells_at_hand():
    from skillgraft.kv.context import StateKeeper

    keeper, release = StateKeeper(), threading.Event()
    assert keeper.submit(lambda: release.wait(5) or True, (1, 2, 3, 4, 5, 6))
    assert keeper.may_give([1, 2, 3, 4, 9], beyond=2) and not keeper.may_give([1, 2, 3, 4, 9], beyond=4)
    assert not keeper.may_give([7, 8], beyond=0)
    release.set()
    keeper.drain()
    assert not keeper.may_give([1, 2, 3, 4, 5, 6], beyond=0)


def test_a_saved_prefix_is_cut_by_the_keeper_at_the_lowest_priority_not_by_the_caller():
    import os
    import sys
    import threading

    from skillgraft.kv.context import KEEPER, KEEPER_NICE, PendingCapture, keep_due

    ran = {}

    def make() -> bytes:
        ran["thread"] = threading.current_thread().name
        ran["nice"] = os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) if sys.platform == "linux" else None
        return b"cut"

    prefixes = Prefixes()
    assert keep_due([PendingCapture((1, 2, 3), "", prefixes)], lambda _: [make], "fingerprint", later=True) == 1
    KEEPER.drain()
    assert ran["thread"] == "skillgraft-state-keeper" and prefixes.kept[0].payload == b"cut"
    if sys.platform == "linux":
        assert ran["nice"] == KEEPER_NICE


def _sequence_state(cells: int, n_layer: int = 2, row: int = 6) -> bytes:
    """A llama.cpp sequence state payload (keys and values not transposed) of ``cells`` cells."""
    import struct

    from skillgraft.engine.state_cut import STATE_MAGIC

    parts = [struct.pack("<Ii", STATE_MAGIC, 0), struct.pack("<II", 1, cells)]
    parts += [struct.pack("<iIi", i, 1, 0) for i in range(cells)]
    parts.append(struct.pack("<II", 0, n_layer))
    for layer in range(2 * n_layer):
        parts += [struct.pack("<iQ", 1, row), bytes((layer * 31 + i) % 251 for i in range(row * cells))]
    return b"".join(parts)


@pytest.mark.parametrize("keep", [1, 7, 12])
def test_a_cut_of_a_saved_slots_state_view_is_the_cut_of_its_payload(keep):
    from skillgraft.engine.state_cut import cut_payload, cut_sequence_state

    payload = _sequence_state(12)
    cut = cut_sequence_state(memoryview(payload)[8:], keep)
    assert cut == cut_payload(payload, keep) and isinstance(cut, bytes)
    assert (cut == payload) == (keep == 12)  # a cut to every cell is the state itself
