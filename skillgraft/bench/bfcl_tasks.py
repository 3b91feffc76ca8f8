"""Tasks of the Berkeley Function Calling Leaderboard, read from its installed package, and its
own prompt, decoder and checker.

``bfcl-eval`` ships its data (``bfcl_eval/data``: the questions, each with its function
documents, and ``possible_answer``: the accepted calls) and its AST checker. Its dependencies are
pinned for its API clients and would replace this project's (numpy, faiss-cpu), so it is
installed without them, with the three ``tree-sitter`` packages its decoder module imports::

    pip install --no-deps bfcl-eval==2026.3.23 tree-sitter==0.21.3 tree-sitter-java==0.21.0 tree-sitter-javascript==0.21.4

Its checker module imports the table of every model it knows (and with it every API client)
only to ask whether a model writes ``math.factorial`` as ``math_factorial``; prompted models
write the name as documented, so that table is stood in for while the checker is imported.
Only the Python single-turn categories are read: their calls are decoded by ``ast``. In the
irrelevance categories no offered function fits: an answer passes when it makes no call, as
BFCL's own runner judges it (its decoder fails, or decodes no call: ``is_empty_output``).
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import sys
import time
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from ..errors import ConfigError, InputError
from ..verify.verifiers import Verdict, Verifier, output_sha256

__all__ = ["BFCL_INSTALL", "CATEGORIES", "DEFAULT_CATEGORIES", "IRRELEVANCE", "BfclChecker", "BfclTask", "BfclVerifier", "category_tasks",
           "load_tasks"]

BFCL_INSTALL = ("pip install --no-deps bfcl-eval==2026.3.23 tree-sitter==0.21.3 tree-sitter-java==0.21.0 "
                "tree-sitter-javascript==0.21.4")
IRRELEVANCE = ("irrelevance", "live_irrelevance")
CATEGORIES = ("simple_python", "multiple", "parallel", "parallel_multiple", "live_simple", "live_multiple", "live_parallel",
              "live_parallel_multiple", *IRRELEVANCE)
DEFAULT_CATEGORIES = CATEGORIES[:4]  # the single-turn Python categories the first measurements used
PROMPT_FORMAT = "ret_fmt=python&tool_call_tag=False&func_doc_fmt=json&prompt_fmt=plaintext&style=classic"


@dataclass(frozen=True)
class BfclTask:
    """One single-turn task: the question (its chat), the functions BFCL offers with it, and
    the accepted calls (``ground_truth``: one ``{function: {param: [accepted values]}}`` a call)."""

    id: str
    category: str
    messages: tuple[tuple[str, str], ...]
    functions: tuple[dict, ...]
    ground_truth: tuple[dict, ...]

    @property
    def question(self) -> str:
        return next(content for role, content in reversed(self.messages) if role == "user")

    @property
    def irrelevant(self) -> bool:
        """Whether no offered function fits (the answer must make no call)."""
        return self.category in IRRELEVANCE

    def needed(self) -> list[dict]:
        """The documents of the functions the accepted calls use, in the order BFCL lists them."""
        names = {name for call in self.ground_truth for name in call}
        return [f for f in self.functions if f["name"] in names]

    def offered(self) -> list[dict]:
        """What BFCL's prompt would list for this task beside its instructions: the needed
        documents, or, where none fits, every function it offers."""
        return list(self.functions) if self.irrelevant else self.needed()


def _data_folder() -> Path:
    spec = importlib.util.find_spec("bfcl_eval")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError(f"the skills-effect benchmark needs BFCL's package: {BFCL_INSTALL}")
    return Path(list(spec.submodule_search_locations)[0]) / "data"


def _lines(path: Path) -> list[dict]:
    try:
        return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read BFCL's {path.name}: {exc}") from None


def category_tasks(category: str) -> list[BfclTask]:
    """Every task of ``category``, in BFCL's order."""
    if category not in CATEGORIES:
        raise InputError(f"unknown BFCL category {category!r}: choose from {', '.join(CATEGORIES)}")
    folder = _data_folder()
    answers = {} if category in IRRELEVANCE else {
        row["id"]: row["ground_truth"] for row in _lines(folder / "possible_answer" / f"BFCL_v4_{category}.json")}
    return [BfclTask(row["id"], category, tuple((m["role"], m["content"]) for m in row["question"][0]),
                     tuple(row["function"]), tuple(answers.get(row["id"], ())))
            for row in _lines(folder / f"BFCL_v4_{category}.json")]


