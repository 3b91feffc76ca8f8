"""An import's keys on the fakes: each text embedded once, a stored text not again, the rows
the router makes part by part, progress within a long skill."""

from __future__ import annotations

import numpy as np

from skillgraft.skills import keys as skill_keys
from skillgraft.routing.embedder import length_batches

from .skill_folders import FORMS, pdf_skill, write_skill


def _key_texts(memory) -> set:
    return {k["text"] for p in memory.skills.get("pdf").parts for k in memory.store.routing_keys(p.block_id)}


def test_each_distinct_key_text_is_embedded_once(fake_memory, fake_embedder, tmp_path):
    fake_memory.skills.import_folders(pdf_skill(tmp_path))
    texts = _key_texts(fake_memory)
    assert fake_embedder.encoded == len(texts)  # the name and description, on every body part, once


def test_the_rows_are_the_routers_part_by_part(fake_memory, tmp_path):
    folder = pdf_skill(tmp_path)
    fake_memory.skills.import_folders(folder)
    for part in fake_memory.skills.get("pdf").parts:
        stored = fake_memory.store.routing_keys(part.block_id)
        again = fake_memory.router.key_rows([(k["kind"], [k["text"]]) for k in stored])
        assert [(k["kind"], k["text"], bytes(k["vector"])) for k in stored] == \
            [(r["kind"], r["text"], r["vector"]) for r in again]


def test_unchanged_folders_embed_nothing_and_a_changed_one_only_its_new_texts(fake_memory, fake_embedder, tmp_path):
    folder = pdf_skill(tmp_path)
    fake_memory.skills.import_folders(folder)
    before, encoded = _key_texts(fake_memory), fake_embedder.encoded
    report = fake_memory.skills.import_folders(folder)
    assert [u["name"] for u in report.unchanged] == ["pdf"] and fake_embedder.encoded == encoded
    skill_md = folder / "SKILL.md"
    skill_md.write_text(skill_md.read_text().replace("description: Read, fill", "description: Read, sign, fill"))
    report = fake_memory.skills.import_folders(folder)
    assert report.imported[0].version == 2
    after = _key_texts(fake_memory)
    new = after - before
    assert new and after & before and fake_embedder.encoded - encoded == len(new)  # the resource's keys kept theirs


def test_a_long_skill_reports_progress_as_its_keys_are_embedded(fake_memory, tmp_path, monkeypatch):
    monkeypatch.setattr(skill_keys, "CHUNK", 4)
    body = "\n\n".join(f"## Step {n}\n\nDo thing number {n} with care. Check it twice." for n in range(12))
    write_skill(tmp_path, "long-skill", "A skill of many steps.", body)
    pdf_skill(tmp_path)
    seen = []
    fake_memory.skills.import_folders(tmp_path, progress=lambda done, total: seen.append((done, total)), keys="sentences")
    fractions = [done for done, _ in seen if done != int(done)]
    assert seen[0] == (0, 2) and seen[-1] == (2, 2) and len(fractions) >= 3
    assert all(b >= a for (a, _), (b, _) in zip(seen, seen[1:]))  # never backwards


def test_length_batches_sort_by_length_and_bound_rows_and_tokens():
    lengths = [5, 300, 7, 256, 6, 100, 100, 100]
    batches = length_batches(lengths, most_rows=3, most_tokens=256)
    assert sorted(i for rows in batches for i in rows) == list(range(len(lengths)))
    assert all(len(rows) <= 3 and (len(rows) == 1 or len(rows) * max(lengths[i] for i in rows) <= 256)
               for rows in batches)
    flat = [lengths[i] for rows in batches for i in rows]
    assert flat == sorted(flat) and np.array_equal(batches[0], [0, 4, 2])


def test_a_bulk_for_two_workers_is_cut_in_two_where_the_padded_tokens_are_most_even():
    lengths = [3, 40, 5, 60, 4, 8]  # one batch by the bounds: the second worker would wait
    assert length_batches(lengths) == [[0, 4, 2, 5, 1, 3]]
    first, second = length_batches(lengths, least=2)
    assert first + second == [0, 4, 2, 5, 1, 3]  # still sorted by length, each text once
    assert (first, second) == ([0, 4, 2, 5], [1, 3])  # 4 x 8 = 32 padded tokens beside 2 x 60: at most 120, not 5 x 40
    assert length_batches([7], least=2) == [[0]] and length_batches([], least=2) == []
    assert len(length_batches([5] * 70, least=2)) == 3  # the bounds already give enough
