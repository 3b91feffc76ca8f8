"""A ``SKILL.md``'s YAML frontmatter, parsed leniently where the Agent Skills reference
validator is strict, and safely: untrusted YAML.

The frontmatter lies between a first line ``---`` and the next line ``---``; what follows is
the body. It is parsed with PyYAML's safe loader, refusing anchors and aliases (a YAML bomb
expands through them) and a frontmatter over :data:`MAX_FRONTMATTER_BYTES`. Where it does not
parse, values holding an unquoted ``": "`` (which other clients accept) are quoted and it is
parsed again, as the client guide suggests. ``name`` and ``description`` are taken out;
every other field is kept as given (``license``, ``compatibility``, ``metadata``,
``allowed-tools``, client fields such as ``disable-model-invocation``, unknown ones), made
JSON-safe. A name that differs from its folder, or breaks the specification's rules, is a
warning; a missing or empty description, or YAML that does not parse, a
:class:`~skillgraft.errors.SkillFolderError`.
"""

from __future__ import annotations

import datetime
import re
from dataclasses import dataclass, field
from typing import Optional

from ..errors import SkillFolderError
from ..core.sha import ID_LIKE

MAX_FRONTMATTER_BYTES = 64 << 10
FOLDER_MISMATCH = "differs from its folder"  # the words of the warning of a name that is not its folder's
MAX_DESCRIPTION_CHARS = 1024        # the specification's limit; longer is a warning
MAX_NAME_CHARS = 128                # beyond the specification's 64 (a warning), refused
# What a skill name may hold here: it names blocks (NAME, NAME#2, NAME/references/x.md).
USABLE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
SPEC_NAME = re.compile(r"[a-z0-9]+(-[a-z0-9]+)*")
_KEY_VALUE = re.compile(r"^([A-Za-z0-9_-]+):[ \t]+(.+?)\s*$")


@dataclass(frozen=True)
class Frontmatter:
    """The parsed frontmatter: the name, the description and every other field as given."""

    name: str
    description: str
    fields: dict = field(default_factory=dict)

    @property
    def model_invocable(self) -> bool:
        """False when the skill opts out of model-driven activation (``disable-model-invocation``)."""
        return self.fields.get("disable-model-invocation") is not True

    def as_dict(self) -> dict:
        return {"name": self.name, "description": self.description, **self.fields}


def split_frontmatter(text: str) -> tuple[str, str]:
    """``(frontmatter, body)`` of a ``SKILL.md``; the body stripped, as the client guide says."""
    text = text[1:] if text.startswith("\ufeff") else text
    lines = text.splitlines(keepends=True)
    if not lines or lines[0].rstrip("\r\n").rstrip() != "---":
        raise SkillFolderError("SKILL.md", "has no YAML frontmatter (a first line ---)")
    for number, line in enumerate(lines[1:], 1):
        if line.rstrip("\r\n").rstrip() == "---":
            return "".join(lines[1:number]), "".join(lines[number + 1:]).strip()
    raise SkillFolderError("SKILL.md", "has no line --- closing its frontmatter")


def parse_skill_md(text: str, folder_name: str, warnings: list[str]) -> tuple[Frontmatter, str]:
    """The frontmatter and body of a ``SKILL.md`` in folder ``folder_name``; ``warnings`` grows."""
    raw, body = split_frontmatter(text)
    if len(raw.encode("utf-8")) > MAX_FRONTMATTER_BYTES:
        raise SkillFolderError("SKILL.md", f"has a frontmatter over {MAX_FRONTMATTER_BYTES} bytes")
    values = _load(raw, warnings)
    description = values.pop("description", None)
    if not isinstance(description, str) or not description.strip():
        raise SkillFolderError("SKILL.md", "has no description (a skill is routed by it)")
    description = " ".join(description.split())
    if len(description) > MAX_DESCRIPTION_CHARS:
        warnings.append(f"the description is {len(description)} characters (the specification allows {MAX_DESCRIPTION_CHARS})")
    name = values.pop("name", None)
    if name is None or (isinstance(name, str) and not name.strip()):
        warnings.append(f"no name in the frontmatter: the folder's name {folder_name!r} is used")
        name = folder_name
    name = _usable_name(name)
    if not SPEC_NAME.fullmatch(name) or len(name) > 64:
        warnings.append(f"the name {name!r} breaks the specification (lowercase letters, digits, single hyphens, 64 at most)")
    if name != folder_name:
        warnings.append(f"the name {name!r} {FOLDER_MISMATCH} {folder_name!r}")
    if "disable-model-invocation" in values and not isinstance(values["disable-model-invocation"], bool):
        warnings.append("disable-model-invocation is not true or false: the skill stays routable")
    return Frontmatter(name, description, {str(k): _json_safe(v) for k, v in values.items()}), body


SPEC_FIELDS = ("name", "description", "license", "compatibility", "metadata", "allowed-tools")
MAX_COMPATIBILITY_CHARS = 500


