"""The inspector's pages over a store of the fakes: what they show, what they refuse, that they write nothing."""

from __future__ import annotations

import re

import pytest

from tests.required import need

need("fastapi", "skillgraft[serve]")
need("jinja2", "skillgraft[serve]")

from fastapi import FastAPI  # noqa: E402
from starlette.testclient import TestClient  # noqa: E402

from skillgraft.inspector import LocalSource, guards_itself, mount_inspector  # noqa: E402
from skillgraft.inspector import plots, views  # noqa: E402
from skillgraft.inspector.local import inspector_app  # noqa: E402
from skillgraft.store.ledger import LedgerEvent  # noqa: E402
from tests.unit.conftest import ANSWER, GIT_QUERY, OUT_OF_DOMAIN, QUESTION  # noqa: E402


@pytest.fixture
def fake_engine():
    """Confident answers, so a routed graft stands (the gate lets it through)."""
    from skillgraft.testing import FakeEngine

    return FakeEngine(reply="Run git rebase -i and squash.")


@pytest.fixture
def answered(fake_stocked):
    """The stocked memory after three answers of the fake engine: exact, graft, abstain."""
    for query in (QUESTION, GIT_QUERY, OUT_OF_DOMAIN):
        fake_stocked.generate(query, max_tokens=4)
    return fake_stocked


@pytest.fixture
def client(answered):
    return TestClient(inspector_app(LocalSource(answered), allowed_hosts=["testserver"]))


def _state(memory) -> tuple:
    return memory.store.ledger_counts(), memory.store.catalog_version()


def test_the_skill_list_is_the_catalog(client, answered):
    page = client.get("/ui")
    assert page.status_code == 200
    listed = re.findall(r'<tr data-id="([0-9a-f]{16})">', page.text)
    assert listed == [block.id for block in answered.blocks.list(include_quarantined=True)]
    assert f"{len(listed)} of {len(listed)} skills" in page.text
    uses = answered.store.block_uses()
    assert uses and all(f'href="/ui/skills/{block_id}"' in page.text for block_id in uses)


def test_search_and_sort(client, answered):
    found = client.get("/ui", params={"q": "SOURDOUGH"})
    assert re.findall(r'class="skill"[^>]*>([^<]+)<', found.text) == ["sourdough"]
    by_tokens = client.get("/ui", params={"sort": "tokens", "order": "desc"})
    ids = re.findall(r'<tr data-id="([0-9a-f]{16})">', by_tokens.text)
    assert ids == [b.id for b in sorted(answered.blocks.list(), key=lambda b: b.n_tokens, reverse=True)]
    refused = client.get("/ui", params={"sort": "name; DROP TABLE blocks"})
    assert refused.status_code == 400 and "sort must be one of" in refused.text


def test_one_skill_shows_its_text_keys_examples_and_history(client, answered):
    manual = answered.blocks.get("git-squash")
    page = client.get(f"/ui/skills/{manual.id}")
    assert page.status_code == 200
    assert "git rebase -i HEAD~N" in page.text and "how do I squash my last commits?" in page.text
    assert "Routing keys" in page.text and "<summary>manual (" in page.text
    assert "generate" in page.text  # the graft answered above names this block
    solution = answered.blocks.get(QUESTION)
    page = client.get(f"/ui/skills/{solution.name}")
    assert all(text in page.text for text in (QUESTION, ANSWER, "17 * 23", "exact", "Verified solution"))
    missing = client.get("/ui/skills/no-such-skill")
    assert missing.status_code == 404 and "no block with id or name" in missing.text


def test_the_decisions_page_plots_the_answers(client, answered):
    page = client.get("/ui/decisions")
    assert page.status_code == 200
    assert page.text.count("<svg") == 3
    for decision in ("exact", "graft", "abstain"):
        assert f'data-series="{decision}"' in page.text


