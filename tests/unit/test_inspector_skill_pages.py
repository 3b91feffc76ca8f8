"""The inspector's Skills page over a few hundred imported skills, on the fakes: one row per skill
(an imported skill's parts folded under it), real sizes (text parts by their characters where no
model is loaded, "text only" for bytes), and paged, so its HTML is bounded whatever the store holds."""

from __future__ import annotations

import re

import pytest

from tests.required import need

need("fastapi", "skillgraft[serve]")
need("jinja2", "skillgraft[serve]")

from starlette.testclient import TestClient  # noqa: E402

from skillgraft.inspector import LocalSource, skill_list  # noqa: E402
from skillgraft.inspector.local import inspector_app  # noqa: E402
from skillgraft.memory import SkillMemory  # noqa: E402
from skillgraft.testing import FakeEmbedder, FakeEngine  # noqa: E402

from .conftest import ANSWER, GIT_MANUAL, QUESTION  # noqa: E402
from .skill_folders import write_skill  # noqa: E402

N_SKILLS = 240
ROW = re.compile(r'<tr data-id="([^"]+)">')
PAGE_BYTES = 60_000  # a page of 50 rows, whatever the store holds


def _body(i: int) -> str:
    return (f"# Tool {i}\n\nUse tool {i} for task {i}: read the input, check it, write the output.\n\n"
            f"## Options of tool {i}\n\nPass --fast to tool {i} when the input is small.\n")


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """``N_SKILLS`` imported skills of two parts each (the body and a resource), two
    captured manuals and a solution: the home, and the default part ids of each skill."""
    root = tmp_path_factory.mktemp("many")
    for i in range(N_SKILLS):
        write_skill(root / "skills", f"tool-{i:03d}", f"Run tool {i} on its inputs.", _body(i),
                    files={"references/notes.md": f"# Notes\n\nTool {i} keeps its notes here.\n"})
    home = root / "store"
    with SkillMemory(home, engine=FakeEngine(), embedder=FakeEmbedder()) as memory:
        report = memory.skills.import_folders(root / "skills")
        assert len(report.imported) == N_SKILLS and not report.skipped
        memory.add_manual("git-squash", GIT_MANUAL, examples=["how do I squash my last commits?"])
        memory.add_manual("kettle", "Skill manual: descaling a kettle. Boil water with citric acid, rinse twice.")
        memory.add_solution(QUESTION, ANSWER, method="17 * 23", verifier="exact", expected=ANSWER)
        parts = {s.name: [p.block_id for p in s.parts] for s in memory.skills.list()}
        counted = {s.name: (s.n_tokens, s.n_chars) for s in memory.skills.list()}  # an engine loaded: counted
        blocks = {b.name: b for b in memory.blocks.list() if memory.skills.of_block(b.id) is None}
        assert len(blocks) == 3
    return home, parts, counted, blocks


@pytest.fixture
def no_model(store, monkeypatch):
    """A client over the store with no engine: making one fails the test."""
    monkeypatch.setattr(SkillMemory, "engine", property(lambda self: pytest.fail("the Skills page loaded a model")))
    with SkillMemory(store[0], embedder=FakeEmbedder()) as memory:
        yield TestClient(inspector_app(LocalSource(memory), allowed_hosts=["testserver"]))


def _cells(page: str, row_id: str) -> list[str]:
    row = page.split(f'<tr data-id="{row_id}">')[1].split("</tr>")[0]
    return re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)


