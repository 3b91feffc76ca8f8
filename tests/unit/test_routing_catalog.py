"""Skill-first routing: lexical coverage, which files are routed, which part a skill gives,
and the catalog benchmark's inputs."""

import json

import numpy as np
import pytest

from skillgraft.skills.folder import read_skill_folder
from skillgraft.errors import InputError
from skillgraft.routing.lexical import LexicalIndex, terms
from skillgraft.routing.parts import REFERENCE_MARGIN, PartCandidate, choose_part, is_instructional
from skillgraft.routing.ranking import lead_sentence

from .skill_folders import pdf_skill


def test_terms_drop_function_words_and_meet_across_suffixes():
    assert terms("Please help me with the Tests") == ["test"]
    assert terms("testing tested") == ["test", "test"]
    assert terms("queries") == ["query"]


def test_coverage_is_the_share_of_the_query_a_document_holds():
    index = LexicalIndex.build({"pdf": ["pdf", "Read, fill and merge PDF forms"], "git": ["git squash", "rebase commits"]})
    full, none = index.coverage("merge pdf forms")
    assert 0.9 < full <= 1.0 and none == 0.0
    partial = index.coverage("merge pdf forms in a spreadsheet")[0]  # a word no document holds weighs against
    assert 0 < partial < full
    assert not index.coverage("").any() and not index.coverage("the and of").any()
    assert np.all(index.coverage("pdf " * 50_000) <= 1.0)  # a long query is bounded, never slow
    assert LexicalIndex.build({}).coverage("pdf").shape == (0,)


def test_a_name_written_as_one_word_meets_it_written_as_two():
    index = LexicalIndex.build({"seat": ["seat-geek-automation", "Automate Seat Geek tasks"],
                                "meta": ["metaads-automation", "Automate Metaads tasks"],
                                "ads": ["paid-ads", "Plan paid ads campaigns"]})
    one_word = index.coverage("find concerts on SeatGeek")
    assert one_word[0] > 0 and not one_word[1:].any()
    two_words = index.coverage("pause campaigns in Meta Ads")
    assert two_words[1] > two_words[2] > 0
    assert index.coverage("seat geek tickets")[0] == pytest.approx(index.coverage("seat geek tickets seat")[0])
    assert terms("seat geek") == ["seat", "geek"]  # the join adds evidence, not words to the query


def test_a_skills_lead_key_is_its_descriptions_first_sentence():
    assert lead_sentence("Read and fill PDF forms. Use it when a PDF is named.") == "Read and fill PDF forms."
    assert lead_sentence("Framework (OSS). Entry point for Expo tasks.") == "Framework (OSS)."
    assert lead_sentence("One sentence without a stop") == "One sentence without a stop"
    assert lead_sentence("\n\n  Starts after blank lines\nthen more") == "Starts after blank lines"


@pytest.mark.parametrize("path", ["LICENSE.txt", "LICENSE", "references/COPYING", "NOTICE.md", "licence.md",
                                  "CHANGELOG.md", "AUTHORS", "LICENSE-MIT", "LICENSE.Apache-2.0.txt"])
def test_licences_and_bookkeeping_are_not_routed(path):
    assert not is_instructional(path)


@pytest.mark.parametrize("path", ["references/forms.md", "reference.md", "license_checker_guide.md", "notes.txt"])
def test_instructional_files_are_routed(path):
    assert is_instructional(path)


def test_the_body_wins_unless_a_reference_fits_clearly_better():
    body = PartCandidate("b0", "section", 0, 0.40)
    later = PartCandidate("b1", "section", 1, 0.45)
    close = PartCandidate("r", "resource", 2, 0.40 + REFERENCE_MARGIN / 2)
    assert choose_part([body, close]) == "b0"
    assert choose_part([body, later, close]) == "b1"
    clearly = PartCandidate("r", "resource", 2, 0.40 + REFERENCE_MARGIN + 0.01)
    assert choose_part([body, clearly]) == "r"
    assert choose_part([PartCandidate("b0", "section", 0, None), PartCandidate("b1", "section", 1, None)]) == "b0"
    assert choose_part([]) is None


def test_a_licence_is_kept_with_the_skill_but_never_routed(fake_memory, tmp_path):
    folder = pdf_skill(tmp_path)
    (folder / "LICENSE.txt").write_text("MIT License\n\nPermission is hereby granted, free of charge, to any person.\n")
    fake_memory.skills.import_folders(folder)
    skill = fake_memory.skills.get("pdf")
    assert [p.title for p in skill.parts if p.role == "resource"] == ["references/forms.md"]
    stored = {f["path"] for f in fake_memory.store.skill_files("pdf", skill.version)}
    assert "LICENSE.txt" in stored
    recall = fake_memory.route("Permission is hereby granted, free of charge, to any person")
    assert recall.block_id is None or fake_memory.store.get(recall.block_id).name in {"pdf", "pdf/references/forms.md"}