def test_the_query_box_routes_without_generating_or_writing(client, answered, fake_engine):
    before, calls = _state(answered), dict(fake_engine.calls)
    page = client.get("/ui/route", params={"q": GIT_QUERY})
    assert page.status_code == 200
    expected = answered.recall(GIT_QUERY, log=False)
    shown = re.search(r'id="decision-value">(\w+)<', page.text).group(1)
    assert shown == expected.decision == "graft"
    assert expected.block.name in page.text and 'class="threshold"' in page.text
    assert client.get("/ui/route", params={"q": QUESTION}).text.count(">exact<") >= 1
    assert _state(answered) == before and dict(fake_engine.calls) == calls
    refused = client.get("/ui/route", params={"q": "bad\x00query"})
    assert refused.status_code == 400 and "NUL" in refused.text
    assert "id=\"decision\"" not in client.get("/ui/route", params={"q": "   "}).text


def test_health_and_runtime(client, answered):
    health = client.get("/ui/health")
    assert health.status_code == 200 and f"All {len(answered.blocks.list())} blocks check out" in health.text
    runtime = client.get("/ui/runtime")
    assert "local store" in runtime.text and answered.router.embedder.name in runtime.text
    assert answered.blocks.list()[0].fingerprint_id in runtime.text


def test_hostile_names_are_escaped_in_pages_and_plots(fake_memory):
    name = "<script>alert(1)</script>"
    fake_memory.add_manual(name, "Skill manual: a hostile name still gets a page of its own, escaped.",
                           examples=["<img src=x onerror=alert(2)>"])
    client = TestClient(inspector_app(LocalSource(fake_memory), allowed_hosts=["testserver"]))
    for path in ("/ui", f"/ui/skills/{fake_memory.blocks.list()[0].id}", "/ui/route?q=hostile+name+page"):
        text = client.get(path).text
        assert "<script>alert" not in text and "<img src=x" not in text
        assert "&lt;script&gt;" in text or "&lt;img" in text


def test_every_page_forbids_scripts_framing_and_foreign_assets(client):
    for path in ("/ui", "/ui/decisions", "/ui/route?q=x", "/ui/health", "/ui/runtime", "/ui/skills/none"):
        headers = client.get(path).headers
        assert "default-src 'none'" in headers["content-security-policy"]
        assert "frame-ancestors 'none'" in headers["content-security-policy"]
        assert headers["x-content-type-options"] == "nosniff"
    css = client.get("/ui/static/inspector.css")
    assert css.status_code == 200 and css.headers["content-type"].startswith("text/css")
    assert "url(" not in css.text and "@import" not in css.text
    assert client.get("/ui/static/catalog.db").status_code == 404
    assert client.get("/ui/static/..%2F..%2Fcatalog.db").status_code == 404


def test_the_api_key_guards_every_page_and_the_login_form_sets_a_cookie(answered):
    app = FastAPI()
    mount_inspector(app, LocalSource(answered), api_key="s3cret")
    client = TestClient(app)
    bare = client.get("/ui/decisions")
    assert bare.status_code == 401 and 'name="key"' in bare.text
    wrong = client.post("/ui/login", data={"key": "guess"}, follow_redirects=False)
    assert wrong.status_code == 401 and "Refused" in wrong.text and "skillgraft_ui" not in wrong.headers.get("set-cookie", "")
    assert client.get("/ui", headers={"Authorization": "Bearer guess"}).status_code == 401
    assert TestClient(app, cookies={"skillgraft_ui": "forged"}).get("/ui").status_code == 401
    assert client.get("/ui", headers={"Authorization": "Bearer s3cret"}).status_code == 200
    signed = client.post("/ui/login", data={"key": "s3cret"}, follow_redirects=False)
    assert signed.status_code == 303 and "HttpOnly" in signed.headers["set-cookie"] and "s3cret" not in signed.headers["set-cookie"]
    assert client.get("/ui/decisions").status_code == 200  # the cookie is kept by the client
    client.post("/ui/logout")
    assert client.get("/ui").status_code == 401