def test_one_row_per_skill_paged_and_bounded(store, no_model):
    home, parts, _, blocks = store
    total = N_SKILLS + len(blocks)
    first = no_model.get("/ui")
    assert first.status_code == 200
    assert len(first.content) < PAGE_BYTES, len(first.content)
    assert len(ROW.findall(first.text)) == skill_list.PAGE_SIZE
    assert f"1–50 of {total} shown; {total} of {total} skills." in first.text
    assert 'rel="next"' in first.text and 'rel="prev"' not in first.text
    seen, page, pages = [], first, 0
    while True:
        pages += 1
        seen += ROW.findall(page.text)
        following = re.search(r'<a rel="next" href="([^"]+)"', page.text)
        if not following:
            break
        page = no_model.get(following.group(1).replace("&amp;", "&"))
        assert page.status_code == 200 and len(page.content) < PAGE_BYTES
    assert pages == -(-total // skill_list.PAGE_SIZE) and 'rel="prev"' in page.text
    expected = [ids[0] for ids in parts.values()] + [block.id for block in blocks.values()]
    assert sorted(seen) == sorted(expected)  # every skill once, never a part on its own
    last = no_model.get("/ui", params={"page": "999"})  # past the end: the last page
    assert ROW.findall(last.text) == ROW.findall(page.text)


def test_sizes_are_real_and_text_says_so(store, no_model):
    _, parts, counted, blocks = store
    page = no_model.get("/ui", params={"q": "tool-007"}).text
    kind, name, tokens, stored, *_ = _cells(page, parts["tool-007"][0])
    assert "skill" in kind and f"v1, {len(parts['tool-007'])} parts" in name
    assert f"{counted['tool-007'][1]:,} chars" in tokens and "text only" in stored
    manual = blocks["git-squash"]
    page = no_model.get("/ui", params={"q": "git-squash"}).text
    _, _, tokens, stored, *_ = _cells(page, manual.id)
    assert manual.n_tokens > 0 and manual.n_bytes > 0 and tokens.strip() == f"{manual.n_tokens:,}"
    assert stored.strip() not in ("0 B", "—", "") and "text only" not in stored


def test_a_loaded_model_counts_the_tokens_of_the_rows_shown(store):
    home, parts, counted, _ = store
    with SkillMemory(home, engine=FakeEngine(), embedder=FakeEmbedder()) as memory:
        client = TestClient(inspector_app(LocalSource(memory), allowed_hosts=["testserver"]))
        page = client.get("/ui", params={"q": "tool-042"}).text
    _, _, tokens, _, *_ = _cells(page, parts["tool-042"][0])
    assert counted["tool-042"][0] > 0 and tokens.strip() == f"{counted['tool-042'][0]:,}"


def test_page_size_sort_and_refusals(store, no_model):
    _, parts, counted, _ = store
    big = no_model.get("/ui", params={"size": str(skill_list.MAX_PAGE_SIZE), "sort": "name"})
    assert len(ROW.findall(big.text)) == skill_list.MAX_PAGE_SIZE
    assert len(big.content) < PAGE_BYTES * skill_list.MAX_PAGE_SIZE // skill_list.PAGE_SIZE
    following = re.search(r'<a rel="next" href="([^"]+)"', big.text).group(1)
    assert "size=200" in following and "sort=name" in following and "page=2" in following
    by_size = no_model.get("/ui", params={"sort": "tokens", "order": "desc", "q": "tool-"}).text
    shown = ROW.findall(by_size)
    biggest = sorted(parts, key=lambda name: counted[name][1], reverse=True)
    assert shown[0] == parts[biggest[0]][0]  # uncounted text: by its size
    for params in ({"page": "0"}, {"page": "x"}, {"size": "0"}, {"size": str(skill_list.MAX_PAGE_SIZE + 1)},
                   {"page": "1" * 40}):
        refused = no_model.get("/ui", params=params)
        assert refused.status_code == 400, params


def test_a_text_parts_page_says_it_stores_no_state(store, no_model):
    _, parts, _, blocks = store
    page = no_model.get(f"/ui/skills/{parts['tool-003'][0]}").text
    facts = page.split('<dl class="facts">')[1].split("</dl>")[0]
    assert "not counted (no model is loaded)" in facts and "characters of text" in facts and "text only" in facts
    manual = blocks["kettle"]
    facts = no_model.get(f"/ui/skills/{manual.id}").text.split('<dl class="facts">')[1].split("</dl>")[0]
    assert f"<dd>{manual.n_tokens:,}</dd>" in facts and "text only" not in facts


def test_the_gateways_skills_page_counts_text_with_its_tokenizer(store):
    from skillgraft.gateway.app import create_app
    from skillgraft.gateway.service import Gateway
    from skillgraft.testing import FakePool

    home, parts, counted, _ = store
    gateway = Gateway(home, FakePool(FakeEngine()), embedder=FakeEmbedder())
    try:
        with TestClient(create_app(gateway), base_url="http://127.0.0.1") as client:
            page = client.get("/ui", params={"q": "tool-101"})
            assert page.status_code == 200 and len(ROW.findall(page.text)) == 1
            _, _, tokens, stored, *_ = _cells(page.text, parts["tool-101"][0])
            assert tokens.strip() == f"{counted['tool-101'][0]:,}" and "text only" in stored
            assert len(client.get("/ui").content) < PAGE_BYTES
    finally:
        gateway.close()
