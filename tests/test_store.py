import os
import signal
import subprocess
import sys

import pytest

from skillgraft.errors import FingerprintMismatchError, InputError, StoreError
from skillgraft.store.block_store import BlockStore

from .conftest import GIT_MANUAL

pytestmark = pytest.mark.model


def test_layout_and_dedupe(memory):
    first = memory.add_manual("git-squash", GIT_MANUAL)
    state = memory.engine.capture(list(first.tokens))
    again, created = memory.store.put(state, name="git-squash-again", kind="manual", source=GIT_MANUAL)
    assert again.id == first.id and not created and len(memory.store) == 1
    home = memory.store.home
    assert (home / "catalog.db").exists()
    assert [p.name for p in (home / "blocks").iterdir()] == [first.sha256 + ".kv"]
    assert memory.store.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert memory.store.get(first.id[:6]).id == first.id and memory.store.get("git-squash").id == first.id


def test_name_taken_by_another_block(memory):
    memory.add_manual("git-squash", GIT_MANUAL)
    with pytest.raises(StoreError, match="name 'git-squash' is taken"):
        memory.add_manual("git-squash", GIT_MANUAL + " Also: git rebase --abort.")


def flip_one_byte(path):
    data = bytearray(path.read_bytes())
    data[len(data) // 3] ^= 0x40
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("damage", ["flip", "truncate", "delete"])
def test_damaged_block_fails_cleanly_and_repair_recaptures_it(stocked, damage):
    store = stocked.store
    block = store.get("git-squash")
    path = store.path_of(block)
    if damage == "flip":
        flip_one_byte(path)
    elif damage == "truncate":
        path.write_bytes(path.read_bytes()[:-4096])
    else:
        path.unlink()
    # Never grafted: answered plainly, reported as a fallback that names the block and why.
    damaged = stocked.generate("how do I squash my last commits?", max_tokens=4)
    assert (damaged.decision, damaged.block_id) == ("fallback", block.id)
    assert damaged.note.reused_from != "block"  # nothing of the damaged block, at most what the context held
    assert "cannot be read" in damaged.note.reason and block.id in damaged.note.reason
    # The rest of the store keeps working.
    sourdough = stocked.generate("how do I bake sourdough bread?", max_tokens=4, gate=False)
    assert (sourdough.decision, sourdough.block_id) == ("graft", store.get("sourdough").id)
    report = store.check()
    assert report["ok"] is False and report["problems"][0]["block_id"] == block.id
    if damage != "delete":
        assert list(store.quarantine_dir.iterdir()), "a corrupt file is quarantined, not deleted"
    repaired = stocked.blocks.check(repair=True)
    assert repaired["repaired"] and "byte-identical" in repaired["repaired"][0]["action"]
    assert stocked.blocks.check()["ok"] is True
    again = stocked.generate("how do I squash my last commits?", max_tokens=4, gate=False)
    assert (again.decision, again.block_id, again.prefill_tokens_avoided) == ("graft", block.id, block.n_tokens)


def test_block_from_another_model_is_refused(memory, gemma3):
    state = gemma3.capture("A note captured by another model.")
    block, _ = memory.store.put(state, name="foreign", kind="manual", source="A note captured by another model.")
    memory.router.add_keys(block, ["foreign note"])
    with pytest.raises(FingerprintMismatchError, match="gguf_sha256"):
        memory.generate("foreign note", max_tokens=2)


def test_catalog_row_whose_file_was_deleted_is_reported(stocked):
    block = stocked.store.get("sourdough")
    stocked.store.path_of(block).unlink()
    problems = stocked.blocks.check()["problems"]
    assert problems == [{"block_id": block.id, "name": "sourdough", "problem": "file missing"}]


def test_empty_name_and_unknown_block(memory):
    with pytest.raises(InputError):
        memory.add_manual(" ", GIT_MANUAL)
    with pytest.raises(InputError):
        memory.add_manual("empty", "   ")
    from skillgraft.errors import BlockNotFoundError

    with pytest.raises(BlockNotFoundError):
        memory.store.get("no-such-block")


def test_lru_cache_serves_warm_restores_and_stays_bounded(stocked):
    store = stocked.store
    block = store.get("git-squash")
    first = store.load_state(block)
    warm = store.load_state(block)
    assert not first.from_cache and warm.from_cache and warm.state is first.state
    store.cache_bytes = block.n_bytes + 10
    store.load_state(store.get("sourdough"))
    assert store._cached_bytes <= store.cache_bytes


DEPOSIT_SCRIPT = """
import os, signal, sys
from skillgraft.engine.llama import Engine
from skillgraft.store.block_store import BlockStore
import skillgraft.store.block_folder as folder_module
home, worker, count, kill_at = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
if kill_at == "after-rename":
    folder_module.fsync_dir = lambda path: os.kill(os.getpid(), signal.SIGKILL)
if kill_at == "before-rename":
    real_replace = os.replace
    folder_module.os.replace = lambda a, b: os.kill(os.getpid(), signal.SIGKILL)
store = BlockStore(home)
with Engine("smollm2-135m") as engine:
    for i in range(count):
        text = f"Worker {worker} deposits note number {i}: the value is {worker * 1000 + i}."
        store.put(engine.capture(text), name=f"w{worker}-n{i}", kind="manual", source=text)
print("done")
"""


def run_depositors(home, workers, count, kill_at="none"):
    processes = [
        subprocess.Popen([sys.executable, "-c", DEPOSIT_SCRIPT, str(home), str(w), str(count), kill_at],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for w in range(workers)
    ]
    outputs = [p.communicate(timeout=600) for p in processes]
    return [(p.returncode, out.decode(), err.decode()) for p, (out, err) in zip(processes, outputs)]


def test_four_processes_depositing_25_blocks_each(tmp_path):
    home = tmp_path / "store"
    results = run_depositors(home, 4, 25)
    for code, out, err in results:
        assert code == 0 and "done" in out, err[-2000:]
        assert "locked" not in err
    store = BlockStore(home)
    assert len(store) == 100
    report = store.check()
    assert report["ok"] and report["blocks"] == 100


@pytest.mark.parametrize("kill_at", ["before-rename", "after-rename"])
def test_killed_deposit_leaves_no_half_block_and_repair_settles_it(tmp_path, kill_at):
    home = tmp_path / "store"
    assert run_depositors(home, 1, 1)[0][0] == 0  # one complete block first
    code, _, _ = run_depositors(home, 1, 3, kill_at)[0]  # worker 0 again: its first note exists
    assert code == -signal.SIGKILL
    store = BlockStore(home)
    assert len(store) == 1
    before = store.check()
    assert before["ok"] is False
    expected = "temp file" if kill_at == "before-rename" else "file without a catalog row"
    assert expected in before["problems"][0]["problem"]
    after = store.check(repair=True)
    assert after["ok"] and after["repaired"]
    assert store.check()["ok"] and len(store) == 1


def test_sigkill_during_a_long_cli_capture(tmp_path):
    home = tmp_path / "store"
    manual = tmp_path / "long.txt"
    manual.write_text(" ".join(f"Step {i}: check the value of register {i % 7} and write it down." for i in range(220)))
    env = {**os.environ, "SKILLGRAFT_HOME": str(home)}
    process = subprocess.Popen([sys.executable, "-m", "skillgraft", "add-manual", "long", str(manual)], env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    import time

    deadline = time.time() + 120
    while time.time() < deadline and not (home / "catalog.db").exists():
        time.sleep(0.05)
    time.sleep(1.5)
    process.send_signal(signal.SIGKILL)
    process.wait()
    repair = subprocess.run([sys.executable, "-m", "skillgraft", "check", "--repair", "--json"], env=env, capture_output=True, text=True)
    assert repair.returncode == 0, repair.stdout + repair.stderr
    final = subprocess.run([sys.executable, "-m", "skillgraft", "check", "--json"], env=env, capture_output=True, text=True)
    assert final.returncode == 0 and '"ok": true' in final.stdout