def test_signing_out_revokes_the_cookie_and_an_odd_form_is_a_400(answered):
    """Before: one static token per process (a copied cookie outlived its sign-out) and a form
    of more than four fields was a 500."""
    app = FastAPI()
    mount_inspector(app, LocalSource(answered), api_key="s3cret")
    client = TestClient(app)
    client.post("/ui/login", data={"key": "s3cret"}, follow_redirects=False)
    copied = client.cookies.get("skillgraft_ui")
    other = TestClient(app)
    other.post("/ui/login", data={"key": "s3cret"}, follow_redirects=False)
    assert copied and copied != other.cookies.get("skillgraft_ui")  # one token per sign-in
    assert TestClient(app, cookies={"skillgraft_ui": copied}).get("/ui").status_code == 200
    client.post("/ui/logout")
    assert TestClient(app, cookies={"skillgraft_ui": copied}).get("/ui").status_code == 401
    assert other.get("/ui").status_code == 200  # another session stands
    many = client.post("/ui/login", content="&".join(f"f{i}=x" for i in range(9)),
                       headers={"content-type": "application/x-www-form-urlencoded"})
    assert many.status_code == 400


def test_no_redirect_names_a_foreign_host(answered):
    from skillgraft.gateway.app import create_app
    from skillgraft.gateway.service import Gateway
    from skillgraft.testing import FakePool

    gateway = Gateway(answered.store.home, FakePool(answered.engine), embedder=answered.router.embedder)
    try:
        client = TestClient(create_app(gateway, api_key="s3cret"), base_url="http://evil.example")
        for path in ("/ui/", "/ui/login"):
            response = client.get(path, headers={"Authorization": "Bearer s3cret"}, follow_redirects=False)
            assert response.status_code in (303, 307) and response.headers["location"] == "/ui", response.headers
            assert "evil" not in response.headers["location"]
    finally:
        gateway.close()


def test_only_inspector_paths_guard_themselves():
    assert guards_itself("/ui") and guards_itself("/ui/skills/x")
    assert not guards_itself("/uix") and not guards_itself("/v1/ui") and not guards_itself("/")


def test_decision_stats_count_bucket_and_take_percentiles(fake_memory):
    for i, (decision, seconds) in enumerate([("graft", 1.0), ("graft", 3.0), ("exact", 0.01), ("fallback", 2.0), ("odd", None)]):
        fake_memory.store.log(LedgerEvent("generate", decision=decision, prefill_tokens_avoided=100 if decision == "graft" else 0,
                                          timings={} if seconds is None else {"total_s": seconds}))
    fake_memory.store.log(LedgerEvent("recall", decision="abstain"))
    stats = views.decision_stats(fake_memory.store)
    assert stats.answers == 5 and stats.totals == {"graft": 2, "exact": 1, "fallback": 1, "odd": 1}
    assert stats.decisions == ["exact", "graft", "fallback", "odd"]
    assert stats.avoided_total == 200 and sum(b.avoided for b in stats.buckets) == 200
    assert sum(sum(b.counts.values()) for b in stats.buckets) == 5 and len(stats.buckets) <= views.MAX_BUCKETS
    assert stats.latency["graft"]["p50"] == pytest.approx(2.0) and "odd" not in stats.latency
    assert views.decision_stats(fake_memory.store, window=2).answers == 2
    empty = views.decision_stats(type(fake_memory.store)(fake_memory.store.home.parent / "empty"))
    assert empty.answers == 0 and empty.buckets == []


def test_plot_scales_and_escapes():
    assert [plots.nice_max(v) for v in (0, 0.3, 1, 7, 12, 4_100)] == [1.0, 0.5, 1, 10, 20, 5_000]
    assert [plots.intervals(top) for top in (1, 2, 2.5, 5, 10, 50, 0.25)] == [4, 4, 5, 5, 4, 5, 5]  # round steps
    svg = plots.stacked_bars("t", ["<b>"], [{"x&y": 3}], [plots.Series("x&y", "#000")])
    assert "<b>" not in svg and "&lt;b&gt;" in svg and "x&amp;y" in svg and svg.count('class="bar"') == 1
    assert plots.score_bars("s", [("a", -0.2, False), ("b", 1.7, True)], 0.3).count('class="bar"') == 2


