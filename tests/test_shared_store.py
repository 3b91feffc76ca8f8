"""Two hosts of one memory on one machine: a real PostgreSQL catalog and a real S3-API bucket.

A "host" is a store folder (its own cache and router index) opened with the same catalog
and blocks URLs. The servers are real processes (see ``tests/shared_servers.py``).
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .shared_servers import PASSWORD, S3_SECRET, S3Server
from .unit.skill_folders import pdf_skill
from .unit.test_prefix_reuse import OPTIONS, QUESTIONS, chat

from skillgraft.errors import BlockIntegrityError, BlockNotFoundError, SharedBaseError, StoreError
from skillgraft.memory import SkillMemory
from skillgraft.testing import FakeEmbedder, FakeEngine

WRITER = Path(__file__).with_name("shared_writer.py")
MANUAL = (
    "Skill manual: squashing commits with git. Run git rebase -i HEAD~N, keep the first line as pick "
    "and change the others to squash."
)


@pytest.fixture
def shared(postgres, s3, monkeypatch):
    """A fresh database and bucket prefix; the AWS variables set for this process and its children."""
    for key, value in s3.env().items():
        monkeypatch.setenv(key, value)
    return {"catalog": postgres.database(), "blocks": s3.prefix_url()}


def host(tmp_path: Path, name: str, shared: dict, **options) -> SkillMemory:
    options.setdefault("engine", FakeEngine())
    options.setdefault("embedder", FakeEmbedder())
    return SkillMemory(tmp_path / name, **shared, **options)


def bucket_keys(s3: S3Server, blocks_url: str) -> list[str]:
    prefix = blocks_url.split("/", 3)[3] + "/"
    listed = s3.client().list_objects_v2(Bucket=s3.bucket, Prefix=prefix).get("Contents", [])
    return [item["Key"][len(prefix):] for item in listed]


def test_deposit_on_one_host_grafts_byte_exactly_on_another(tmp_path, shared, smollm2, embedder):
    with host(tmp_path, "a", shared, engine=smollm2, embedder=embedder) as a, \
            host(tmp_path, "b", shared, engine=smollm2, embedder=embedder) as b:
        other = a.add_manual("sourdough", "Skill manual: baking sourdough bread. Feed the starter, fold, proof, bake.")
        b.route("how do I squash my last commits?")  # B builds its index before A adds a block
        version_before = b.store.catalog_version()
        block = a.add_manual("git-squash", MANUAL, examples=["how do I squash my last commits?"])
        assert b.store.catalog_version() != version_before  # B's router index will be rebuilt
        assert b.route("how do I squash my last commits?").block_id == block.id != other.id

        loaded = b.store.load_state(b.store.get("git-squash"))
        assert not loaded.from_cache and loaded.state.sha256 == block.sha256
        assert (tmp_path / "b" / "cache" / block.file_name).read_bytes() == loaded.state.payload
        on_b = b.generate("how do I squash my last commits?", max_tokens=6, gate=False)
        on_a = a.generate("how do I squash my last commits?", max_tokens=6, gate=False)
        assert on_b.decision == on_a.decision == "graft" and on_b.block_id == block.id
        assert [s.token for s in on_b.steps] == [s.token for s in on_a.steps]
        assert not (tmp_path / "b" / "catalog.db").exists() and not (tmp_path / "b" / "blocks").exists()


@pytest.mark.sandbox
def test_four_writers_on_two_hosts_lose_nothing(tmp_path, shared):
    env = {**os.environ, "SKILLGRAFT_CATALOG": shared["catalog"], "SKILLGRAFT_BLOCKS": shared["blocks"]}
    writers = [
        subprocess.Popen([sys.executable, str(WRITER), str(tmp_path / home), f"writer{i}", "3"],
                         env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for i, home in enumerate(["a", "a", "b", "b"])
    ]
    outputs = [w.communicate(timeout=300) for w in writers]
    for writer, (out, err) in zip(writers, outputs):
        assert writer.returncode == 0, err[-2000:]
    ids = [line.split()[-1] for out, _ in outputs for line in out.split()]
    with host(tmp_path, "a", shared) as a, host(tmp_path, "b", shared) as b:
        names = {blk.name for blk in a.store.blocks()}
        assert names >= {f"writer{i}-{j}" for i in range(4) for j in range(3)} | {"shared-manual"}
        assert len(a.store) == 4 * 3 + 2  # the shared manual and the solution are stored once
        assert len(set(ids)) == len(a.store)
        assert len(a.store.solutions_for(a.store.blocks(kind="solution")[0].question_key)) == 1
        assert a.blocks.check()["ok"] and b.blocks.check()["ok"]
        assert sorted(bucket_keys_of(a)) == sorted(blk.file_name for blk in a.store.blocks())


def bucket_keys_of(memory: SkillMemory) -> list[str]:
    import obstore

    return [meta["path"] for batch in obstore.list(memory.store.storage._store) for meta in batch]


@pytest.mark.parametrize("kill_at", ["in-transaction", "cache-write"])
def test_writer_killed_mid_deposit_is_settled_by_repair(tmp_path, shared, runner, kill_at):
    from skillgraft.cli.main import cli

    env = {**os.environ, "SKILLGRAFT_CATALOG": shared["catalog"], "SKILLGRAFT_BLOCKS": shared["blocks"]}
    writer = subprocess.run([sys.executable, str(WRITER), str(tmp_path / "a"), "doomed", "5", "300", kill_at],
                            env=env, capture_output=True, text=True, timeout=300)
    assert writer.returncode == -signal.SIGKILL, writer.stderr[-2000:]
    landed = writer.stdout.split()
    assert len(landed) == 1
    options = ["--home", str(tmp_path / "a"), "--catalog", shared["catalog"], "--blocks", shared["blocks"]]
    before = runner.invoke(cli, [*options, "check", "--json"])
    if kill_at == "cache-write":  # a temp file of the dead writer in its host's cache
        assert before.exit_code == 1 and "temp file of an interrupted write" in before.output
    else:  # the transaction died with its connection: no row, no lock held, the object waits out its grace
        assert before.exit_code == 0, before.output
    repaired = runner.invoke(cli, [*options, "check", "--repair", "--json"])
    assert repaired.exit_code == 0, repaired.output
    again = runner.invoke(cli, [*options, "check", "--json"])
    assert again.exit_code == 0 and '"ok": true' in again.output
    with host(tmp_path, "b", shared) as b:
        assert [blk.id for blk in b.store.blocks()] == landed
        assert b.store.load_state(b.store.get(landed[0])).state.sha256.startswith(landed[0])
        assert b.add_manual("after-the-kill", "Skill manual: written after a writer died.").id  # the lock is free


def test_catalog_restart_gives_clear_errors_then_recovers(tmp_path, shared, postgres, caplog):
    with host(tmp_path, "a", shared) as a, host(tmp_path, "b", shared) as b:
        first = a.add_manual("before", "Skill manual: deposited before the catalog restarts.")
        postgres.stop()
        try:
            with pytest.raises(StoreError, match="catalog") as refused:
                a.add_manual("during", "Skill manual: deposited while the catalog is down.")
            with pytest.raises(StoreError, match="catalog"):
                b.store.blocks()
        finally:
            postgres.start()
        assert PASSWORD not in str(refused.value) and PASSWORD not in caplog.text
        second = a.add_manual("after", "Skill manual: deposited after the catalog came back.")
        assert {blk.name for blk in b.store.blocks()} == {"before", "after"}
        assert b.route("deposited after the catalog came back").block_id == second.id
        assert b.store.load_state(b.store.get(first.id)).state.sha256 == first.sha256
        assert a.blocks.check()["ok"] and b.blocks.check()["ok"]


def test_object_flipped_in_the_bucket_is_quarantined_for_every_host(tmp_path, shared, s3):
    with host(tmp_path, "a", shared) as a, host(tmp_path, "b", shared) as b, host(tmp_path, "c", shared) as c:
        block = a.add_manual("flipped", "Skill manual: this block's object will be damaged in the bucket.",
                             examples=["damaged object"])
        key = shared["blocks"].split("/", 3)[3] + "/" + block.file_name
        client = s3.client()
        data = bytearray(client.get_object(Bucket=s3.bucket, Key=key)["Body"].read())
        data[len(data) // 2] ^= 0x01
        client.put_object(Bucket=s3.bucket, Key=key, Body=bytes(data))

        with pytest.raises(BlockIntegrityError, match="BLAKE3 mismatch"):
            b.store.load_state(b.store.get(block.id))
        assert c.store.get(block.id).status == "quarantined"  # recorded once, for every host
        with pytest.raises(BlockIntegrityError, match="quarantined"):
            c.store.load_state(c.store.get(block.id))
        assert not (tmp_path / "c" / "cache" / block.file_name).exists()  # never downloaded again
        assert c.route("damaged object").block_id != block.id
        assert c.generate("damaged object", max_tokens=2).decision != "graft"
        assert block.file_name not in bucket_keys(s3, shared["blocks"])
        assert any(k.startswith("quarantine/" + block.file_name) for k in bucket_keys(s3, shared["blocks"]))

        report = a.blocks.check(repair=True)  # re-captured from its source text, byte-identical
        assert report.ok and report.repaired, report.as_dict()
        assert c.store.load_state(c.store.get(block.id)).state.sha256 == block.sha256


@pytest.mark.sandbox
def test_migrate_store_copies_a_local_store_into_a_shared_one_and_back(tmp_path, shared, runner):
    from skillgraft.cli.main import cli

    with SkillMemory(tmp_path / "local", engine=FakeEngine(), embedder=FakeEmbedder(), catalog="sqlite", blocks="") as local:
        manual = local.add_manual("git-squash", MANUAL, examples=["squash commits"])
        solution = local.add_solution("What is 17 * 23?", "391", method="print(17 * 23)", verifier="python")
        local.skills.import_folders([pdf_skill(tmp_path / "skills")], expires="30d")  # stored as text
        local.store.set_skill_pin("pdf", True)
        local.apps.add("coder", "You are a coding agent.")
        skill_files, skill_blocks = local.skills.get("pdf").files, {b.id for b in local.store.blocks()} - {manual.id, solution.id}
    out = runner.invoke(cli, ["--home", str(tmp_path / "local"), "--catalog", "", "--blocks", "",
                              "migrate-store", "--to-home", str(tmp_path / "a"), "--to-catalog", shared["catalog"],
                              "--to-blocks", shared["blocks"], "--json"])
    assert out.exit_code == 0, out.output
    assert S3_SECRET not in out.output and PASSWORD not in out.output
    with host(tmp_path, "b", shared) as b:
        assert {blk.id for blk in b.store.blocks()} == {manual.id, solution.id} | skill_blocks
        assert b.route("squash commits").block_id == manual.id
        assert b.skills.names() == ["pdf"] and b.skills.get("pdf").files == skill_files and b.skills.get("pdf").expires_at
        assert b.store.pinned_skills() == ["pdf"] and [app.name for app in b.apps.list()] == ["coder"]
        assert b.blocks.check()["ok"]
    back = runner.invoke(cli, ["--home", str(tmp_path / "b"), "--catalog", shared["catalog"], "--blocks",
                               shared["blocks"], "migrate-store", "--to-home", str(tmp_path / "back")])
    assert back.exit_code == 0, back.output
    with SkillMemory(tmp_path / "back", engine=FakeEngine(), embedder=FakeEmbedder(), catalog="sqlite", blocks="") as copy:
        for original in (manual, solution):
            assert (tmp_path / "back" / "blocks" / original.file_name).read_bytes() == \
                (tmp_path / "local" / "blocks" / original.file_name).read_bytes()
        assert copy.blocks.check()["ok"] and copy.skills.get("pdf").files == skill_files
    again = runner.invoke(cli, ["--home", str(tmp_path / "local"), "--catalog", "", "--blocks", "",
                                "migrate-store", "--to-home", str(tmp_path / "a"), "--to-catalog", shared["catalog"],
                                "--to-blocks", shared["blocks"], "--json"])
    assert again.exit_code == 0 and '"copied": []' in again.output


def test_every_migration_applies_on_postgresql(postgres):
    from skillgraft.store.catalog import MIGRATIONS
    from skillgraft.store.catalog_postgres import PostgresCatalog

    url = postgres.database()
    catalog = PostgresCatalog(url)
    applied = [row[0] for row in catalog.execute("SELECT name FROM _migrations ORDER BY name").fetchall()]
    assert applied == sorted(step.__name__ for step in MIGRATIONS)
    assert catalog.integrity_problems() == [] and catalog.version()[1] == 0
    catalog.close()
    again = PostgresCatalog(url)  # a second host opening it migrates nothing
    assert again._migrate() == [] and again.version()[1] == 0
    again.close()


def test_a_gateway_on_another_host_grafts_from_the_shared_store(tmp_path, shared, smollm2, embedder, monkeypatch):
    """A manual deposited on host A is grafted by `skillgraft serve` on host B (catalog and
    blocks named by the environment, as a deployment would)."""
    import httpx

    from skillgraft.bench.serve import GatewayProcess

    from .required import require_llama_server

    require_llama_server()
    with host(tmp_path, "a", shared, engine=smollm2, embedder=embedder) as a:
        block = a.add_manual("git-squash", MANUAL, examples=["how do I squash my last commits?"])
    monkeypatch.setenv("SKILLGRAFT_CATALOG", shared["catalog"])
    monkeypatch.setenv("SKILLGRAFT_BLOCKS", shared["blocks"])
    gateway = GatewayProcess(tmp_path / "b", servers=1, model=None, log_path=tmp_path / "gateway.log")
    try:
        body = {"model": "smollm2-135m", "messages": [{"role": "user", "content": "How do I squash my last commits?"}],
                "max_tokens": 6}
        answer = httpx.post(gateway.url + "/v1/chat/completions", json=body, timeout=300, trust_env=False).json()
    finally:
        assert gateway.stop() == 0
    assert answer["skillgraft"]["decision"] == "graft" and answer["skillgraft"]["block_id"] == block.id
    assert answer["skillgraft"]["cache_n"] == block.n_tokens
    assert (tmp_path / "b" / "cache" / block.file_name).is_file() and not (tmp_path / "b" / "catalog.db").exists()


def test_edits_swap_a_manual_and_its_keys_on_the_shared_store(tmp_path, shared):
    with host(tmp_path, "a", shared) as a, host(tmp_path, "b", shared) as b:
        block = a.add_manual("git-squash", MANUAL, description="Squash commits.", examples=["squash my commits"])
        new_text = "Skill manual: rebasing a branch onto main. Run git fetch, then git rebase origin/main."
        updated = a.blocks.update("git-squash", text=new_text, description="Rebase a branch.", examples=["rebase onto main"])
        renamed = a.blocks.rename(updated.id, "git-rebase")
        keys = {(k["kind"], k["text"]) for k in b.store.routing_keys(renamed.id)}
        assert keys == {
            ("name", "git rebase"), ("description", "Rebase a branch."), ("example", "rebase onto main"),
            ("manual", "Skill manual: rebasing a branch onto main."), ("manual", "Run git fetch, then git rebase origin/main."),
        }
        assert not b.store.routing_keys(block.id)
        assert b.route("rebase onto main").block.name == "git-rebase"
        assert a.blocks.check(repair=True).as_dict() == {"blocks": 1, "ok": True, "problems": [], "repaired": []}


def test_the_inspector_reads_a_shared_store(tmp_path, shared):
    from skillgraft.inspector import views
    from skillgraft.inspector.skill_list import skill_page
    from skillgraft.store.ledger import LedgerEvent

    memory = host(tmp_path, "a", shared)
    try:
        block = memory.add_manual("git-squash", MANUAL, examples=["squash my commits"])
        memory.store.log(LedgerEvent("generate", decision="graft", block_id=block.id, prefill_tokens_avoided=40,
                                     timings={"total_s": 0.2}))
        memory.store.log(LedgerEvent("generate", decision="abstain", timings={"total_s": 0.1}))
        page = skill_page([memory.store], search="GIT")
        assert [(row.name, row.uses) for row in page.rows] == [("git-squash", 1)]
        detail = views.skill_detail([memory.store], "git-squash")
        assert detail.examples == ["squash my commits"]
        assert [(row.event, row.decision) for row in detail.history] == [("generate", "graft"), ("deposit", "manual")]
        stats = views.decision_stats(memory.store)
        assert stats.totals == {"graft": 1, "abstain": 1} and stats.avoided_total == 40
        assert stats.latency["graft"]["p99"] == pytest.approx(0.2)
        health = views.health(memory.store)
        assert health.report.ok and health.catalog.startswith("postgresql://") and "s3://" in health.blocks
        assert PASSWORD not in health.catalog  # the page shows where the catalog is, never its password
    finally:
        memory.close()


def test_the_postgresql_catalog_keeps_the_catalog_contract(postgres):
    from skillgraft.store.catalog_postgres import PostgresCatalog

    from .storage_contracts import check_catalog

    catalog = PostgresCatalog(postgres.database())
    try:
        check_catalog(catalog)
    finally:
        catalog.close()


def test_the_bucket_keeps_the_block_storage_contract(tmp_path, shared, monkeypatch):
    from skillgraft.store import block_objects

    from .storage_contracts import check_block_storage

    monkeypatch.setattr(block_objects, "UNCLAIMED_GRACE_S", -60.0)  # no deposit is in progress on another host
    check_block_storage(block_objects.ObjectBlocks(shared["blocks"], tmp_path / "cache"))


def test_corrections_and_a_reembed_reach_every_host(tmp_path, shared):
    from skillgraft.errors import EncoderMismatchError
    from skillgraft.routing.feedback import list_corrections
    from skillgraft.routing.reembed import reembed

    class Wider(FakeEmbedder):
        name = "wider-hashing-embedder"

        def __init__(self) -> None:
            super().__init__(dim=512)

    with host(tmp_path, "a", shared) as a, host(tmp_path, "b", shared) as b:
        block = a.add_manual("git-squash", MANUAL, examples=["squash commits"])
        a.add_manual("sourdough", "Skill manual: baking sourdough bread. Feed the starter, fold, proof, bake.")
        b.route("squash commits")  # B holds an index before A corrects the router
        a.feedback("tidy up my history before the pull request", "git-squash")
        a.feedback("what is the weather in squash town", None)
        assert b.route("tidy up my history before the pull request").block_id == block.id
        assert b.route("what is the weather in squash town").decision == "abstain"
        assert {c.kind for c in list_corrections(b)} == {"feedback", "negative"}
        report = reembed(a.store, Wider())
        assert report.changed and report.keys == len(b.store.routing_keys())
        with pytest.raises(EncoderMismatchError):
            b.route("squash commits")  # B is still on the old encoder: refused, never mixed
        with pytest.raises(EncoderMismatchError):
            b.feedback("squash it all", "git-squash")
    with host(tmp_path, "c", shared, embedder=Wider()) as c:
        assert c.route("tidy up my history before the pull request").block_id == block.id
        assert c.route("what is the weather in squash town").decision == "abstain"


def test_an_imported_skill_is_one_thing_on_every_host(tmp_path, shared):
    from .unit.skill_folders import pdf_skill

    folder = pdf_skill(tmp_path / "skills")
    with host(tmp_path, "a", shared) as a, host(tmp_path, "b", shared) as b:
        report = a.skills.import_folders(folder)
        assert [s.name for s in report.imported] == ["pdf"]
        skill = b.skills.get("pdf")
        assert [p.role for p in skill.parts] == ["section", "resource"] and skill.frontmatter["license"] == "Apache-2.0"
        assert b.skills.of_block(b.route("merge pdf files with PdfWriter").block_id) == "pdf"
        out = b.skills.export("pdf", tmp_path / "out")
        assert all((tmp_path / "out" / "pdf" / p).read_bytes() == (folder / p).read_bytes() for p in out.files)
        assert a.skills.import_folders(folder).unchanged and b.skills.remove("pdf") and a.skills.list() == []


def test_skill_versions_share_their_files_in_the_postgresql_catalog(tmp_path, shared):
    from .unit.skill_folders import write_skill

    blob = os.urandom(1 << 20)

    def stored(memory) -> int:
        return int(memory.store.catalog.query("SELECT COALESCE(SUM(LENGTH(data)), 0) AS n FROM skill_files")[0]["n"])

    with host(tmp_path, "a", shared) as a, host(tmp_path, "b", shared) as b:
        a.skills.import_folders(write_skill(tmp_path / "v1", "ledger", "The ledger.", "# Ledger\n\nOne entry a line.\n",
                                    files={"assets/model.bin": blob}))
        before = stored(a)
        second = write_skill(tmp_path / "v2", "ledger", "The ledger.", "# Ledger\n\nOne signed entry a line.\n",
                             files={"assets/model.bin": blob})
        assert [s.version for s in b.skills.import_folders(second).imported] == [2]
        assert stored(a) - before == len((second / "SKILL.md").read_bytes())  # the changed file alone
        b.skills.remove("ledger", 1)  # the version holding the shared bytes
        assert dict(a.skills.contents("ledger", 2)[1])["assets/model.bin"] == blob
        a.skills.remove("ledger")
        assert stored(b) == 0


def agent_hosts(tmp_path, shared, **options):
    """Hosts A and B of one shared store with a manual, and C, which keeps no derived state."""
    a, b = host(tmp_path, "a", shared, **options), host(tmp_path, "b", shared, **options)
    c = host(tmp_path, "c", shared, derived_bytes=0, **options)
    a.add_manual("git-squash", MANUAL, examples=QUESTIONS[:2])
    return a, b, c


def derived_keys(s3: S3Server, blocks_url: str) -> list[str]:
    return [key for key in bucket_keys(s3, blocks_url) if key.startswith("derived/")]


def test_a_derived_state_captured_on_one_host_is_restored_on_another(tmp_path, shared, s3):
    a, b, c = agent_hosts(tmp_path, shared)
    with a, b, c:
        assert b.answer(chat(QUESTIONS[1]), OPTIONS).note.reused_from != "derived"  # nothing published yet
        b.engine.reset()
        a.answer(chat(QUESTIONS[2]), OPTIONS)
        a.answer(chat(QUESTIONS[3]), OPTIONS)  # they part ways after the agent's prefix: pending
        assert a.states.flush() == 1  # kept (as when the context turns to another prompt) and published
        (key,) = derived_keys(s3, shared["blocks"])
        third = b.answer(chat(QUESTIONS[4]), OPTIONS)  # B's next request finds it by key, no wait
        assert third.note.reused_from == "derived" and third.note.cache_n > 100
        fresh = c.answer(chat(QUESTIONS[4]), OPTIONS)
        assert fresh.note.reused_from != "derived"
        assert third.text == fresh.text and [s.token for s in third.end.steps] == [s.token for s in fresh.end.steps]
        assert [p.name for p in (tmp_path / "b" / "derived").rglob("*.state")] == [key.split("/")[-1]]
        ((n_tokens, n_keys),) = [(r["n_tokens"], r["n"]) for r in b.store.catalog.query(
            "SELECT d.n_tokens, count(*) AS n FROM derived_keys k JOIN derived_states d ON d.key = k.state_key"
            " GROUP BY d.n_tokens")]
        assert n_keys == n_tokens // 16  # one key row a whole block
        assert a.blocks.check()["ok"] and b.blocks.check()["ok"]
        assert derived_keys(s3, shared["blocks"]) == [key]  # check leaves a derived state alone


def test_a_damaged_derived_state_in_the_bucket_is_ignored_and_removed(tmp_path, shared, s3, caplog):
    a, b, c = agent_hosts(tmp_path, shared)
    with a, b, c:
        a.answer(chat(QUESTIONS[2]), OPTIONS)
        a.answer(chat(QUESTIONS[3]), OPTIONS)
        a.states.flush()
        (key,) = derived_keys(s3, shared["blocks"])
        name = shared["blocks"].split("/", 3)[3] + "/" + key
        client = s3.client()
        data = bytearray(client.get_object(Bucket=s3.bucket, Key=name)["Body"].read())
        data[-3] ^= 0x01
        client.put_object(Bucket=s3.bucket, Key=name, Body=bytes(data))
        with caplog.at_level(logging.WARNING, logger="skillgraft.store"):
            answer = b.answer(chat(QUESTIONS[4]), OPTIONS)
        assert answer.note.reused_from != "derived" and "damaged" in caplog.text
        assert answer.text == c.answer(chat(QUESTIONS[4]), OPTIONS).text
        assert derived_keys(s3, shared["blocks"]) == []
        assert b.store.catalog.query("SELECT key FROM derived_states") == []


def test_published_states_are_keyed_by_the_migration_and_a_forged_key_row_leads_nowhere(tmp_path, shared, s3):
    from skillgraft.kv.prefixes import chain_keys, state_key
    from skillgraft.store.catalog_postgres import PostgresCatalog

    a, b, c = agent_hosts(tmp_path, shared)
    with a, c:
        a.answer(chat(QUESTIONS[2]), OPTIONS)
        a.answer(chat(QUESTIONS[3]), OPTIONS)
        assert a.states.flush() == 1
        held = a.store.catalog.query("SELECT block_key, state_key, depth FROM derived_keys ORDER BY depth")
        with a.store.catalog.write() as conn:  # as a catalog published to before the key index
            conn.execute("DROP TABLE derived_keys")
            conn.execute("DELETE FROM _migrations WHERE name = 'm020_create_derived_keys'")
        fresh = c.answer(chat(QUESTIONS[4]), OPTIONS)
    catalog = PostgresCatalog(shared["catalog"])  # migrated again: the rows keyed from their token ids
    assert catalog.query("SELECT block_key, state_key, depth FROM derived_keys ORDER BY depth") == held
    engine, tokens = FakeEngine(), list(range(5, 200))
    forged = state_key(engine.fingerprint.id, tokens[:-1])
    with catalog.write() as conn:  # a row whose ids are not its key's, and key rows leading a prompt to it
        conn.execute("INSERT INTO derived_states (key, fingerprint_id, n_tokens, tokens, n_bytes, sha256, created_at,"
                     " last_used) VALUES (?, ?, ?, ?, 10, ?, 'x', 'x')",
                     [forged, engine.fingerprint.id, len(tokens), b"".join(t.to_bytes(4, "little") for t in tokens), "0" * 64])
        conn.executemany("INSERT INTO derived_keys (block_key, state_key, fingerprint_id, scope, depth)"
                         " VALUES (?, ?, ?, '', ?)", [[key.hex(), forged, engine.fingerprint.id, depth]
                                                      for depth, key in enumerate(chain_keys(engine.fingerprint.id, tokens), 1)])
    catalog.close()
    with b:
        assert b.states.cache.lookup([*tokens, *range(300, 320)]) is None and b.states.cache.store.entries() == []
        third = b.answer(chat(QUESTIONS[4]), OPTIONS)
        assert third.note.reused_from == "derived" and third.text == fresh.text
        assert b.store.catalog.query("SELECT key FROM derived_states WHERE key = ?", [forged])  # never fetched


def test_the_published_derived_states_keep_within_the_shared_budget(tmp_path, shared, s3):
    from skillgraft.kv.prefixes import state_key
    from skillgraft.store.derived_states import encode_state
    from skillgraft.store.shared_derived import BUDGET_SETTING

    engine = FakeEngine()
    states = [engine.capture([7, *range(10 + i, 200 + i)]) for i in range(4)]
    one = max(len(encode_state(s)) for s in states)
    with host(tmp_path, "a", shared) as a:
        a.store.set_setting(BUDGET_SETTING, str(2 * one))  # one setting for every host
    with host(tmp_path, "b", shared) as b:
        store = b.states.cache.store
        assert store.max_bytes == 2 * one
        for state in states:
            store.put(state_key(engine.fingerprint.id, state.tokens), state)
            time.sleep(0.002)
        rows = b.store.catalog.query("SELECT key, n_bytes FROM derived_states")
    kept = sorted(state_key(engine.fingerprint.id, s.tokens) for s in states[2:])
    assert sorted(r["key"] for r in rows) == kept and sum(r["n_bytes"] for r in rows) <= 2 * one
    assert derived_keys(s3, shared["blocks"]) == [f"derived/{k}.state" for k in kept]


def test_a_real_models_derived_state_restored_on_another_host_answers_as_a_prefill(tmp_path, shared, smollm2):
    a, b, c = agent_hosts(tmp_path, shared, engine=smollm2)
    with a, b, c:
        a.answer(chat(QUESTIONS[2]), OPTIONS)
        a.answer(chat(QUESTIONS[3]), OPTIONS)
        assert a.states.flush() == 1
        smollm2.reset()  # host B's context holds nothing of A's
        third = b.answer(chat(QUESTIONS[4]), OPTIONS)
        assert third.note.reused_from == "derived"
        smollm2.reset()
        fresh = c.answer(chat(QUESTIONS[4]), OPTIONS)
        assert fresh.note.reused_from != "derived"
        assert [s.token for s in third.end.steps] == [s.token for s in fresh.end.steps]


def test_namespaces_of_a_shared_store_keep_apart_on_every_host_and_read_one_base(tmp_path, shared, s3):
    """Each namespace's catalog is a schema of its own and its blocks a prefix of their own: on
    two hosts, team-a's skill is team-a's alone, both namespaces read the base, and deleting
    team-a's skill deletes its object in the bucket."""
    with host(tmp_path, "a", shared) as base:
        base.add_manual("git-squash", MANUAL, examples=["how do I squash my last commits?"])
    bread = "Skill manual: baking sourdough bread. Feed the starter, fold, proof overnight, bake covered."
    with host(tmp_path, "a", shared, namespace="team-a") as a:
        block = a.add_manual("sourdough", bread, examples=["how do I bake sourdough bread?"])
    prefix = f"namespaces/team-a/{block.sha256}.kv"
    assert prefix in bucket_keys(s3, shared["blocks"])
    with host(tmp_path, "b", shared, namespace="team-a") as a_on_b, \
            host(tmp_path, "b", shared, namespace="team-b") as team_b, host(tmp_path, "b", shared) as base_on_b:
        assert {x.name for x in a_on_b.blocks.list()} == {"sourdough", "git-squash"}
        assert {x.name for x in team_b.blocks.list()} == {"git-squash"} == {x.name for x in base_on_b.blocks.list()}
        assert a_on_b.recall("how do I bake sourdough bread?").block_id == block.id
        assert team_b.recall("how do I bake sourdough bread?").block_id != block.id
        with pytest.raises(BlockNotFoundError):
            team_b.blocks.get("sourdough")
        with pytest.raises(SharedBaseError):
            a_on_b.blocks.delete("git-squash")
        a_on_b.blocks.delete("sourdough")
    assert prefix not in bucket_keys(s3, shared["blocks"])
    with host(tmp_path, "a", shared, namespace="team-a") as a:
        assert {x.name for x in a.blocks.list()} == {"git-squash"}


