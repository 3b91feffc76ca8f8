"""What an imported skill's blocks hold and how they are routed: the key policy in one place.

A skill becomes parts: its body packed into as few blocks as fit the window
(:func:`~skillgraft.skills.section_pack.pack_sections`), then each text resource one level deep
(``references/*.md`` …) packed the same way. Every block's text starts with a prefix naming
the skill, its description and the part's heading path (or resource path), so a block grafted
alone still says what it is.

Routing keys, by the key policy chosen at import (:data:`KEY_POLICIES`, recorded with the
version): every body part has the skill's name and description; ``headings`` adds one key of the
part's heading path, ``sentences`` also every sentence of the part (heading lines aside); the
first part also has the skill's example queries and its near misses
(:mod:`skillgraft.routing.near_misses`). A resource part is routed by its own text: its path,
its heading path and its first sentences. The router ranks skills, not parts
(:class:`~skillgraft.routing.router.Router`), so a skill split into many blocks gains nothing
from its count.

The default, ``headings``, was chosen on the project's collection (docs/routing.md, 104
held-out queries, examples and near misses as the importer makes them, threshold 0.3): a part's
own keys only choose among a chosen skill's parts, so the three policies answer the same 88 right,
in and out of scope together. The rule: most right answers, a difference of two queries or fewer being a tie,
which goes to the policy under which a query can choose among a split skill's parts (not
``description``: its parts have the same keys), then to fewer keys.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Callable, Optional

from ..errors import InputError
from ..routing.near_misses import NEAR_MISS
from ..routing.parts import is_instructional
from ..routing.ranking import lead_sentence
from ..routing.router import manual_key_texts, name_key
from .folder import SkillFolder
from .section_pack import heading_paths, pack_sections

MAX_SKILL_PARTS = 96           # parts of one skill version, body and resources together (text: no KV until used)
RESOURCE_SENTENCE_KEYS = 4
KEY_POLICIES = ("description", "headings", "sentences")
DEFAULT_KEY_POLICY = "headings"
EARLIER_KEY_POLICY = "headings"  # what a version recorded before the policy was a choice was made with
# The kinds of key an import writes (a correction's kinds are not among them).
IMPORT_KEY_KINDS = ("name", "description", "manual", "example", NEAR_MISS, "skill", "headings", "lead")
MAX_HEADINGS_CHARS = 2_000


def key_policy(keys) -> str:
    """``keys`` checked: one of :data:`KEY_POLICIES` (None: :data:`DEFAULT_KEY_POLICY`)."""
    if keys is None:
        return DEFAULT_KEY_POLICY
    if keys not in KEY_POLICIES:
        raise InputError(f"unknown key policy {keys!r}: choose one of {', '.join(KEY_POLICIES)}")
    return keys


def recorded_policy(row: dict) -> str:
    """The key policy a stored version was imported under."""
    return row["record"].get("keys") or EARLIER_KEY_POLICY


@dataclass(frozen=True)
class PlannedPart:
    """One block of a skill version: its role (``section`` or ``resource``), its title (heading
    path or resource path), its full text (prefix included) and its routing key sets."""

    role: str
    title: str
    text: str
    keys: tuple
    piece: int = 0      # its place among the parts of the body, or of its resource


def prefix(folder: SkillFolder, title: str, role: str) -> str:
    lines = [f"Skill: {folder.name}", f"Description: {folder.description}"]
    if role == "resource":
        lines.append(f"Resource: {title}")
    elif title:
        lines.append(f"Section: {title}")
    return "\n".join(lines) + "\n\n"


def skill_level_keys(folder: SkillFolder) -> list[tuple[str, list[str]]]:
    """The keys that find the skill itself, on its first part: ``skill`` (``name: description``,
    searched), ``lead`` (the description's first sentence, a term of the dense score of its own)
    and ``headings`` (the body's headings in one text, lexical evidence only)."""
    titles = list(dict.fromkeys(path.split(" > ")[-1] for path, _ in heading_paths(folder.body) if path))
    sets = [("skill", [f"{name_key(folder.name)}: {folder.description}"]), ("lead", [lead_sentence(folder.description)])]
    if titles:
        sets.append(("headings", ["; ".join(titles)[:MAX_HEADINGS_CHARS]]))
    return sets


def plan_parts(
    folder: SkillFolder, fits: Callable[[str], bool], examples=(), near_misses=(), keys: str = DEFAULT_KEY_POLICY,
    notes: Optional[list] = None,
) -> list[PlannedPart]:
    """The parts of ``folder``, their body keys as the policy ``keys`` says; ``fits(text)`` says
    whether a block of ``text`` fits the window. Resources that are not instructional text
    (:func:`~skillgraft.routing.parts.is_instructional`: a licence, a notice …) become no part,
    nor do resources past :data:`MAX_SKILL_PARTS`; each is said in ``notes`` (the files stay
    with the skill). :class:`~skillgraft.errors.InputError` when the body alone needs more than
    :data:`MAX_SKILL_PARTS` parts, or the policy is unknown."""
    keys = key_policy(keys)
    notes = [] if notes is None else notes
    parts: list[PlannedPart] = []
    skill_keys = [("name", [name_key(folder.name)]), ("description", [folder.description])]
    body = folder.body if folder.body.strip() else folder.description
    try:
        packed = pack_sections(body, lambda path, text: fits(prefix(folder, path, "section") + text), max_parts=MAX_SKILL_PARTS)
    except InputError as exc:
        raise InputError(f"the body of {folder.name}'s SKILL.md is too long: {exc}") from None
    for number, part in enumerate(packed):
        sets = list(skill_keys)
        own = [f"{name_key(folder.name)}: {part.path}"] if part.path and keys != "description" else []
        if keys == "sentences":  # heading lines are left to the heading path's key
            own += [t for t in manual_key_texts(part.text) if not t.startswith("#")]
        if own:
            sets.append(("manual", own))
        if number == 0:
            sets += skill_level_keys(folder)
        if number == 0 and examples:
            sets.append(("example", list(examples)))
        if number == 0 and near_misses:
            sets.append((NEAR_MISS, list(near_misses)))
        parts.append(PlannedPart("section", part.path, prefix(folder, part.path, "section") + part.text, tuple(sets), number))
    for path, text in folder.resources.items():
        room = MAX_SKILL_PARTS - len(parts)
        if not is_instructional(path):
            notes.append(f"{path}: kept as a file, not routed (not instructional text)")
            continue
        if room <= 0:
            notes.append(f"{path}: kept as a file, not routed (the skill already has {MAX_SKILL_PARTS} parts)")
            continue
        try:
            packed = pack_sections(text, lambda _path, body: fits(prefix(folder, path, "resource") + body), max_parts=room)
        except InputError:
            notes.append(f"{path}: kept as a file, not routed (its parts would take the skill past {MAX_SKILL_PARTS})")
            continue
        for number, piece in enumerate(packed):
            stem = PurePosixPath(path).with_suffix("").as_posix().replace("/", " ")
            own = [f"{name_key(folder.name)} {name_key(stem)}"]
            if piece.path:
                own.append(piece.path)
            own += manual_key_texts(piece.text, limit=64)[:RESOURCE_SENTENCE_KEYS]
            text = prefix(folder, path, "resource") + piece.text
            parts.append(PlannedPart("resource", path, text, (("manual", own),), number))
    return parts
