import pytest

from skillgraft.errors import InputError
from skillgraft.routing.router import DEFAULT_THRESHOLD, Embedder, Router, RouterCalibration
from skillgraft.routing.calibration import encoder_threshold


def test_empty_store_abstains_saying_so(memory):
    recall = memory.route("how do I squash commits?")
    assert recall.decision == "abstain" and "empty" in recall.reason


def test_routes_to_the_right_block_and_abstains_out_of_domain(stocked):
    recall = stocked.route("I want to merge my last three commits into a single one")
    assert recall.decision == "graft" and recall.block.name == "git-squash"
    assert recall.score >= recall.threshold == encoder_threshold(stocked.router.embedder.name) == 0.51
    assert stocked.route("bread came out flat, what went wrong with my loaf?").block.name == "sourdough"
    off = stocked.route("Who won the football world cup in 1998?")
    assert off.decision == "abstain" and off.block is None
    assert "< threshold" in off.reason and "out of domain" in off.reason


@pytest.mark.parametrize("query", ["", "   \n\t", b"\xff\xfe bad bytes", "bad \udcff surrogate", 42])
def test_bad_queries_are_input_errors(stocked, query):
    with pytest.raises(InputError):
        stocked.route(query)


def test_a_ten_thousand_word_query_still_routes(stocked):
    recall = stocked.route("squash my git commits please " * 2000)
    assert (recall.decision, recall.block.name) == ("graft", "git-squash")


class CountingEmbedder(Embedder):
    def __init__(self, inner):
        super().__init__(inner.name)
        self._model = inner._load()
        self.encoded = 0

    def encode(self, texts):
        self.encoded += len(texts)
        return super().encode(texts)


def test_reopening_a_store_re_embeds_nothing(stocked, embedder):
    counting = CountingEmbedder(embedder)
    router = Router(stocked.store, counting)
    assert router.route("squash commits").block.name == "git-squash"
    assert counting.encoded == 1  # the query only


def test_keys_of_another_embedder_are_re_embedded(stocked, embedder):
    stocked.store.db.execute("UPDATE routing_keys SET embedder = 'some-other-model'")
    counting = CountingEmbedder(embedder)
    router = Router(stocked.store, counting)
    assert router.route("squash commits").block.name == "git-squash"
    keys = stocked.store.routing_keys()
    assert counting.encoded == len(keys) + 1
    assert {k["embedder"] for k in keys} == {embedder.name}


def test_index_follows_the_catalog(stocked):
    assert stocked.route("how do I water a fern?").decision == "abstain"
    stocked.add_manual("ferns", "Skill manual: ferns like moist soil and indirect light.", examples=["how do I water a fern?"])
    assert stocked.route("how do I water a fern?").block.name == "ferns"
    stocked.store.remove("ferns")
    assert stocked.route("how do I water a fern?").decision == "abstain"


def test_calibration_stores_a_threshold_and_reports_rates(stocked):
    in_domain = [("squash the last two commits", "git-squash"), ("sourdough starter feeding", "sourdough"),
                 ("combine my commits", "git-squash"), ("dense loaf of bread", "sourdough")]
    ood = ["what's the weather tomorrow", "book me a flight to Rome", "tell me a joke", "who is the president of France"]
    report = stocked.calibrate(in_domain, ood)
    assert isinstance(report, RouterCalibration)
    assert stocked.router.threshold == report.threshold
    assert report.false_accept == 0.0 and report.in_scope_accuracy == 1.0 and report.false_abstain == 0.0
    assert (report.in_domain, report.out_of_domain) == (4, 4)
    low, high = report.false_accept_ci95
    assert low == 0.0 < high < 1.0
    assert report.as_dict()["threshold"] == report.threshold


def test_calibration_needs_out_of_domain_examples_and_known_blocks(stocked):
    with pytest.raises(InputError, match="out-of-domain"):
        stocked.calibrate([("squash", "git-squash")], [])
    with pytest.raises(InputError, match="unknown block"):
        stocked.calibrate([("squash", "no-such")], ["weather"])
    for bad in (["squash my commits"], [("squash",)], [("squash", "git-squash", "extra")], [("squash", None)]):
        with pytest.raises(InputError, match="not a \\(query, block name\\) pair"):
            stocked.calibrate(bad, ["weather"])
    with pytest.raises(InputError, match="NUL"):
        stocked.calibrate([("squash\x00", "git-squash")], ["weather"])


def test_index_cache_file_is_used_and_rebuilt_when_missing_foreign_or_corrupt(stocked, embedder):
    folder = stocked.store.home / "index"
    stocked.route("squash commits")
    assert (folder / "keys.faiss").exists() and (folder / "keys.json").exists()
    version = stocked.store.catalog_version()
    from skillgraft.routing.router import KeyIndex

    assert KeyIndex.load(folder, version, embedder.name) is not None
    assert KeyIndex.load(folder, version, "another-embedder") is None
    (folder / "keys.faiss").write_bytes(b"garbage")
    assert KeyIndex.load(folder, version, embedder.name) is None
    assert Router(stocked.store, embedder).route("squash commits").block.name == "git-squash"
    for path in folder.iterdir():
        path.unlink()
    assert Router(stocked.store, embedder).route("squash commits").block.name == "git-squash"
    assert (folder / "keys.faiss").exists()