def spec_problems(text: str, folder_name: str) -> list[str]:
    """What the Agent Skills reference validator refuses in the ``SKILL.md`` ``text`` of a
    folder named ``folder_name``: fields outside the specification's six (client fields such as
    ``disable-model-invocation`` among them), a name that breaks its rules or differs from the
    folder, a missing or long description, a long ``compatibility``, an ``allowed-tools`` that
    is not text or a list of text. Empty when it accepts the frontmatter."""
    try:
        values = _load(split_frontmatter(text)[0], [])
    except SkillFolderError as exc:
        return [exc.reason]
    problems = []
    extra = sorted(str(k) for k in values if k not in SPEC_FIELDS)
    if extra:
        problems.append(f"fields outside the specification: {', '.join(extra)}")
    name = values.get("name")
    if not isinstance(name, str) or not name.strip():
        problems.append("no name")
    else:
        if not SPEC_NAME.fullmatch(name.strip()) or len(name.strip()) > 64:
            problems.append(f"the name {name.strip()[:70]!r} breaks the rules (lowercase letters, digits, single hyphens, 64 at most)")
        if name.strip() != folder_name:
            problems.append(f"the name {name.strip()[:70]!r} differs from the folder {folder_name!r}")
    description = values.get("description")
    if not isinstance(description, str) or not description.strip():
        problems.append("no description")
    elif len(description) > MAX_DESCRIPTION_CHARS:
        problems.append(f"the description is {len(description)} characters ({MAX_DESCRIPTION_CHARS} at most)")
    compatibility = values.get("compatibility")
    if "compatibility" in values and (not isinstance(compatibility, str) or len(compatibility) > MAX_COMPATIBILITY_CHARS):
        problems.append(f"compatibility is not text of {MAX_COMPATIBILITY_CHARS} characters at most")
    tools = values.get("allowed-tools")
    if "allowed-tools" in values and not (isinstance(tools, str) or (isinstance(tools, list) and all(isinstance(t, str) for t in tools))):
        problems.append("allowed-tools is neither text nor a list of text")
    return problems


def name_problem(name) -> Optional[str]:
    """Why ``name`` cannot name a skill (or an app's prefix), as a phrase ("the name 'x': ..."),
    or None when it can."""
    if not isinstance(name, str):
        return f"a name that is not text ({type(name).__name__})"
    if len(name) > MAX_NAME_CHARS or not USABLE_NAME.fullmatch(name):
        return f"the name {name[:40]!r}: a name is letters, digits, '.', '_' and '-' (at most {MAX_NAME_CHARS})"
    if ID_LIKE.fullmatch(name):
        return (f"the name {name!r}, which has the form of a block id or an id's prefix "
                "(hex digits only): ids and names must not be confused")
    if name.casefold().startswith("solution-"):
        return f"the name {name!r}, which reads as a verified solution's name"
    return None


def _usable_name(name) -> str:
    name = name.strip() if isinstance(name, str) else name
    problem = name_problem(name)
    if problem:
        raise SkillFolderError("SKILL.md", f"has {problem}")
    return name


def _load(raw: str, warnings: list[str]) -> dict:
    import yaml

    try:
        values = yaml.load(raw, Loader=_NoAliasLoader)  # noqa: S506 (a safe loader without aliases)
    except _AliasError:
        raise SkillFolderError("SKILL.md", "uses YAML anchors or aliases in its frontmatter (refused)") from None
    except yaml.YAMLError as first:
        try:
            values = yaml.load(_quote_colon_values(raw), Loader=_NoAliasLoader)  # noqa: S506
        except (yaml.YAMLError, _AliasError, RecursionError):
            where = getattr(first, "problem_mark", None)
            at = f" (line {where.line + 2})" if where is not None else ""
            raise SkillFolderError("SKILL.md", f"has a frontmatter that is not YAML{at}") from None
        warnings.append("the frontmatter parses only with its unquoted ': ' values quoted")
    except RecursionError:
        raise SkillFolderError("SKILL.md", "has a frontmatter nested too deeply") from None
    if values is None:
        values = {}
    if not isinstance(values, dict):
        raise SkillFolderError("SKILL.md", "has a frontmatter that is not a mapping of fields")
    return values


def _quote_colon_values(raw: str) -> str:
    """Top-level ``key: value`` lines whose value holds ``": "`` with the value single-quoted."""
    lines = []
    for line in raw.splitlines():
        match = _KEY_VALUE.match(line)
        if match and ": " in match.group(2) and match.group(2)[0] not in "'\"|>[{":
            value = match.group(2).replace("'", "''")
            line = f"{match.group(1)}: '{value}'"
        lines.append(line)
    return "\n".join(lines)


def _json_safe(value, depth: int = 0):
    """A YAML value as JSON holds it: dates as ISO text, other scalars as text, bounded depth."""
    if depth > 16:
        raise SkillFolderError("SKILL.md", "has a frontmatter nested too deeply")
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (datetime.date, datetime.datetime)):
        return value.isoformat()
    if isinstance(value, dict):
        return {str(k): _json_safe(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v, depth + 1) for v in value]
    return str(value)


class _AliasError(Exception):
    pass


def _make_loader():
    import yaml

    class Loader(yaml.SafeLoader):
        def compose_node(self, parent, index):
            if self.check_event(yaml.AliasEvent):
                raise _AliasError()
            event = self.peek_event()
            if getattr(event, "anchor", None):
                raise _AliasError()
            return super().compose_node(parent, index)

    return Loader


class _LazyLoader:
    """PyYAML imported on the first parse, not when the package is."""

    _loader = None

    def __call__(self, stream):
        if _LazyLoader._loader is None:
            _LazyLoader._loader = _make_loader()
        return _LazyLoader._loader(stream)


_NoAliasLoader = _LazyLoader()