def test_an_apps_prefix_is_one_for_every_host_of_its_namespace(tmp_path, shared):
    """An app stored on one host is found on another in the same namespace (a schema of the
    shared catalog), warmed behind there, and is no other namespace's."""
    from skillgraft.errors import AppNotFoundError, AppTakenError

    from .unit.skill_folders import pdf_skill

    prompt = "You are a coding agent working in the user's repository. Answer briefly."
    with host(tmp_path, "a", shared):  # the base the namespaces read
        pass
    with host(tmp_path, "a", shared, namespace="team-a") as a:
        a.apps.add("coder", prompt)
        a.skills.import_folders(pdf_skill(tmp_path / "skills"))
    with host(tmp_path, "b", shared, namespace="team-a") as a_on_b, host(tmp_path, "b", shared) as base_on_b:
        assert [(app.name, app.system) for app in a_on_b.apps.list()] == [("coder", prompt)]
        with pytest.raises(AppTakenError):
            a_on_b.apps.add("coder", "Another prompt.")
        assert base_on_b.apps.list() == []
        with pytest.raises(AppNotFoundError):
            base_on_b.skills.warm(["pdf"], app="coder")
        report = a_on_b.skills.warm(["pdf"], app="coder")
        assert report.warmed and not report.left_out
        a_on_b.apps.remove("coder")
    with host(tmp_path, "a", shared, namespace="team-a") as a:
        assert a.apps.list() == []