def load_tasks(categories=DEFAULT_CATEGORIES, per_category: Optional[int] = None) -> list[BfclTask]:
    """The first ``per_category`` tasks (all when None) of each category, in BFCL's order."""
    unknown = [c for c in categories if c not in CATEGORIES]
    if unknown:
        raise InputError(f"unknown BFCL categories {unknown}: choose from {', '.join(CATEGORIES)}")
    return [task for category in categories for task in category_tasks(category)[:per_category]]


class _PromptedModels(dict):
    """Stands in for BFCL's model table: every prompted model keeps dotted names."""

    def __missing__(self, key):
        return types.SimpleNamespace(underscore_to_dot=False)


class BfclChecker:
    """BFCL's system prompt, its decoder of a prompted answer and its AST checker."""

    def __init__(self) -> None:
        _data_folder()
        table = "bfcl_eval.constants.model_config"
        stood_in = table not in sys.modules
        if stood_in:
            sys.modules[table] = types.SimpleNamespace(MODEL_CONFIG_MAPPING=_PromptedModels())
        try:
            checker = importlib.import_module("bfcl_eval.eval_checker.ast_eval.ast_checker")
            utils = importlib.import_module("bfcl_eval.model_handler.utils")
            enums = importlib.import_module("bfcl_eval.constants.enums")
        except ImportError as exc:
            raise ConfigError(f"BFCL's checker cannot be imported ({exc}): {BFCL_INSTALL}") from None
        finally:
            if stood_in:
                sys.modules.pop(table, None)
        self._check, self._decode, self._format = checker.ast_checker, utils.default_decode_ast_prompting, utils.formulate_system_prompt
        self._python = enums.Language.PYTHON
        self._no_call = importlib.import_module("bfcl_eval.utils").is_empty_output

    def system_prompt(self, functions) -> str:
        """BFCL's own system prompt for prompted models, listing ``functions``."""
        return self._format(PROMPT_FORMAT, list(functions))

    def instructions(self) -> str:
        """The system prompt with no function listed, up to where the list would begin."""
        empty = self.system_prompt([])
        return empty[: empty.rindex("Here is a list of functions")].rstrip()

    def tool_document(self, functions) -> str:
        """The part of the system prompt that lists ``functions`` (what a skill holds here)."""
        full = self.system_prompt(functions)
        return full[full.rindex("Here is a list of functions"):].rstrip()

    def calls(self, text: str) -> list[dict]:
        """The calls ``text`` makes as BFCL decodes them (``[{function: {param: value}}]``); none
        where it decodes no call."""
        try:
            calls = self._decode(text)
        except Exception:  # BFCL's decoder raises what ast raises
            return []
        return [] if self._no_call(calls) or not all(isinstance(c, dict) for c in calls) else calls

    def check(self, task: BfclTask, text: str) -> tuple[bool, str]:
        """Whether ``text`` makes an accepted call for ``task`` (for an irrelevance task: no
        call): (passed, BFCL's error type)."""
        if task.irrelevant:
            return (True, "") if not self.calls(text) else (False, "irrelevance_error:decoder_success")
        try:
            calls = self._decode(text)
        except Exception as exc:  # BFCL's decoder raises what ast raises: not a call is a failure
            return False, f"decode:{type(exc).__name__}"
        if not isinstance(calls, list) or not all(isinstance(c, dict) for c in calls):
            return False, "decode:not_calls"
        result = self._check(list(task.functions), calls, list(task.ground_truth), self._python, task.category, "prompted")
        return bool(result["valid"]), "" if result["valid"] else str(result.get("error_type", "invalid"))


class BfclVerifier(Verifier):
    """BFCL's checker as a verifier of one task's answers: the answer passes when the checker
    accepts it (:meth:`BfclChecker.check`)."""

    kind = "bfcl"

    def __init__(self, checker: BfclChecker, task: BfclTask) -> None:
        self.checker, self.task = checker, task

    def check(self, question, answer, method) -> Verdict:
        started = time.perf_counter()
        passed, why = self.checker.check(self.task, answer)
        detail = f"BFCL's checker on {self.task.id}: " + ("accepted" if passed else why)
        return Verdict(passed, self.kind, output_sha256(detail), time.perf_counter() - started, detail)
