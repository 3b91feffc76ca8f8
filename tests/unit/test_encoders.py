"""The encoder seam on the fakes: the store's record, refusals, re-embeds, the registry."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from skillgraft.errors import ConfigError, EncoderMismatchError, ModelNotFoundError, RouterError
from skillgraft.memory import SkillMemory
from skillgraft.routing.embedder import DEFAULT_EMBEDDER, MPNET_EMBEDDER, Embedder
from skillgraft.routing.encoders import choose_embedder, make_embedder
from skillgraft.routing.endpoint import EndpointEmbedder
from skillgraft.routing.reembed import reembed
from skillgraft.store.block_store import BlockStore
from skillgraft.testing import FakeEmbedder, FakeEngine

from .conftest import GIT_MANUAL, GIT_QUERY, SOURDOUGH_MANUAL


class OtherEmbedder(FakeEmbedder):
    """Another encoder: its own name and a 256-d space."""

    name = "other-hashing-embedder"

    def __init__(self, fail_after: int = -1) -> None:
        super().__init__(dim=256)
        self.calls = 0
        self.fail_after = fail_after

    def encode(self, texts):
        self.calls += 1
        if self.calls == self.fail_after:
            raise RouterError("the encoder died mid-way")
        return super().encode(texts)


def _stock(home, embedder=None):
    memory = SkillMemory(home, engine=FakeEngine(), embedder=embedder or FakeEmbedder())
    memory.add_manual("git-squash", GIT_MANUAL, examples=["how do I squash my last commits?"])
    memory.add_manual("sourdough", SOURDOUGH_MANUAL, examples=["how do I bake sourdough bread?"])
    return memory


def test_the_store_records_its_encoder_with_the_first_keys(tmp_path):
    with _stock(tmp_path) as memory:
        assert memory.store.encoder_record() == FakeEmbedder().record()


def test_another_encoder_is_refused_at_open_and_a_changed_one_at_first_use(tmp_path):
    _stock(tmp_path).close()
    with pytest.raises(EncoderMismatchError, match="reembed") as caught:
        SkillMemory(tmp_path, engine=FakeEngine(), embedder=OtherEmbedder())
    assert caught.value.stored["name"] == FakeEmbedder.name and caught.value.given["name"] == OtherEmbedder.name
    same_name = FakeEmbedder(dim=128)  # same name, other space: the record's dimension and digest tell
    with SkillMemory(tmp_path, engine=FakeEngine(), embedder=same_name) as memory:
        with pytest.raises(EncoderMismatchError):
            memory.route(GIT_QUERY)


def test_an_old_store_without_a_record_is_judged_by_its_keys(tmp_path):
    with _stock(tmp_path) as memory:
        memory.store.set_setting("router.encoder", "{}")  # replaced below: a store from before the record
        memory.store.db.execute("DELETE FROM settings WHERE key = 'router.encoder'")
    with pytest.raises(EncoderMismatchError):
        SkillMemory(tmp_path, engine=FakeEngine(), embedder=OtherEmbedder())
    with SkillMemory(tmp_path, engine=FakeEngine(), embedder=FakeEmbedder()) as memory:
        assert memory.route(GIT_QUERY).block.name == "git-squash"
        assert memory.store.encoder_record()["name"] == FakeEmbedder.name  # recorded now


def test_reembed_moves_the_store_and_the_old_encoder_is_refused_after(tmp_path):
    old = _stock(tmp_path)
    keys = len(old.store.routing_keys())
    old.feedback("knead the dough and let it rise", "sourdough")
    other = OtherEmbedder()
    report = reembed(old.store, other, batch=3)
    assert report.changed and report.keys == keys + 1 and report.embedded == keys + 1
    assert (report.embedder, report.previous, report.dimension) == (OtherEmbedder.name, FakeEmbedder.name, 256)
    assert {len(k["vector"]) for k in old.store.routing_keys()} == {256 * 4} and old.store.staged_count() == 0
    with pytest.raises(EncoderMismatchError):
        old.route(GIT_QUERY)  # a process still on the old encoder: its next route is refused
    with pytest.raises(EncoderMismatchError):
        old.add_manual("third", "Skill manual: tying knots. Make a loop, pass the end through, pull tight.")
    old.close()
    with SkillMemory(tmp_path, engine=FakeEngine(), embedder=OtherEmbedder()) as memory:
        assert memory.route(GIT_QUERY).block.name == "git-squash"
        assert memory.route("knead the dough and let it rise").block.name == "sourdough"
    assert not reembed(BlockStore(tmp_path), OtherEmbedder()).changed  # already there: nothing to do


def test_a_reembed_that_dies_leaves_the_old_encoder_in_force_and_resumes(tmp_path):
    memory = _stock(tmp_path)
    keys = len(memory.store.routing_keys())
    with pytest.raises(RouterError, match="mid-way"):
        reembed(memory.store, OtherEmbedder(fail_after=3), batch=2)
    assert memory.store.encoder_record()["name"] == FakeEmbedder.name and memory.store.staged_count() == 4
    assert memory.route(GIT_QUERY).block.name == "git-squash"  # the store routes as before
    report = reembed(memory.store, OtherEmbedder(), batch=2)
    assert report.changed and report.embedded == keys - 4 and report.keys == keys  # the staged ones were kept
    memory.close()


def test_keys_added_meanwhile_are_staged_before_the_switch(tmp_path):
    memory = _stock(tmp_path)
    writer = SkillMemory(tmp_path, engine=FakeEngine(), embedder=FakeEmbedder())

    class Busy(OtherEmbedder):
        def encode(self, texts):
            if self.calls == 0 and len(texts) > 1:
                writer.add_manual("knots", "Skill manual: tying knots. Make a loop, pass the end through.")
            return super().encode(texts)

    report = reembed(memory.store, Busy(), batch=1000)
    assert report.keys == len(memory.store.routing_keys()) and report.changed
    assert {k["embedder"] for k in memory.store.routing_keys()} == {OtherEmbedder.name}
    writer.close()
    memory.close()


def test_choosing_an_encoder(tmp_path, monkeypatch):
    monkeypatch.delenv("SKILLGRAFT_EMBEDDER", raising=False)
    assert choose_embedder(None).name == DEFAULT_EMBEDDER
    assert make_embedder("mpnet").name == MPNET_EMBEDDER and make_embedder("MiniLM").name == DEFAULT_EMBEDDER
    endpoint = make_embedder("openai:http://127.0.0.1:9/v1?model=all-minilm")
    assert isinstance(endpoint, EndpointEmbedder) and endpoint.name == "openai:all-minilm"
    assert endpoint.base == "http://127.0.0.1:9/v1"
    folder = tmp_path / "my-encoder"
    folder.mkdir()
    assert make_embedder(str(folder)).name == "st:my-encoder"
    monkeypatch.setenv("SKILLGRAFT_EMBEDDER", "mpnet")
    assert choose_embedder(None).name == MPNET_EMBEDDER
    for bad in ("", "no-such-encoder", "ftp://host/v1"):
        with pytest.raises(ConfigError):
            make_embedder(bad)
    with pytest.raises(ConfigError):
        EndpointEmbedder("ftp://host/v1")


def test_a_store_opened_without_a_choice_uses_its_recorded_encoder(tmp_path, monkeypatch):
    monkeypatch.delenv("SKILLGRAFT_EMBEDDER", raising=False)
    store = BlockStore(tmp_path)
    store.claim_encoder({"name": MPNET_EMBEDDER, "spec": "mpnet", "dimension": 768, "digest": "d"})
    assert choose_embedder(None, store).name == MPNET_EMBEDDER
    assert choose_embedder("minilm").name == DEFAULT_EMBEDDER
    with pytest.raises(EncoderMismatchError, match="--embedder mpnet"):
        choose_embedder("minilm", store)  # a choice is checked against the store's record at once
    with pytest.raises(EncoderMismatchError, match="--embedder mpnet"):
        SkillMemory(tmp_path, engine=FakeEngine(), embedder="minilm")
    monkeypatch.setenv("SKILLGRAFT_EMBEDDER", "minilm")
    with pytest.raises(EncoderMismatchError):
        SkillMemory(tmp_path, engine=FakeEngine())
    store.close()


def test_mpnet_needs_its_install_step(tmp_path, monkeypatch):
    monkeypatch.setenv("SKILLGRAFT_CACHE_DIR", str(tmp_path))
    with pytest.raises(ModelNotFoundError, match="skillgraft models install mpnet"):
        Embedder(MPNET_EMBEDDER).encode(["hello"])


def test_a_damaged_encoder_record_is_a_store_error_that_reembed_repairs(tmp_path):
    from skillgraft.errors import StoreError

    _stock(tmp_path).close()
    store = BlockStore(tmp_path)
    store.set_setting("router.encoder", "{not json")
    with pytest.raises(StoreError, match="reembed"):
        SkillMemory(tmp_path, engine=FakeEngine(), embedder=FakeEmbedder())
    assert reembed(store, FakeEmbedder()).changed
    store.close()
    with SkillMemory(tmp_path, engine=FakeEngine(), embedder=FakeEmbedder()) as memory:
        assert memory.route(GIT_QUERY).block.name == "git-squash"


def test_a_recorded_encoder_no_spec_rebuilds_still_lists_and_checks_then_refuses_routing(tmp_path, monkeypatch):
    monkeypatch.delenv("SKILLGRAFT_EMBEDDER", raising=False)
    _stock(tmp_path).close()  # recorded: the fake encoder, which no spec names
    with SkillMemory(tmp_path, engine=FakeEngine()) as memory:  # no choice: MiniLM, not loaded yet
        assert [b.name for b in memory.blocks.list()] == ["git-squash", "sourdough"] and memory.blocks.check().ok
        with pytest.raises(EncoderMismatchError, match="fake-hashing-embedder"):
            memory.route(GIT_QUERY)


@pytest.mark.parametrize("recorded", ["ENDPOINT", "openai:ENDPOINT/v1?model=tiny", "FOLDER"])
def test_a_recorded_endpoint_or_folder_is_never_followed_unless_named(tmp_path, monkeypatch, recorded):
    """A catalog row (anyone who can write the catalog) names an embeddings URL or a folder:
    opening, listing and routing never contact it; routing says how to choose."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    import threading

    from skillgraft.errors import EncoderNotChosenError

    contacts = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            contacts.append(self.path)
            self.send_response(500)
            self.end_headers()

        do_POST = do_GET

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    folder = tmp_path / "model"
    folder.mkdir()
    spec = recorded.replace("ENDPOINT", f"http://127.0.0.1:{server.server_address[1]}").replace("FOLDER", str(folder))
    monkeypatch.delenv("SKILLGRAFT_EMBEDDER", raising=False)
    monkeypatch.setenv("SKILLGRAFT_EMBEDDER_API_KEY", "secret")
    home = tmp_path / "store"
    _stock(home).close()
    store = BlockStore(home)
    store.set_setting("router.encoder", '{"name": "openai:tiny", "spec": "%s", "dimension": 64, "digest": "tiny"}' % spec)
    store.close()
    try:
        with SkillMemory(home, engine=FakeEngine()) as memory:
            assert [b.name for b in memory.blocks.list()] == ["git-squash", "sourdough"] and memory.blocks.check().ok
            with pytest.raises(EncoderNotChosenError, match="--embedder SPEC") as raised:
                memory.route(GIT_QUERY)
            assert raised.value.record["spec"] == spec
            with pytest.raises(EncoderNotChosenError):
                memory.answer([("user", GIT_QUERY)])
    finally:
        server.shutdown()
        server.server_close()
    assert contacts == []


