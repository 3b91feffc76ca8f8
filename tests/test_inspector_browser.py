"""The inspector in a real headless Chromium (Debian's ``chromium``, driven by Playwright) against
a real gateway over a real llama-server, and against ``skillgraft ui`` on a local store.

The pages must load without a console error, show the catalog, route a typed query to the
router's decision, draw their plots, refuse a bad key at the login form, and write nothing.
Screenshots of the main views are taken every run (into a temporary folder) and written to
docs/img/ with SKILLGRAFT_DOCS_SCREENSHOTS=1. ``make test`` installs chromium; a missing
browser fails under SKILLGRAFT_REQUIRE_BROWSER instead of skipping.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path
from urllib.parse import quote_plus

import httpx
import pytest

from tests.conftest import GIT_MANUAL, SOURDOUGH_MANUAL
from tests.required import require_llama_server
from tests.test_gateway import IN_DOMAIN, OFF_TOPIC

ROOT = Path(__file__).resolve().parent.parent
DOCS_IMG = ROOT / "docs" / "img"
SHOTS = Path(os.environ.get("TMPDIR", "/tmp")) / f"skillgraft-inspector-shots-{os.getpid()}"
CHROMIUM = os.environ.get("SKILLGRAFT_CHROMIUM", "/usr/bin/chromium")
KEY = "inspector-test-key"
QUESTION = "What is 17 * 23?"
PROOF = "How long should sourdough proof in the fridge?"
VIEWPORT = {"width": 1200, "height": 820}
LOAD_TIMEOUT_MS = 180_000  # the first routed query loads the embedder in a fresh process

pytestmark = pytest.mark.slow


def _require_browser():
    """Playwright's API and Debian's chromium, or a skip (a failure under SKILLGRAFT_REQUIRE_BROWSER)."""
    missing = None
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        missing = "playwright is not installed (pip install 'skillgraft[dev]')"
    if missing is None and not Path(CHROMIUM).is_file():
        missing = f"no browser at {CHROMIUM} (apt-get install chromium, or set SKILLGRAFT_CHROMIUM)"
    if missing:
        if os.environ.get("SKILLGRAFT_REQUIRE_BROWSER"):
            pytest.fail(missing)
        pytest.skip(missing)
    return sync_playwright


@pytest.fixture(scope="module")
def browser():
    sync_playwright = _require_browser()
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture(scope="module")
def store(tmp_path_factory, smollm2, embedder):
    """Two manuals and a verified solution, and four real answers in the ledger (exact, graft, abstain)."""
    from skillgraft.memory import SkillMemory

    home = tmp_path_factory.mktemp("inspector") / "store"
    with SkillMemory(home, engine=smollm2, embedder=embedder) as memory:
        memory.add_manual("git-squash", GIT_MANUAL, examples=["how do I squash my last commits?", "combine commits into one"],
                          description="Squash commits with an interactive rebase")
        memory.add_manual("sourdough", SOURDOUGH_MANUAL, examples=["how do I bake sourdough bread?", "my loaf is too dense"])
        memory.add_solution(QUESTION, "391", method="print(17 * 23)", verifier="python")
        for query in (QUESTION, IN_DOMAIN, PROOF, OFF_TOPIC):
            memory.generate(query, max_tokens=12)
    return home


def _catalog_state(home: Path) -> tuple:
    """What a write would change: the ledger's rows, the catalog's version, the block files."""
    from skillgraft.store.block_store import BlockStore

    store = BlockStore(home, read_only=True)
    try:
        return store.ledger_counts(), store.catalog_version(), sorted(p.name for p in store.blocks_dir.iterdir())
    finally:
        store.close()


def _catalog(home: Path) -> list:
    from skillgraft.store.block_store import BlockStore

    store = BlockStore(home, read_only=True)
    try:
        return store.blocks()
    finally:
        store.close()


class Console:
    """Everything a page reports as wrong: console errors, uncaught errors, failed requests, 4xx/5xx."""

    def __init__(self, page) -> None:
        self.problems: list[str] = []
        page.on("console", lambda m: m.type == "error" and self.problems.append(f"console: {m.text}"))
        page.on("pageerror", lambda e: self.problems.append(f"page error: {e}"))
        page.on("requestfailed", lambda r: self.problems.append(f"request failed: {r.url} {r.failure}"))
        page.on("response", lambda r: r.status >= 400 and self.problems.append(f"HTTP {r.status}: {r.url}"))

    def take(self) -> list[str]:
        taken, self.problems[:] = list(self.problems), []
        return taken


def _shot(page, name: str) -> None:
    """A screenshot of the page: into docs/img/ when asked to refresh the docs' pictures."""
    folder = DOCS_IMG if os.environ.get("SKILLGRAFT_DOCS_SCREENSHOTS") == "1" else SHOTS
    folder.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(folder / f"inspector_{name}.png"), full_page=True)


def _plots_drawn(page) -> int:
    """How many plots hold at least one bar the browser laid out with a size."""
    drawn = 0
    for plot in page.locator("svg.plot").all():
        boxes = [bar.bounding_box() for bar in plot.locator("rect.bar").all()]
        drawn += any(box and box["width"] > 0 and box["height"] > 0 for box in boxes)
    return drawn


@pytest.fixture(scope="module")
def gateway(store, tmp_path_factory):
    from skillgraft.bench.serve import GatewayProcess

    require_llama_server()
    process = GatewayProcess(store, servers=1, model=None, log_path=tmp_path_factory.mktemp("gwlog") / "gateway.log",
                             extra_args=["--api-key", KEY])
    try:
        yield process
    finally:
        assert process.stop() == 0
        for pid in process.server_pids:
            with pytest.raises(ProcessLookupError):
                os.kill(pid, 0)