def test_a_skill_is_found_by_its_words_and_gives_its_body(fake_memory, tmp_path):
    pdf_skill(tmp_path)
    fake_memory.skills.import_folders(tmp_path)
    (ranking,) = fake_memory.router.rankings(["fill and merge pdf forms"])
    assert fake_memory.skills.of_block(ranking.scored[0][0]) == "pdf"


def test_the_catalog_file_is_checked(tmp_path):
    from skillgraft.bench.route_catalog import read_catalog

    good = {"name": "a-skill", "description": "Does a thing.", "headings": ["# Use"], "first_lines": ["First."]}
    path = tmp_path / "c.jsonl"
    path.write_text(json.dumps(good) + "\n\n")
    assert read_catalog(path) == [good]
    for bad in ("{", json.dumps({"name": "x"}), json.dumps({**good, "headings": "# not a list"}), ""):
        path.write_text(bad)
        with pytest.raises(InputError):
            read_catalog(path)
    with pytest.raises(InputError):
        read_catalog(tmp_path / "missing.jsonl")


def test_catalog_lines_become_skill_folders_the_reader_takes(tmp_path):
    from skillgraft.bench.route_catalog import write_skill_folders

    rows = [{"name": "quote-skill", "description": 'Says "hi": twice.\nThen stops.', "headings": ["# Use", "## More"],
             "first_lines": ["Line one."]}]
    write_skill_folders(rows, tmp_path)
    skill = read_skill_folder(tmp_path / "00000")
    assert skill.name == "quote-skill" and skill.description.startswith('Says "hi": twice.')
    assert "## More" in skill.body


def test_the_query_file_is_checked(tmp_path):
    from skillgraft.bench.route_catalog import read_route_queries

    path = tmp_path / "q.json"
    path.write_text(json.dumps({"in_scope": {"calibrate": [["q", "s"]], "test": []},
                                "off_topic": {"calibrate": ["hi"], "test": ["yo"]}}))
    assert read_route_queries(path)["in_scope"]["calibrate"] == [("q", "s")]
    path.write_text(json.dumps({"in_scope": []}))
    with pytest.raises(InputError):
        read_route_queries(path)


def test_the_default_threshold_follows_the_encoders_model_however_it_is_served():
    from skillgraft.routing.calibration import DEFAULT_THRESHOLD, ENCODER_THRESHOLDS, encoder_threshold

    minilm = ENCODER_THRESHOLDS["all-minilm-l6-v2"]
    assert encoder_threshold("all-MiniLM-L6-v2") == encoder_threshold("openai:all-minilm-l6-v2") == minilm
    assert encoder_threshold("/models/all-MiniLM-L6-v2/") == minilm
    assert encoder_threshold("all-mpnet-base-v2") == encoder_threshold("fake") == DEFAULT_THRESHOLD


def test_copies_of_a_catalog_take_their_originals_vectors_moved_a_small_step(fake_embedder):
    from skillgraft.bench.route_catalog import COPY_STEP, CopyingEncoder, copied_rows

    rows = [{"name": "pdf", "description": "Fill pdf forms."}, {"name": "docx", "description": "Edit Word files."}]
    copies = copied_rows(rows, 1, 3)
    assert [r["name"] for r in copies] == ["docx-copy1", "pdf-copy2", "docx-copy2"]
    assert copies[0]["description"] == "Edit Word files."
    copying = CopyingEncoder(fake_embedder)
    original, copy = copying.encode(["pdf: Fill pdf forms.", "pdf-copy2: Fill pdf forms."])
    assert np.allclose(original, fake_embedder.encode(["pdf: Fill pdf forms."])[0], atol=1e-6)
    assert abs(float(np.linalg.norm(copy)) - 1.0) < 1e-5 and 0.0 < 1.0 - float(copy @ original) < COPY_STEP ** 2
    assert copying.record() == fake_embedder.record() and copying.name == fake_embedder.name
    encoded = fake_embedder.encoded
    copying.encode(["pdf: Fill pdf forms.", "pdf-copy3: Fill pdf forms."])  # a text that is no copy is encoded again
    assert fake_embedder.encoded == encoded + 1
