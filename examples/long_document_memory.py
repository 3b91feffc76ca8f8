"""Long-document memory: a document several times larger than the context window.

A synthetic town chronicle of 40 sections (about 300 tokens each, generated deterministically)
hides five "needle" facts at different depths. Each section is captured as its own block with
a one-line summary as its routing example (needle sections also get the needle's question).
The engine's context holds only 2,048 tokens, far less than the whole document, yet each
question is answered by routing to the one section it needs and grafting that section's KV
state: no section is ever prefilled again.

Run: .venv/bin/python examples/long_document_memory.py   (embedded SmolLM2-135M, temporary store)
"""

from __future__ import annotations

import random
import tempfile
import time
from pathlib import Path

from skillgraft import SkillMemory
from skillgraft.config import EngineSettings

N_CTX = 2048
TOWN = "Port Varren"
TOPICS = [
    "harbour", "lighthouse", "fish market", "old mill", "clock tower", "railway station",
    "copper mine", "apple orchards", "cathedral", "public library", "university", "town hall",
    "bakers' guild", "shipyard", "weather station", "botanical garden", "observatory", "theatre",
    "stone bridge", "canal locks", "salt works", "vineyards", "brewery", "textile mill",
    "fire brigade", "hospital", "grammar school", "museum", "post office", "tram line",
    "market square", "windmills", "dairy farms", "granite quarry", "forest reserve", "river ferry",
    "airfield", "power plant", "water tower", "zoo",
]
# (section, where in the section, fact, question, the number that answers it)
NEEDLES = [
    (2, "start", "The access code for vault 7 is 4512.", "What is the access code for vault 7?", "4512"),
    (11, "middle", "The spare key of the harbour master is kept in locker 7309.",
     "In which locker is the harbour master's spare key kept?", "7309"),
    (19, "end", "The festival bread recipe calls for 2846 grams of rye flour.",
     "How many grams of rye flour does the festival bread recipe call for?", "2846"),
    (28, "middle", "The mountain rescue team uses the radio frequency 6058 kilohertz.",
     "Which radio frequency does the mountain rescue team use?", "6058"),
    (37, "start", "The registration number of the old steam engine is 9173.",
     "What is the registration number of the old steam engine?", "9173"),
]

FOUNDERS = ["Mara Quill", "Edwin Holt", "Sofia Brandt", "Tomas Reyer", "Ilse Marren", "Jonas Veldt"]
PEOPLE = ["fishermen", "students", "merchants", "retired sailors", "young families", "travelling musicians"]
ACTIVITIES = ["trade stories", "sell woollen goods", "watch the tides", "repair old nets", "play chess", "sing folk songs"]
SEASONS = ["spring", "summer", "autumn", "winter"]
THINGS = ["visitors", "lanterns", "barrels", "letters", "carts", "pigeons"]
DETAILS = ["the painted ceiling", "the smell of tar", "the worn oak benches", "the brass fittings", "the narrow stairs"]
ADJECTIVES = ["quiet", "busy", "windy", "damp", "sunlit", "crowded"]


def section_text(index: int, rng: random.Random) -> str:
    """About 300 tokens of deterministic chronicle prose about one topic."""
    topic = TOPICS[index]
    other = TOPICS[(index + 7) % len(TOPICS)]
    sentences = [
        f"The {topic} was founded in {rng.randint(1700, 1899)} by {rng.choice(FOUNDERS)}, "
        f"who wanted the town to have a {rng.choice(ADJECTIVES)} place for its people.",
        f"In {rng.choice(SEASONS)}, {rng.choice(PEOPLE)} gather near the {topic} to {rng.choice(ACTIVITIES)}.",
        f"Records kept at the {topic} show that {rng.randint(12, 480)} {rng.choice(THINGS)} "
        f"were counted there in {rng.randint(1700, 1899)}.",
        f"A long path connects the {topic} to the {other}, and visitors often remark on {rng.choice(DETAILS)}.",
        f"During the great storm of {rng.randint(1700, 1899)} the {topic} was damaged and rebuilt within "
        f"{rng.randint(2, 30)} months.",
        f"The keepers of the {topic} write a short report every {rng.choice(SEASONS)} for the town council.",
        f"Most days the {topic} is {rng.choice(ADJECTIVES)} in the morning and {rng.choice(ADJECTIVES)} by evening.",
        f"Children learn about the {topic} at school, and many of them draw {rng.choice(DETAILS)} from memory.",
        f"An old song of {TOWN} tells of {rng.choice(PEOPLE)} who met at the {topic} and stayed for "
        f"{rng.randint(2, 40)} years.",
        f"Today the {topic} is cared for by {rng.randint(3, 60)} volunteers and a small paid staff.",
        f"Guides say the best view of the {topic} is from the {other} just before sunset.",
        f"Local newspapers called the {topic} {rng.choice(ADJECTIVES)} and {rng.choice(ADJECTIVES)} "
        f"in {rng.randint(1850, 1899)}, and the name stuck.",
        f"The town archive holds {rng.randint(12, 480)} photographs of the {topic}, the oldest from "
        f"{rng.randint(1850, 1899)}.",
    ]
    return f"Chronicle of {TOWN}, section {index + 1}: the {topic}.\n" + " ".join(sentences)