def test_the_gateway_inspector_in_a_browser(gateway, store, browser, smollm2, embedder):
    from skillgraft.memory import SkillMemory

    auth = {"Authorization": f"Bearer {KEY}"}
    model = httpx.get(gateway.url + "/v1/models", headers=auth, trust_env=False).json()["data"][0]["id"]
    for query in (QUESTION, IN_DOMAIN, OFF_TOPIC):  # answers through the gateway's own door
        body = {"model": model, "messages": [{"role": "user", "content": query}], "max_tokens": 8, "temperature": 0}
        assert httpx.post(gateway.url + "/v1/chat/completions", json=body, headers=auth, trust_env=False, timeout=300).status_code == 200
    before = _catalog_state(store)
    blocks = _catalog(store)

    page = browser.new_page(viewport=VIEWPORT)
    console = Console(page)
    assert page.goto(gateway.url + "/ui").status == 401
    assert page.locator("input[name=key]").is_visible()
    page.fill("input[name=key]", "not-the-key")
    page.click("button[type=submit]")
    assert page.locator("#refused").is_visible() and page.locator("#skills").count() == 0
    refused = console.take()
    assert refused and all("401" in line for line in refused), refused  # the refusals, and nothing else

    page.fill("input[name=key]", KEY)
    page.click("button[type=submit]")
    page.wait_for_selector("#skills")
    shown = page.locator("#skills tbody tr").evaluate_all("rows => rows.map(r => r.dataset.id)")
    assert shown == [block.id for block in blocks]
    names = page.locator("#skills a.skill").all_inner_texts()
    assert names == [block.name for block in blocks]
    _shot(page, "skills")

    page.fill("#skill-search", "sourdough")
    page.press("#skill-search", "Enter")
    page.wait_for_url(re.compile(r"/ui\?q=sourdough&"))
    assert page.locator("#skills a.skill").all_inner_texts() == ["sourdough"]

    page.click("nav >> text=Skills")
    page.click("#skills a.skill >> text=git-squash")
    page.wait_for_selector("#skill-name")
    assert "git-squash" in page.inner_text("#skill-name") and "git rebase -i HEAD~N" in page.inner_text("#text")
    assert "combine commits into one" in page.inner_text("#examples")
    assert page.locator("#history tbody tr").count() >= 1
    _shot(page, "skill")

    page.click("nav >> text=Decisions")
    page.wait_for_selector("#plot-decisions svg")
    assert page.locator("svg.plot").count() == 3 and _plots_drawn(page) == 3
    for decision in ("exact", "graft", "abstain"):
        assert page.locator(f"#plot-decisions rect.bar[data-series={decision}]").count() >= 1
    _shot(page, "decisions")

    with SkillMemory(store, engine=smollm2, embedder=embedder) as memory:
        expected = memory.recall(PROOF, log=False)
    page.click("nav >> text=Try a query")
    page.fill("#query", PROOF)
    page.press("#query", "Enter")
    page.wait_for_selector("#decision-value")
    assert page.inner_text("#decision-value") == expected.decision == "graft"
    assert expected.block.name in page.inner_text("#decision") and float(page.inner_text("#score")) == pytest.approx(expected.score, abs=1e-3)
    assert page.locator("#plot-candidates line.threshold").count() == 1 and _plots_drawn(page) == 1
    _shot(page, "query")

    page.click("nav >> text=Health")
    assert f"All {len(blocks)} blocks check out" in page.inner_text("#check-status")
    page.click("nav >> text=Runtime")
    assert str(gateway.server_pids[0]) in page.inner_text("#servers") and "0 of 1 leased" in page.inner_text("#slots")
    assert console.take() == []
    page.close()

    assert httpx.get(gateway.url + "/ui", headers={"Authorization": "Bearer wrong"}, trust_env=False).status_code == 401
    assert httpx.get(gateway.url + "/v1/skills", trust_env=False).status_code == 401  # the API keeps its own check
    assert _catalog_state(store) == before, "browsing the inspector wrote to the store"


def _ui_process(home: Path, log: Path):
    with open(log, "wb") as errors:
        process = subprocess.Popen(
            [sys.executable, "-m", "skillgraft", "ui", "--home", str(home), "--port", "0"],
            stdout=subprocess.PIPE, stderr=errors, start_new_session=True,
            env={**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"},
        )
    line: dict = {}
    reader = threading.Thread(target=lambda: line.update(json.loads(process.stdout.readline() or "{}")), daemon=True)
    reader.start()
    reader.join(120)
    return process, line.get("url")


def test_skillgraft_ui_shows_a_local_store_read_only(store, browser, tmp_path):
    before = _catalog_state(store)
    process, url = _ui_process(store, tmp_path / "ui.log")
    try:
        assert url and url.startswith("http://127.0.0.1:"), (tmp_path / "ui.log").read_text()
        page = browser.new_page(viewport=VIEWPORT)
        console = Console(page)
        page.goto(url)
        assert page.locator("#skills tbody tr").count() == len(_catalog(store))
        assert page.locator("form.signout").count() == 0  # no key: loopback only
        page.goto(f"{url}/route?q={quote_plus(OFF_TOPIC)}", timeout=LOAD_TIMEOUT_MS)
        assert page.inner_text("#decision-value") == "abstain"
        page.goto(url + "/decisions")
        assert _plots_drawn(page) == 3
        assert console.take() == []
        page.close()
        foreign = httpx.get(url, headers={"Host": "attacker.example"}, trust_env=False)
        assert foreign.status_code == 400  # a DNS-rebound page cannot read it
    finally:
        if process.poll() is None:
            os.kill(process.pid, signal.SIGTERM)
        code = process.wait(30)
        process.stdout.close()
        assert code == 0
    assert _catalog_state(store) == before, "skillgraft ui wrote to the store"