# -- the namespaces of a shared store: listed, deleted whole, cleaned behind a base block ------


def schemas(shared: dict) -> set[str]:
    from skillgraft.store.catalog_postgres import PostgresCatalog

    catalog = PostgresCatalog(shared["catalog"], read_only=True)
    try:
        return {row["schema_name"] for row in catalog.query(
            "SELECT schema_name FROM information_schema.schemata WHERE schema_name LIKE 'sg_ns_%'")}
    finally:
        catalog.close()


def published_rows(shared: dict, namespace: str) -> tuple[list[str], int]:
    """The keys of ``namespace``'s published states and how many key rows they have."""
    from skillgraft.memory.namespaces import catalog_schema
    from skillgraft.store.catalog_postgres import PostgresCatalog

    catalog = PostgresCatalog(shared["catalog"], read_only=True, schema=catalog_schema(namespace))
    try:
        keys = [row["key"] for row in catalog.query("SELECT key FROM derived_states ORDER BY key")]
        return keys, catalog.query("SELECT count(*) AS n FROM derived_keys")[0]["n"]
    finally:
        catalog.close()


def test_deleting_a_base_skill_deletes_the_states_every_namespace_published_behind_it(tmp_path, shared, s3):
    """Two namespaces publish a state behind the base's skill on host A; deleting the skill on
    host B (which keeps nothing of theirs) removes their rows, key rows and objects."""
    from .unit.conftest import GIT_QUERY
    from .unit.test_prefix_reuse import AGENT

    with host(tmp_path, "a", shared) as base:
        block = base.add_manual("git-squash", MANUAL, examples=["how do I squash my last commits?"])
    for namespace in ("team-a", "team-ab"):
        with host(tmp_path, "a", shared, namespace=namespace) as memory:
            for query in (GIT_QUERY, "how do I squash my last commits?"):  # an agent's prompt, twice behind it
                assert memory.generate(query, system=AGENT, max_tokens=4).block_id == block.id
            memory.states.flush()
        keys, key_rows = published_rows(shared, namespace)
        assert keys and key_rows
        assert sorted(k for k in bucket_keys(s3, shared["blocks"]) if k.startswith(f"namespaces/{namespace}/derived/")) \
            == [f"namespaces/{namespace}/derived/{k}.state" for k in keys]
    with host(tmp_path, "b", shared) as base_on_b:
        base_on_b.blocks.delete("git-squash")
    for namespace in ("team-a", "team-ab"):
        assert published_rows(shared, namespace) == ([], 0)
    assert not [k for k in bucket_keys(s3, shared["blocks"]) if "/derived/" in k]


