"""Build the routing benchmark's catalog file from local checkouts of public skill collections.

Each line of the output (JSONL) is one skill: its frontmatter ``name`` and ``description``,
the body's headings and first lines (enough to route, not the manual), its source repository,
its folder there and the licence it is published under. Run once, by hand, on checkouts you
made yourself; the benchmark reads only the file it writes (no network at run time)::

    python benchmarks/skill_catalog_build.py OWNER/NAME=CHECKOUT=LICENCE ... \
        --per-repo 120 --out benchmarks/data/skill_catalog.jsonl

A skill whose name another already took (an earlier repository wins) is left out, and so are
skills the project's reader refuses.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
from pathlib import Path

from skillgraft.skills.folder import read_skill_folder
from skillgraft.errors import SkillFolderError

HEADINGS = 40
FIRST_LINES = 3
LINE_CHARS = 200
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def outline(body: str) -> tuple[list[str], list[str]]:
    """``(headings, first lines)`` of a Markdown body, fenced code left out."""
    headings, lines, fenced = [], [], False
    for line in body.splitlines():
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
            continue
        if fenced or not line.strip():
            continue
        match = _HEADING.match(line)
        if match:
            if len(headings) < HEADINGS:
                headings.append("#" * len(match.group(1)) + " " + match.group(2)[:LINE_CHARS])
        elif len(lines) < FIRST_LINES and not line.lstrip().startswith(("|", "<", "!", "---")):
            lines.append(line.strip()[:LINE_CHARS])
    return headings, lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sources", nargs="+", help="OWNER/NAME=CHECKOUT=LICENCE")
    parser.add_argument("--per-repo", type=int, default=120)
    parser.add_argument("--seed", type=int, default=38)
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    rows, taken = [], set()
    for source in args.sources:
        repo, checkout, licence = source.split("=", 2)
        root = Path(checkout)
        folders = sorted(p.parent for p in root.rglob("SKILL.md") if ".git" not in p.parts)
        random.Random(f"{args.seed}:{repo}").shuffle(folders)
        kept = 0
        for folder in folders:
            if kept >= args.per_repo:
                break
            try:
                skill = read_skill_folder(folder)
            except SkillFolderError:
                continue
            if skill.name in taken or not skill.description.strip():
                continue
            taken.add(skill.name)
            headings, lines = outline(skill.body)
            rows.append({"name": skill.name, "description": skill.description, "headings": headings,
                         "first_lines": lines, "repo": repo, "path": folder.relative_to(root).as_posix(),
                         "licence": licence})
            kept += 1
        print(f"{repo}: {kept} of {len(folders)}", file=sys.stderr)
    with open(args.out, "w") as handle:
        for row in rows:
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")
    print(f"{len(rows)} skills", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