def test_over_http_an_unchosen_encoder_is_a_503_that_says_how_to_choose():
    from skillgraft.errors import EncoderNotChosenError
    from skillgraft.gateway.app import api_error

    error = api_error(EncoderNotChosenError({"name": "openai:tiny", "spec": "http://10.0.0.1/v1"}))
    assert error.status == 503 and error.code == "encoder_not_chosen" and "--embedder" in str(error)


class SameNameEmbedder(OtherEmbedder):
    """Another endpoint serving a model of the same id: the same name, another dimension."""

    def __init__(self, dim: int, fail_after: int = -1) -> None:
        super().__init__(fail_after)
        self.dim = dim

    def record(self) -> dict:
        return {"name": self.name, "spec": f"http://endpoint-{self.dim}/v1", "dimension": self.dim, "digest": "tiny"}


def test_a_resumed_reembed_on_another_encoder_of_the_same_name_never_mixes(tmp_path):
    memory = _stock(tmp_path)
    keys = len(memory.store.routing_keys())
    with pytest.raises(RouterError, match="mid-way"):
        reembed(memory.store, SameNameEmbedder(256, fail_after=3), batch=2)
    assert memory.store.staged_count() == 4
    report = reembed(memory.store, SameNameEmbedder(128), batch=2)
    assert report.changed and report.embedded == keys  # nothing staged by the other one was reused
    assert {len(k["vector"]) for k in memory.store.routing_keys()} == {128 * 4}
    memory.close()
    with SkillMemory(tmp_path, engine=FakeEngine(), embedder=SameNameEmbedder(128)) as reopened:
        assert reopened.route(GIT_QUERY).block.name == "git-squash"