def test_ui_needs_a_store_and_loopback(runner, tmp_path, fake_stocked):
    from skillgraft.cli.main import cli

    missing = runner.invoke(cli, ["ui", "--home", str(tmp_path / "nothing")])
    assert missing.exit_code == 1 and "no skillgraft store" in missing.output
    assert not (tmp_path / "nothing").exists()
    wide = runner.invoke(cli, ["ui", "--home", str(fake_stocked.store.home), "--host", "0.0.0.0"])
    assert wide.exit_code == 1 and "loopback only" in wide.output


def test_a_block_of_an_imported_skill_shows_the_skill_its_frontmatter_parts_and_files(fake_memory, tmp_path):
    from tests.unit.skill_folders import pdf_skill

    fake_memory.skills.import_folders(pdf_skill(tmp_path / "skills"))
    skill = fake_memory.skills.get("pdf")
    client = TestClient(inspector_app(LocalSource(fake_memory), allowed_hosts=["testserver"]))
    page = client.get(f"/ui/skills/{skill.parts[1].block_id}")
    assert page.status_code == 200
    section = page.text.split('<section id="imported-skill">')[1].split("</section>")[0]
    assert "Apache-2.0" in section and "allowed-tools" in section and "docs-team" in section
    links = re.findall(r'<a href="/ui/skills/([0-9a-f]{16})">', section)
    assert links == [p.block_id for p in skill.parts]
    assert "references/forms.md" in section and "scripts/fill.py" in section and "never run" in section
    manual = fake_memory.add_manual("plain", "A plain manual about baking bread at home.")
    assert 'id="imported-skill"' not in client.get(f"/ui/skills/{manual.id}").text


def test_an_imported_skills_page_shows_its_trigger_scores_as_skills_eval_gives_them(fake_memory, tmp_path):
    import json

    from skillgraft.skills.trigger_evals import is_held_out
    from tests.unit.skill_folders import git_skill, pdf_skill

    asks = [f"squash git commits with interactive rebase {w}" for w in ("now", "today", "please", "quickly", "again",
                                                                         "safely", "first", "later", "here", "soon")]
    held = [q for q in asks if is_held_out(q)]
    assert len(held) >= 2
    wrong = held[0]  # labelled a query that must not trigger: the router sends it here anyway
    queries = [{"query": q, "should_trigger": q != wrong} for q in asks]
    git_skill(tmp_path / "skills", files={"eval_queries.json": json.dumps(queries)})
    pdf_skill(tmp_path / "skills")
    fake_memory.skills.import_folders(tmp_path / "skills")
    [score] = fake_memory.skills.eval_triggers()
    client = TestClient(inspector_app(LocalSource(fake_memory), allowed_hosts=["testserver"]))
    before = len(fake_memory.store.ledger_rows(limit=1000))
    page = client.get(f"/ui/skills/{fake_memory.skills.get('git-squash').parts[0].block_id}").text
    triggers = page.split('id="skill-triggers"')[1].split("</dl>")[0]
    assert f"{score.precision:.2f}" in triggers and f"{score.recall:.2f}" in triggers
    assert f"{score.positives} positive, {score.negatives} negative" in triggers
    misses = page.split('id="skill-trigger-misses"')[1].split("</table>")[0]
    assert wrong in misses and "git-squash" in misses
    assert len(fake_memory.store.ledger_rows(limit=1000)) == before  # routed, nothing logged
    pdf_page = client.get(f"/ui/skills/{fake_memory.skills.get('pdf').parts[0].block_id}").text
    assert 'id="skill-triggers"' not in pdf_page and "No held-out queries" in pdf_page