def build_document() -> list[str]:
    rng = random.Random(2026)
    sections = [section_text(i, rng) for i in range(len(TOPICS))]
    for index, where, fact, _, _ in NEEDLES:
        body = sections[index]
        if where == "start":
            head, _, tail = body.partition("\n")
            sections[index] = f"{head}\n{fact} {tail}"
        elif where == "end":
            sections[index] = f"{body} {fact}"
        else:
            cut = body.find(". ", len(body) // 2) + 2
            sections[index] = f"{body[:cut]}{fact} {body[cut:]}"
    return sections


def folder_bytes(folder: Path) -> int:
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file())


def main() -> None:
    sections = build_document()
    with tempfile.TemporaryDirectory(prefix="skillgraft-longdoc-") as home:
        print("loading the embedded model and the embedder ...", flush=True)
        with SkillMemory(home, settings=EngineSettings(n_ctx=N_CTX)) as memory:
            needle_questions = {index: question for index, _, _, question, _ in NEEDLES}
            print(f"\n== capture {len(sections)} sections, one block each ==", flush=True)
            started = time.perf_counter()
            total_tokens = 0
            for i, text in enumerate(sections):
                examples = [f"What does the chronicle say about the {TOPICS[i]} of {TOWN}?"]
                if i in needle_questions:
                    examples.append(needle_questions[i])
                block = memory.add_manual(f"section-{i + 1}", text, examples=examples)
                total_tokens += block.n_tokens
                if (i + 1) % 10 == 0:
                    print(f"  {i + 1:2} sections captured, {total_tokens:,} tokens so far", flush=True)
            capture_s = time.perf_counter() - started
            print(f"stored {total_tokens:,} tokens in {len(sections)} blocks in {capture_s:.0f} s: "
                  f"{total_tokens / N_CTX:.1f}x the {N_CTX:,}-token context (engine n_ctx {memory.engine.n_ctx:,})")

            print("\n== needle questions ==")
            found = routed_right = 0
            for index, where, _, question, number in NEEDLES:
                recall = memory.recall(question)
                out = memory.generate(question, max_tokens=24, recall=recall)
                target = f"section-{index + 1}"
                hit = number in out.text
                found += hit
                routed_right += recall.block is not None and recall.block.name == target
                gate = out.gate
                print(f"\nQ: {question}  (needle at the {where} of {target}, depth {index + 1}/{len(sections)})")
                print(f"  route  {recall.decision} -> {recall.block.name if recall.block else None} "
                      f"(score {recall.score:.3f}), answered as {out.decision}"
                      + (f", gate mean log-prob {gate.mean_logprob}" if gate else ""))
                print(f"  A: {out.text.strip()!r}")
                print(f"  {'found' if hit else 'MISSED'} {number}")

            disk = folder_bytes(Path(home))
            print(f"\nneedles found: {found}/{len(NEEDLES)} (routed to the right section: {routed_right}/{len(NEEDLES)})")
            print(f"total tokens stored {total_tokens:,} vs n_ctx {memory.engine.n_ctx:,} "
                  f"({total_tokens / memory.engine.n_ctx:.1f}x)")
            print(f"store on disk: {disk:,} bytes ({disk / 2**20:.0f} MiB)")


if __name__ == "__main__":
    main()