def test_a_switch_refuses_staged_vectors_of_another_dimension(tmp_path):
    from skillgraft.errors import StoreError
    from skillgraft.store.routing_edits import stage_key

    memory = _stock(tmp_path)
    record = SameNameEmbedder(128).record()
    rows = [{"id": k["id"], "text": k["text"], "vector": np.zeros(64 if i == 0 else 128, np.float32).tobytes()}
            for i, k in enumerate(memory.store.routing_keys())]
    memory.store.stage_vectors(stage_key(record), rows)
    with pytest.raises(StoreError, match="not 128-d"):
        memory.store.switch_vectors(record)
    assert memory.store.encoder_record()["name"] == FakeEmbedder.name  # nothing was switched
    memory.close()


def test_a_route_over_vectors_of_mixed_dimensions_is_a_router_error_never_a_500(tmp_path):
    from skillgraft.gateway.app import api_error

    memory = _stock(tmp_path)  # then most vectors damaged to another dimension (as a mixed re-embed left them)
    first = memory.store.routing_keys()[0]
    with memory.store.catalog.write() as conn:
        conn.execute("UPDATE routing_keys SET vector = ? WHERE id != ?", ((np.ones(32, np.float32) / np.sqrt(32)).astype(np.float32).tobytes(), first["id"]))
    memory.close()
    shutil.rmtree(tmp_path / "index", ignore_errors=True)  # the index cache of the undamaged keys
    with SkillMemory(tmp_path, engine=FakeEngine(), embedder=FakeEmbedder()) as reopened:
        with pytest.raises(RouterError, match="reembed --force") as raised:
            reopened.route(GIT_QUERY)
    assert api_error(raised.value).status == 503
