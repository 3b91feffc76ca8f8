"""The store's edges: racing writers, odd references, damaged catalogs, caches and files.

Each test reproduces a way the store was once broken: two processes both storing an
answer to the same question, ``rm ____`` deleting a block, a garbled catalog or index cache,
a directory, FIFO, symlink or device in place of a block file, a read-only store, a file
shared by two rows, damage that ``check`` did not see.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import shutil
import stat
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from skillgraft.routing.ranking import LEXICAL_WEIGHT
from click.testing import CliRunner

from skillgraft.core.blocks import Block, tokens_sha256
from skillgraft.cli.main import cli
from skillgraft.engine.llama import KVState
from skillgraft.errors import BlockIntegrityError, BlockNotFoundError, ConflictError, StoreError
from skillgraft.store.ledger import LedgerEvent
from skillgraft.core.fingerprint import RuntimeFingerprint
from skillgraft.routing.router import Router
from skillgraft.store.block_store import BlockStore

FINGERPRINT = RuntimeFingerprint(
    gguf_sha256="0" * 64,
    llama_cpp_python="test",
    system_info="test",
    n_ctx=512,
    n_batch=64,
    n_ubatch=64,
    n_threads=1,
    type_k="f16",
    type_v="f16",
    flash_attn=False,
    swa_full=False,
)


def synthetic_state(text: str, size: int = 4096) -> KVState:
    """A stand-in captured state: tokens are the text's bytes, the payload derives from it."""
    seed = hashlib.sha256(text.encode()).digest()
    payload = (seed * (size // len(seed) + 1))[:size]
    return KVState(tuple(text.encode()), payload, hashlib.sha256(payload).hexdigest(), FINGERPRINT)


def put_manual(store: BlockStore, name: str, text: str = "") -> Block:
    text = text or f"Skill manual {name}."
    block, _ = store.put(synthetic_state(text), name=name, kind="manual", source=text)
    return block


def put_solution(store: BlockStore, question_key: str, answer: str) -> tuple[Block, bool]:
    text = f"Question: {question_key}\nAnswer: {answer}"
    solution = {"question": question_key, "question_key": question_key, "answer": answer, "verifier": "exact"}
    name = "solution-" + hashlib.sha256(question_key.encode()).hexdigest()[:10]
    return store.put(synthetic_state(text), name=name, kind="solution", source=text, solution=solution)


# -- 1. conflicts are decided inside the write transaction -----------------------------------


def _racing_depositor(home: str, answer: str, rounds: int, barrier, results) -> None:
    store = BlockStore(home)
    for round_ in range(rounds):
        barrier.wait(timeout=60)
        try:
            block, created = put_solution(store, f"what is 9*9 (round {round_})", answer)
            results.put((round_, answer, "stored" if created else "existing", block.id))
        except ConflictError as exc:
            results.put((round_, answer, "conflict", exc.block_ids))
    store.close()


def test_two_processes_storing_different_answers_cannot_both_win(tmp_path):
    home = tmp_path / "store"
    BlockStore(home).close()
    rounds = 6
    context = multiprocessing.get_context("spawn")
    barrier, results = context.Barrier(2), context.Queue()
    workers = [
        context.Process(target=_racing_depositor, args=(str(home), answer, rounds, barrier, results))
        for answer in ("81", "80")
    ]
    for worker in workers:
        worker.start()
    outcomes = [results.get(timeout=120) for _ in range(2 * rounds)]
    for worker in workers:
        worker.join(timeout=60)
        assert worker.exitcode == 0
    store = BlockStore(home)
    for round_ in range(rounds):
        mine = [o for o in outcomes if o[0] == round_]
        assert sorted(o[2] for o in mine) == ["conflict", "stored"], mine
        stored = store.solutions_for(f"what is 9*9 (round {round_})")
        assert len(stored) == 1
        winner = next(o for o in mine if o[2] == "stored")
        loser = next(o for o in mine if o[2] == "conflict")
        assert stored[0].answer == winner[1] and loser[3][0] == stored[0].id


def test_same_answer_returns_the_stored_block_and_another_answer_names_both(tmp_path):
    store = BlockStore(tmp_path / "store")
    first, created = put_solution(store, "what is 9*9", "81")
    assert created
    with pytest.raises(ConflictError, match="81") as raised:
        put_solution(store, "what is 9*9", "80")
    assert raised.value.answers == ("81", "80") and raised.value.block_ids[0] == first.id
    # The same answer in other words (another payload) is the stored block, not a second one.
    text = "Question: what is 9*9\nAnswer: 81 (nine nines)"
    again, created = store.put(
        synthetic_state(text), name="other-name", kind="solution", source=text,
        solution={"question": "What is 9*9?", "question_key": "what is 9*9", "answer": "81", "verifier": "exact"},
    )
    assert (again.id, created) == (first.id, False)
    assert len(store) == 1 and not [p for p in store.blocks_dir.iterdir() if p.name.endswith(".part")]


# -- 2. references never match by wildcard ---------------------------------------------------


@pytest.mark.parametrize("ref", ["____", "%", "%%%%", "_%", "____________%"])
def test_wildcard_references_match_no_block(tmp_path, ref):
    store = BlockStore(tmp_path / "store")
    block = put_manual(store, "git-squash")
    with pytest.raises(BlockNotFoundError):
        store.get(ref)
    with pytest.raises(BlockNotFoundError):
        store.remove(ref)
    assert store.get(block.id[:4]).id == block.id and store.get(block.id[:6].upper()).id == block.id
    assert store.path_of(block).exists()


def test_cli_rm_of_underscores_removes_nothing(home):
    store = BlockStore(home)
    block = put_manual(store, "git-squash")
    store.close()
    result = CliRunner().invoke(cli, ["rm", "____"])
    assert result.exit_code == 1 and "____" in result.stderr
    assert BlockStore(home).get(block.id).id == block.id


# -- 3. a damaged catalog is reported, not a traceback ---------------------------------------


def _garble_pages(path: Path, page_size: int = 4096) -> None:
    data = bytearray(path.read_bytes())
    for page in range(1, len(data) // page_size):  # page 0 holds the header
        for offset in (0, 8, page_size // 2):
            data[page * page_size + offset] ^= 0xFF
    path.write_bytes(bytes(data))


def test_garbled_catalog_pages_are_reported_by_check(home):
    store = BlockStore(home)
    for i in range(12):
        put_manual(store, f"manual-{i}", f"Skill manual number {i}: " + "words " * 300)
    store.close()
    _garble_pages(home / "catalog.db")
    try:
        damaged = BlockStore(home)
    except StoreError as exc:
        assert "catalog" in str(exc)
    else:
        report = damaged.check()
        assert report["ok"] is False and any("catalog" in p["problem"] for p in report["problems"])
        with pytest.raises(StoreError, match="catalog"):
            damaged.blocks()
    result = CliRunner().invoke(cli, ["check", "--json"])
    assert result.exit_code == 1, result.output
    report = json.loads(result.stdout)
    assert report["ok"] is False and report["problems"]
    assert "Traceback" not in result.output


def test_a_file_that_is_not_sqlite_as_catalog_is_a_store_error(home):
    home.mkdir(parents=True)
    (home / "catalog.db").write_bytes(b"this is not a SQLite database\n" * 200)
    with pytest.raises(StoreError, match="catalog"):
        BlockStore(home)
    with pytest.raises(StoreError, match="catalog"):
        BlockStore(home, read_only=True)
    listed = CliRunner().invoke(cli, ["list", "--json"])
    assert listed.exit_code == 1 and "catalog" in listed.stderr


# -- 4. the index cache is verified, and follows every change --------------------------------


def _stock_routable(store: BlockStore, embedder) -> Router:
    router = Router(store, embedder)
    for name, examples in {
        "git-squash": ["how do I squash my last commits?", "combine commits into one"],
        "sourdough": ["how do I bake sourdough bread?", "my loaf is too dense"],
        "ferns": ["how do I water a fern?", "fern leaves turn brown"],
    }.items():
        router.add_keys(put_manual(store, name), examples)
    return router


@pytest.mark.parametrize("damaged", ["keys.faiss", "keys.npz", "keys.json"])
def test_flipped_bytes_in_the_index_cache_are_never_used(tmp_path, embedder, damaged):
    store = BlockStore(tmp_path / "store")
    _stock_routable(store, embedder).route("squash commits")
    path = store.home / "index" / damaged
    data = bytearray(path.read_bytes())
    if damaged == "keys.json":
        meta = json.loads(data)
        sourdough, ferns = store.get("sourdough").id, store.get("ferns").id
        swap = {sourdough: ferns, ferns: sourdough}  # sourdough's keys now name ferns, and back
        meta["block_ids"] = [swap.get(b, b) for b in meta["block_ids"]]
        data = bytearray(json.dumps(meta).encode())
    else:
        # Float exponents of about 5e35 over a run of key vectors or centroids.
        start = len(data) // 3
        data[start:start + 1024] = b"\x7a" * 1024
    path.write_bytes(bytes(data))
    recall = Router(store, embedder).route("how do I bake sourdough bread?")
    assert -1.0 <= recall.score <= 1.0 + LEXICAL_WEIGHT + 1e-5  # cosine plus the weighted lexical share
    assert recall.decision == "graft" and recall.block.name == "sourdough"


def test_a_future_created_at_does_not_freeze_the_index(tmp_path, embedder):
    store = BlockStore(tmp_path / "store")
    router = Router(store, embedder)
    future = synthetic_state("A block from the future.")
    block = Block(
        id=future.sha256[:16], sha256=future.sha256, name="future", kind="manual", source="A block from the future.",
        tokens=future.tokens, tokens_sha256=tokens_sha256(future.tokens),
        n_tokens=future.n_tokens, n_bytes=future.n_bytes, fingerprint_id=FINGERPRINT.id,
        created_at="9999-12-31T23:59:59.999+00:00",
    )
    store.deposit(block, future.payload, FINGERPRINT)
    router.add_keys(block, ["time travel paradoxes"])
    first = put_manual(store, "ferns")
    router.add_keys(first, ["how do I water a fern?", "fern leaves turn brown"])
    assert router.route("how do I water a fern?").block.name == "ferns"
    store.remove("ferns")  # its two keys go; the next two reuse their row ids
    second = put_manual(store, "sourdough")
    router.add_keys(second, ["how do I bake sourdough bread?", "my loaf is too dense"])
    for fresh in (router, Router(store, embedder)):
        recall = fresh.route("how do I bake sourdough bread?")
        assert recall.decision == "graft" and recall.block.name == "sourdough"


def test_index_reads_one_snapshot_when_another_process_writes(tmp_path, embedder, monkeypatch):
    home = tmp_path / "store"
    store = BlockStore(home)
    _stock_routable(store, embedder).route("squash commits")  # the cache now holds all three
    reader = BlockStore(home)
    real_version = reader.catalog_version
    calls = []

    def version_then_remove():
        version = real_version()
        if not calls:
            calls.append(version)
            store.remove("ferns")  # another connection writes between our reads
        return version

    monkeypatch.setattr(reader, "catalog_version", version_then_remove)
    router = Router(reader, embedder)
    index = router.index()
    assert set(index.block_ids) <= set(router._blocks)
    recall = router.route("how do I water a fern?")
    assert recall.block is None or recall.block.name != "ferns"


def test_a_malformed_routing_vector_is_embedded_again(tmp_path, embedder):
    store = BlockStore(tmp_path / "store")
    router = _stock_routable(store, embedder)
    store.db.execute("UPDATE routing_keys SET vector = ? WHERE id = 1", [b"\x00" * 10])
    recall = Router(store, embedder).route("how do I bake sourdough bread?")
    assert recall.block.name == "sourdough" and -1.0 <= recall.score <= 1.0 + LEXICAL_WEIGHT + 1e-5
    assert len(store.routing_keys()[0]["vector"]) == len(store.routing_keys()[1]["vector"])
    assert router.route("squash commits").block.name == "git-squash"


# -- 5. anything but a regular file in place of a block file ---------------------------------


def _replace_with(path: Path, kind: str, outside: Path) -> None:
    payload = path.read_bytes()
    path.unlink()
    if kind == "directory":
        path.mkdir()
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "symlink":
        outside.write_bytes(payload)  # the right bytes, but outside the store
        path.symlink_to(outside)
    elif kind == "device":
        os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(1, 3))  # like /dev/null


def _check_within(store: BlockStore, seconds: float = 60, **options) -> dict:
    outcome: dict = {}

    def run():
        try:
            outcome["report"] = store.check(**options)
        except BaseException as exc:  # reported by the assertion below
            outcome["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), "check hung"
    assert "error" not in outcome, repr(outcome.get("error"))
    return outcome["report"]


KINDS = ["directory", "fifo", "symlink"] + (["device"] if os.geteuid() == 0 else [])


@pytest.mark.parametrize("kind", KINDS)
def test_a_non_regular_block_file_is_reported_and_refused(tmp_path, kind):
    store = BlockStore(tmp_path / "store")
    block = put_manual(store, "git-squash")
    healthy = put_manual(store, "sourdough")
    _replace_with(store.path_of(block), kind, tmp_path / "outside.kv")
    report = _check_within(store)
    assert report["ok"] is False
    assert [p["block_id"] for p in report["problems"]] == [block.id]
    assert "not a regular file" in report["problems"][0]["problem"]
    store.evict(block.sha256)
    with pytest.raises(BlockIntegrityError, match=block.id):
        store.load_state(store.get(block.id))
    assert store.load_state(healthy).state.sha256 == healthy.sha256
    assert (tmp_path / "outside.kv").exists() or kind != "symlink"


def test_one_bad_block_does_not_abort_repair_for_the_others(tmp_path):
    store = BlockStore(tmp_path / "store")
    blocks = [put_manual(store, f"manual-{i}") for i in range(4)]
    _replace_with(store.path_of(blocks[0]), "directory", tmp_path / "x")
    _replace_with(store.path_of(blocks[1]), "fifo", tmp_path / "x")
    store.path_of(blocks[2]).write_bytes(b"truncated")

    def recapture(block):
        if block.id == blocks[1].id:
            raise OSError("the runtime went away")
        return synthetic_state(block.source)

    report = _check_within(store, repair=True, recapture=recapture)
    repaired = {r.get("block_id") for r in report["repaired"]}
    assert {blocks[0].id, blocks[2].id} <= repaired
    assert [p["block_id"] for p in report["problems"]] == [blocks[1].id]
    assert "repair failed" in report["problems"][0]["problem"]
    final = _check_within(store)
    assert [p["block_id"] for p in final["problems"]] == [blocks[1].id]  # quarantined, not lost
    for block in (blocks[0], blocks[2], blocks[3]):
        assert store.load_state(store.get(block.id)).state.sha256 == block.sha256


# -- 6. a read-only store can still be read --------------------------------------------------


def test_a_read_only_store_lists_shows_and_routes_and_refuses_writes(tmp_path, embedder):
    home = tmp_path / "store"
    writer = BlockStore(home)
    _stock_routable(writer, embedder)
    writer.close()
    before = (home / "catalog.db").read_bytes()
    store = BlockStore(home, read_only=True)
    assert store.read_only and len(store.blocks()) == 3
    assert store.get("ferns").name == "ferns" and store.routing_keys(store.get("ferns").id)
    recall = Router(store, embedder).route("how do I water a fern?")
    assert recall.decision == "graft" and recall.block.name == "ferns"
    assert store.load_state(store.get("ferns")).state.n_tokens > 0
    store.log(LedgerEvent("recall", decision="graft"))  # the ledger is skipped, not refused
    with pytest.raises(StoreError, match="read-only"):
        put_manual(store, "new")
    with pytest.raises(StoreError, match="read-only"):
        store.remove("ferns")
    with pytest.raises(StoreError, match="read-only"):
        store.set_setting("router.threshold", "0.5")
    assert store.check()["ok"] is True
    store.close()
    assert (home / "catalog.db").read_bytes() == before


READ_ONLY_SCRIPT = textwrap.dedent(
    """
    import json, sys
    from skillgraft.store.block_store import BlockStore
    store = BlockStore(sys.argv[1])
    print(json.dumps({"read_only": store.read_only, "names": [b.name for b in store.blocks()],
                      "ok": store.check()["ok"]}))
    """
)


def _without_override(command: list[str]) -> list[str]:
    """``command`` run so that file permissions bind it, even as root (capabilities dropped)."""
    if os.geteuid() != 0:
        return command
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("running as root without setpriv: file permissions cannot bind")
    return [setpriv, "--inh-caps=-all", "--bounding-set=-dac_override,-dac_read_search,-fowner", "--", *command]


def test_a_store_folder_without_write_permission_opens_read_only(tmp_path, embedder):
    home = tmp_path / "store"
    writer = BlockStore(home)
    _stock_routable(writer, embedder)
    writer.close()
    for path in [home, *home.rglob("*")]:
        path.chmod(0o555 if path.is_dir() else 0o444)
    try:
        def run(*args):
            return subprocess.run(_without_override([sys.executable, *args]), capture_output=True, text=True, timeout=120)

        opened = run("-c", READ_ONLY_SCRIPT, str(home))
        assert opened.returncode == 0, opened.stderr[-2000:]
        assert json.loads(opened.stdout) == {"read_only": True, "names": ["git-squash", "sourdough", "ferns"], "ok": True}
        listed = run("-m", "skillgraft", "--home", str(home), "list", "--json")
        assert listed.returncode == 0, listed.stderr[-2000:]
        assert len(json.loads(listed.stdout)["rows"]) == 3
        shown = run("-m", "skillgraft", "--home", str(home), "show", "ferns", "--json")
        assert shown.returncode == 0 and json.loads(shown.stdout)["name"] == "ferns", shown.stderr[-2000:]
        removed = run("-m", "skillgraft", "--home", str(home), "rm", "ferns")
        assert removed.returncode == 1 and "read-only" in removed.stderr and "Traceback" not in removed.stderr
    finally:
        for path in [home, *home.rglob("*")]:
            path.chmod(0o755 if path.is_dir() else 0o644)


# -- 7. a file shared by two rows outlives the removal of one --------------------------------


def _copy_row(store: BlockStore, block: Block, new_id: str, name: str) -> None:
    row = {**block.to_row(), "id": new_id, "name": name}
    store.db.execute(
        f"INSERT INTO blocks ({', '.join(row)}) VALUES ({', '.join('?' for _ in row)})", list(row.values())
    )


def test_removing_a_row_that_shares_a_file_keeps_the_file(tmp_path):
    store = BlockStore(tmp_path / "store")
    original = put_manual(store, "original")
    _copy_row(store, original, "f" * 16, "copy")
    store.remove("copy")
    assert store.path_of(original).exists()
    assert store.load_state(store.get("original")).state.sha256 == original.sha256
    store.remove("original")
    assert not store.path_of(original).exists()


# -- 8. check reports every damage it can see ------------------------------------------------


def test_check_reports_every_kind_of_damage(tmp_path):
    store = BlockStore(tmp_path / "store")
    missing, short, healthy, retokened = (put_manual(store, n) for n in ("missing", "short", "healthy", "retokened"))
    store.path_of(missing).unlink()
    store.path_of(short).write_bytes(b"short")
    _copy_row(store, healthy, "0" * 16, "copy")
    store.db.execute("UPDATE blocks SET tokens_sha256 = ? WHERE id = ?", ["0" * 64, retokened.id])
    store.add_routing_keys(healthy.id, [{"kind": "name", "text": "healthy", "embedder": "e", "vector": b"\x00" * 10}])
    store.db.execute("PRAGMA foreign_keys = OFF")
    store.db.execute("INSERT INTO routing_keys (block_id, kind, text, embedder, vector) VALUES ('feedfeedfeedfeed', 'name', 'x', 'e', NULL)")
    store.db.execute("PRAGMA foreign_keys = ON")
    report = _check_within(store)
    assert report["ok"] is False
    found = {(p.get("block_id"), p["problem"].split(" (")[0].split(",")[0]) for p in report["problems"]}
    assert (missing.id, "file missing") in found
    assert (short.id, "5 bytes") in found
    assert ("0" * 16, "id does not match its SHA-256") in found
    assert (retokened.id, "tokens do not match tokens_sha256") in found
    assert ("feedfeedfeedfeed", "routing key of a block the catalog lacks") in found
    assert (healthy.id, "routing key with a malformed vector") in found
    assert not any(p.get("block_id") == healthy.id and "file" in p["problem"] for p in report["problems"])


def test_check_of_an_unreadable_block_file_reports_it(home):
    store = BlockStore(home)
    block = put_manual(store, "locked")
    store.close()
    store.path_of(block).chmod(0)
    done = subprocess.run(_without_override([sys.executable, "-m", "skillgraft", "check", "--json"]),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
    problems = json.loads(done.stdout)["problems"]
    assert problems[0]["block_id"] == block.id and "unreadable" in problems[0]["problem"]