def test_the_namespaces_of_a_shared_store_are_listed_and_one_deleted_whole(tmp_path, shared, s3, runner, monkeypatch):
    """``namespaces list`` shows what the shared store holds; ``namespaces delete`` removes a
    namespace's objects, schema, this host's folder and its name, and nothing of the others; one
    cut short after its objects went is finished by running it again."""
    import json

    from skillgraft.cli.main import cli
    from skillgraft.errors import NamespaceNotFoundError
    from skillgraft.memory import namespaces as spaces

    bread = "Skill manual: baking sourdough bread. Feed the starter, fold, proof overnight, bake covered."
    with host(tmp_path, "a", shared) as base:
        base.add_manual("git-squash", MANUAL, examples=["how do I squash my last commits?"])
    for namespace in ("team-a", "team-ab"):
        with host(tmp_path, "a", shared, namespace=namespace) as memory:
            memory.add_manual("sourdough", bread, examples=["how do I bake sourdough bread?"])
    with host(tmp_path, "b", shared, namespace="team-a"):  # host B's folder of it
        pass
    assert schemas(shared) == {spaces.catalog_schema("team-a"), spaces.catalog_schema("team-ab")}
    options = ["--home", str(tmp_path / "a"), "--catalog", shared["catalog"], "--blocks", shared["blocks"]]
    listed = runner.invoke(cli, [*options, "namespaces", "list", "--json"])
    assert listed.exit_code == 0, listed.output
    assert json.loads(listed.stdout) == {"namespaces": ["team-a", "team-ab"]}
    import psycopg

    role = "reader_" + shared["catalog"].rsplit("/", 1)[1]  # a role that may only read the registry
    with psycopg.connect(shared["catalog"], autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {role} LOGIN PASSWORD '{PASSWORD}'")
        conn.execute(f"GRANT SELECT ON namespaces TO {role}")
    reader = shared["catalog"].replace("skillgraft:", f"{role}:", 1)
    assert spaces.namespaces(tmp_path, reader) == ["team-a", "team-ab"]
    for name in ("team-c", "default", "../a"):
        refused = runner.invoke(cli, [*options, "namespaces", "delete", name])
        assert refused.exit_code == 1 and "Traceback" not in refused.output
    unknown = runner.invoke(cli, [*options, "namespaces", "delete", "team-c"]).output
    assert "no namespace 'team-c'" in unknown and PASSWORD not in unknown
    with pytest.raises(NamespaceNotFoundError):
        spaces.delete_namespace(tmp_path / "b", "team-c", shared["catalog"], shared["blocks"])

    def cut_short(*_):
        raise StoreError("the connection was lost")

    with monkeypatch.context() as patched, pytest.raises(StoreError):
        patched.setattr(spaces, "drop_schema", cut_short)
        spaces.delete_namespace(tmp_path / "a", "team-a", shared["catalog"], shared["blocks"])
    assert not [k for k in bucket_keys(s3, shared["blocks"]) if k.startswith("namespaces/team-a/")]
    assert spaces.catalog_schema("team-a") in schemas(shared) and "team-a" in spaces.namespaces(tmp_path, shared["catalog"])
    deleted = runner.invoke(cli, [*options, "namespaces", "delete", "team-a", "--json"])  # run again: finished
    assert deleted.exit_code == 0, deleted.output
    report = json.loads(deleted.stdout)
    assert report["schema"] == spaces.catalog_schema("team-a") and report["objects"] == 0 and report["files"] > 0
    assert schemas(shared) == {spaces.catalog_schema("team-ab")}
    assert not (tmp_path / "a" / "namespaces" / "team-a").exists()
    assert (tmp_path / "b" / "namespaces" / "team-a").is_dir()  # another host's cache, unused now
    assert spaces.namespaces(tmp_path, shared["catalog"]) == ["team-ab"]
    assert [k for k in bucket_keys(s3, shared["blocks"]) if k.startswith("namespaces/")] \
        and all(k.startswith("namespaces/team-ab/") for k in bucket_keys(s3, shared["blocks"]) if k.startswith("namespaces/"))
    again = runner.invoke(cli, [*options, "namespaces", "delete", "team-a"])
    assert again.exit_code == 1 and "no namespace 'team-a'" in again.output
    with host(tmp_path, "b", shared, namespace="team-ab") as team_ab, host(tmp_path, "b", shared) as base_on_b:
        assert {x.name for x in team_ab.blocks.list()} == {"sourdough", "git-squash"}
        assert team_ab.recall("how do I bake sourdough bread?").block_id == team_ab.blocks.get("sourdough").id
        assert {x.name for x in base_on_b.blocks.list()} == {"git-squash"}
        assert base_on_b.blocks.check()["ok"] and team_ab.blocks.check()["ok"]
