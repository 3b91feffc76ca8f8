"""Output evaluations the skill authors already write: ``evals/evals.json`` in a skill folder, as
the skill-creation guide lays it out::

    {"skill_name": "csv-analyzer",
     "evals": [{"id": 1, "prompt": "...", "expected_output": "...", "files": ["evals/files/a.csv"],
                "expectations": ["The chart has labeled axes", {"contains": "sep=';'"}]}]}

Each eval's ``expectations`` (``assertions`` is read too, and both when both are given) are
natural-language statements, which no program can grade: they are counted as *unchecked*,
never guessed at. Next to them an author may write a **machine-checkable** assertion, an
object with exactly one of:

- ``{"contains": "TEXT"}``: the answer contains TEXT;
- ``{"not_contains": "TEXT"}``: the answer does not contain TEXT;
- ``{"regex": "PATTERN"}``: PATTERN occurs in the answer, in the safe subset of
  :mod:`skillgraft.core.safe_pattern` (linear time: no backreferences or lookarounds);

plus, optionally, ``"ignore_case": true`` and a ``"text"`` saying what it means. An object
with only a ``text`` (say, a grading record ``{"text", "passed", "evidence"}``) is natural
language. ``expected_output`` is a description of success, not an answer: it is compared to
the answer (exactly, surrounding whitespace aside) only where the eval says
``"expected_output_exact": true``.

The evals are read from the stored version's files (not from disk). ``files`` are listed with
their stored size and digest, never read or run; a path that is not a plain relative path
inside the skill (absolute, ``..``, a backslash, control characters) is refused with the
reason, and one the skill does not hold is reported missing. A malformed file, a malformed eval
or assertion is skipped with its reason; the caps below bound the work.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Optional, Union

from ..core.safe_pattern import SafePattern
from ..errors import InputError

EVALS_JSON = "evals/evals.json"
MAX_EVALS_BYTES = 1 << 20        # a larger evals.json is not read
MAX_EVALS = 200                  # evals read per skill (the rest are left out, with a warning)
MAX_PROMPT_CHARS = 8_000         # a longer prompt is skipped
MAX_ASSERTIONS = 64              # per eval
MAX_ASSERTION_CHARS = 2_000      # a longer natural-language assertion is kept cut
MAX_NEEDLE_CHARS = 1_000         # the text of contains / not_contains
MAX_FILES = 32                   # file references listed per eval
MAX_PATH_CHARS = 500
MAX_ID_CHARS = 100
CHECK_KINDS = ("contains", "not_contains", "regex")
EXTRA_KEYS = {"text", "ignore_case"}


@dataclass(frozen=True)
class Check:
    """One machine-checkable expectation: ``kind`` is ``contains``, ``not_contains``, ``regex``
    or ``exact`` (the eval's ``expected_output``); ``index`` its place among the assertions."""

    kind: str
    value: str
    ignore_case: bool = False
    text: str = ""
    index: Optional[int] = None
    pattern: Optional[SafePattern] = field(default=None, repr=False, compare=False)

    def run(self, answer: str) -> tuple[Optional[bool], str]:
        """``(passed, "")``, or ``(None, why)`` when it could not be decided (a search too costly)."""
        if self.kind == "regex":
            try:
                return self.pattern.search(answer), ""
            except InputError as exc:
                return None, str(exc)
        if self.kind == "exact":
            return answer.strip() == self.value.strip(), ""
        haystack, needle = (answer.casefold(), self.value.casefold()) if self.ignore_case else (answer, self.value)
        found = needle in haystack
        return (found if self.kind == "contains" else not found), ""

    def as_dict(self) -> dict:
        return {"kind": self.kind, "value": self.value, "ignore_case": self.ignore_case, "text": self.text,
                "index": self.index}


@dataclass
class EvalCase:
    """One eval of a skill, read: its prompt, checks, unchecked assertions and file references."""

    index: int
    id: Union[int, str, None]
    prompt: str
    checks: list = field(default_factory=list)
    unchecked: list = field(default_factory=list)
    invalid: list = field(default_factory=list)
    files: list = field(default_factory=list)

    @property
    def label(self) -> str:
        return f"#{self.index}" if self.id is None else str(self.id)


@dataclass
class EvalSuite:
    """The evals of one ``evals.json``: those read, those skipped (with the reason), warnings."""

    cases: list = field(default_factory=list)
    skipped: list = field(default_factory=list)
    warnings: list = field(default_factory=list)
    skill_name: Optional[str] = None


def read_evals(raw: Optional[bytes], stored: dict) -> EvalSuite:
    """The evals of an ``evals.json`` (``raw``), its file references resolved against ``stored``
    (path -> the stored file's row with ``size`` and ``sha256``). Never raises on bad input."""
    suite = EvalSuite()
    if raw is None:
        return suite
    if len(raw) > MAX_EVALS_BYTES:
        suite.warnings.append(f"{EVALS_JSON} is {len(raw):,} bytes, over the {MAX_EVALS_BYTES:,} read: not used")
        return suite
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        suite.warnings.append(f"{EVALS_JSON} is not valid JSON ({type(exc).__name__}): not used")
        return suite
    if not isinstance(data, dict) or not isinstance(data.get("evals"), list):
        suite.warnings.append(f'{EVALS_JSON} is not an object with an "evals" list: not used')
        return suite
    if isinstance(data.get("skill_name"), str):
        suite.skill_name = data["skill_name"][:MAX_ID_CHARS]
    items = data["evals"]
    if len(items) > MAX_EVALS:
        suite.warnings.append(f"{len(items):,} evals: only the first {MAX_EVALS} are read")
    for index, item in enumerate(items[:MAX_EVALS], 1):
        case = _read_case(index, item, stored, suite.warnings)
        if isinstance(case, str):
            suite.skipped.append({"index": index, "id": _id_of(item), "reason": case})
        else:
            suite.cases.append(case)
    return suite


def _id_of(item) -> Union[int, str, None]:
    value = item.get("id") if isinstance(item, dict) else None
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip() and len(value) <= MAX_ID_CHARS and value.isprintable():
        return value.strip()
    return None


def _read_case(index: int, item, stored: dict, warnings: list) -> Union[EvalCase, str]:
    """The eval at ``index``, or the reason it is skipped."""
    if not isinstance(item, dict):
        return f"an eval must be an object, got {type(item).__name__}"
    prompt = item.get("prompt")
    if not isinstance(prompt, str) or not prompt.strip():
        return "no prompt (a non-empty string)"
    if len(prompt) > MAX_PROMPT_CHARS:
        return f"the prompt has {len(prompt):,} characters, over the {MAX_PROMPT_CHARS:,} allowed"
    if "\x00" in prompt:
        return "the prompt contains a NUL character"
    case = EvalCase(index, _id_of(item), prompt.strip())
    if item.get("id") is not None and case.id is None:
        warnings.append(f"eval #{index}: its id is not an integer or a short printable string: shown as #{index}")
    assertions = []
    for key in ("expectations", "assertions"):
        value = item.get(key)
        if value is None:
            continue
        if isinstance(value, list):
            assertions += value
        else:
            case.invalid.append({"index": None, "reason": f"{key} is not a list"})
    if len(assertions) > MAX_ASSERTIONS:
        warnings.append(f"eval {case.label}: {len(assertions)} assertions, only the first {MAX_ASSERTIONS} are read")
    for position, assertion in enumerate(assertions[:MAX_ASSERTIONS]):
        _read_assertion(case, position, assertion)
    exact = item.get("expected_output_exact")
    if exact is True:
        expected = item.get("expected_output")
        if isinstance(expected, str) and expected.strip():
            case.checks.append(Check("exact", expected, text="expected_output, exactly"))
        else:
            case.invalid.append({"index": None, "reason": "expected_output_exact without a non-empty expected_output"})
    elif exact is not None and exact is not False:
        case.invalid.append({"index": None, "reason": "expected_output_exact must be true or false"})
    files = item.get("files")
    if files is not None:
        if not isinstance(files, list):
            case.invalid.append({"index": None, "reason": "files is not a list"})
        else:
            case.files = [file_reference(path, stored) for path in files[:MAX_FILES]]
            if len(files) > MAX_FILES:
                warnings.append(f"eval {case.label}: {len(files)} files, only the first {MAX_FILES} are listed")
    return case


def _read_assertion(case: EvalCase, position: int, assertion) -> None:
    """Sort one assertion into the case's checks, unchecked statements or invalid ones."""
    if isinstance(assertion, str):
        if assertion.strip():
            case.unchecked.append(assertion.strip()[:MAX_ASSERTION_CHARS])
        else:
            case.invalid.append({"index": position, "reason": "an empty assertion"})
        return
    if not isinstance(assertion, dict):
        case.invalid.append({"index": position, "reason": f"an assertion must be a string or an object, "
                                                          f"got {type(assertion).__name__}"})
        return
    kinds = [k for k in CHECK_KINDS if k in assertion]
    text = assertion.get("text")
    text = text.strip()[:MAX_ASSERTION_CHARS] if isinstance(text, str) else ""
    if not kinds:
        if text:
            case.unchecked.append(text)
        else:
            case.invalid.append({"index": position, "reason": f"an object with none of {', '.join(CHECK_KINDS)} "
                                                              f"and no text"})
        return
    if len(kinds) > 1:
        case.invalid.append({"index": position, "reason": f"one check per assertion, got {', '.join(kinds)}"})
        return
    kind, value = kinds[0], assertion[kinds[0]]
    ignore_case = assertion.get("ignore_case", False)
    unknown = sorted(str(k)[:40] for k in assertion if k not in EXTRA_KEYS and k != kind)
    reason = ""
    if not isinstance(value, str) or not value:
        reason = f"{kind} must be a non-empty string"
    elif not isinstance(ignore_case, bool):
        reason = "ignore_case must be true or false"
    elif unknown:
        reason = f"unknown keys {', '.join(unknown)} next to {kind}"
    elif kind != "regex" and len(value) > MAX_NEEDLE_CHARS:
        reason = f"{kind} has {len(value):,} characters, over the {MAX_NEEDLE_CHARS:,} allowed"
    pattern = None
    if not reason and kind == "regex":
        try:
            pattern = SafePattern(value, ignore_case=ignore_case)
        except InputError as exc:
            reason = f"regex refused: {exc}"
    if reason:
        case.invalid.append({"index": position, "reason": reason})
        return
    case.checks.append(Check(kind, value, ignore_case, text, position, pattern))


def file_reference(path, stored: dict) -> dict:
    """What an eval's file reference points at: ``present`` (a file stored with the skill: its
    size and digest), ``missing``, or ``refused`` with the reason. Nothing is read or run."""
    if not isinstance(path, str):
        return {"path": None, "status": "refused", "reason": f"not a string ({type(path).__name__})"}
    shown = path if len(path) <= MAX_PATH_CHARS and path.isprintable() else ascii(path[:MAX_PATH_CHARS])
    reason = ""
    if not path or len(path) > MAX_PATH_CHARS:
        reason = f"an empty path or one over {MAX_PATH_CHARS} characters"
    elif not path.isprintable():
        reason = "control characters in the path"
    elif "\\" in path:
        reason = "a backslash in the path"
    elif path.startswith("/") or (len(path) > 1 and path[1] == ":"):
        reason = "an absolute path"
    parts = [p for p in PurePosixPath(path).parts if p != "."] if not reason else []
    if not reason and ".." in parts:
        reason = "a path out of the skill folder (..)"
    if reason:
        return {"path": shown, "status": "refused", "reason": reason}
    rel = "/".join(parts)
    row = stored.get(rel)
    if row is None:
        return {"path": rel, "status": "missing", "reason": "not a file stored with the skill"}
    return {"path": rel, "status": "present", "size": row["size"], "sha256": row["sha256"]}
