"""The hand-written docs match the code: the public API, the defaults, the fingerprint fields, the
inspector's limits and every command line (no site built; tests/test_docs.py builds it)."""

from __future__ import annotations

import re
from pathlib import Path

import skillgraft
from skillgraft.cli.main import cli
from tests.required import need

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


def test_api_page_covers_the_public_api():
    text = (DOCS / "api.md").read_text(encoding="utf-8")
    documented = set(re.findall(r"^::: skillgraft\.(\w+)$", text, re.M))
    from skillgraft import errors

    if "errors" in documented:
        documented |= {n for n in vars(errors) if n.endswith("Error")}
    missing = sorted(set(skillgraft.__all__) - documented)
    assert not missing, f"docs/api.md lacks {missing}"


def test_concepts_state_the_current_defaults():
    from skillgraft.core.gate import DEFAULT_GATE_LOGPROB, GATE_SETTING, GATE_TOKENS
    from skillgraft.routing.router import DEFAULT_THRESHOLD, THRESHOLD_SETTING

    text = (DOCS / "concepts.md").read_text(encoding="utf-8")
    assert f"**{DEFAULT_THRESHOLD}**" in text, "the routing default in concepts.md is out of date"
    assert f"**{DEFAULT_GATE_LOGPROB}**" in text, "the gate default in concepts.md is out of date"
    assert f"first {GATE_TOKENS} generated tokens" in text
    assert f"`{GATE_SETTING}`" in text and f"`{THRESHOLD_SETTING}`" in text


def test_concepts_list_every_fingerprint_field():
    from skillgraft.core import RuntimeFingerprint

    text = (DOCS / "concepts.md").read_text(encoding="utf-8")
    missing = [f for f in RuntimeFingerprint.model_fields if f"`{f}`" not in text]
    assert not missing, f"docs/concepts.md does not describe the fingerprint fields {missing}"


def test_the_inspector_page_states_the_current_limits_and_shows_the_screenshots():
    need("jinja2", "skillgraft[serve]")
    from skillgraft.inspector import views

    text = (DOCS / "inspector.md").read_text(encoding="utf-8")
    assert f"at most {views.ANSWER_WINDOW:,} `generate` rows" in text
    assert f"{views.BUCKET_SECONDS[0]} s up to a week, at most {views.MAX_BUCKETS} bars" in text
    assert views.BUCKET_SECONDS[-1] == 7 * 86400
    images = re.findall(r"\]\((img/inspector_\w+\.png)\)", text)
    assert len(images) == 4 and all((DOCS / image).is_file() for image in images)


def _commands_in_docs():
    """Every `skillgraft ...` command line in the code blocks of the docs and the README."""
    import shlex

    for page in [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]:
        text = page.read_text(encoding="utf-8")
        for block in re.findall(r"^```[^\n]*\n(.*?)^```", text, re.M | re.S):
            for line in block.replace("\\\n", " ").splitlines():
                try:
                    lexer = shlex.shlex(line.split(" #")[0].removeprefix("$ "), posix=True, punctuation_chars=";&|")
                    lexer.whitespace_split = True
                    tokens = list(lexer)
                except ValueError:  # not shell (JSON, Python)
                    continue
                segment: list[str] = []
                for token in [*tokens, ";"]:
                    if token not in {";", "&&", "|", "||", "&"}:
                        segment.append(token)
                        continue
                    words = [word for word in segment if "=" not in word or word.startswith("-")]  # no VAR=value
                    if words and (words[0] == "skillgraft" or words[0].endswith("bin/skillgraft")):
                        yield page.name, words[1:]
                    elif words[1:3] == ["-m", "skillgraft"]:
                        yield page.name, words[3:]
                    segment = []


def test_every_command_line_in_the_docs_names_options_that_exist():
    group_options = {opt for param in cli.params for opt in param.opts}
    seen = 0
    for page, args in _commands_in_docs():
        words = [arg for arg in args if not arg.startswith("-")]
        name = next((word for word in words if word in cli.commands), None)
        assert name is not None or not words or args[0].startswith("-"), f"{page}: no command in `skillgraft {' '.join(args)}`"
        if name is None:
            continue
        command = cli.commands[name]
        after = words[words.index(name) + 1:]
        if getattr(command, "commands", None) and after and after[0] in command.commands:  # a group's command
            command = command.commands[after[0]]
        known = group_options | {opt for param in command.params for opt in param.opts + param.secondary_opts}
        for arg in args:
            if arg.startswith("--"):
                assert arg.split("=")[0] in known, f"{page}: `skillgraft {name}` has no option {arg.split('=')[0]}"
        seen += 1
    assert seen > 20
