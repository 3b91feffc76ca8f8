"""Verifiers: the external checks a solution must pass before it is ever deposited.

- ``exact``: the answer equals the expected one after normalization;
- ``numeric``: the answer and the expected value are equal numbers within a tolerance;
- ``python``: the method code runs in :mod:`skillgraft.verify.sandbox` (its own PID, mount, network
  and IPC namespaces; a private, size-bounded /tmp; wall, CPU, memory, process, file size and
  output limits; a scrubbed environment; an unprivileged user) and its last printed line must
  equal the answer;
- any callable ``(question, answer, method) -> bool``.

:class:`Accepted` re-uses a verdict already reached, so a candidate is not verified twice.
This module knows nothing of the memory: the memory and the flywheel both import it.
"""

from __future__ import annotations

import hashlib
import math
import re
import time
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass
from typing import Callable, Optional, Union

from ..errors import ConfigError, InputError, VerificationError
from .sandbox import Limits, SandboxRun, run_python


@dataclass(frozen=True)
class Verdict:
    """What a verifier concluded."""

    ok: bool
    verifier: str
    output_sha256: str
    seconds: float
    detail: str = ""

    def as_dict(self) -> dict:
        return asdict(self)


def output_sha256(text: str) -> str:
    """SHA-256 of a verifier's output, as a :class:`Verdict` records it."""
    return hashlib.sha256(text.encode("utf-8", "replace")).hexdigest()


def withheld_refusal(answer: Optional[str] = None) -> str:
    """What a remote client (HTTP, MCP) is told when its solution is not verified: never what
    the method printed (beyond the verdict, nothing of a run leaves the sandbox)."""
    subject = f"the answer {answer!r}" if answer is not None else "the answer"
    return (
        f"{subject} was not verified: the method did not print it, or failed; nothing was stored "
        "(what the method printed is not shown to remote clients)"
    )


_NUMBER = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")
_THOUSANDS = re.compile(r"[+-]?[0-9]{1,3}(,[0-9]{3})+(\.[0-9]*)?")


def _parse_number(text: str) -> Optional[float]:
    """The finite number ``text`` writes in ASCII digits, commas only as thousands separators
    (``39,1`` is not 391), else None."""
    cleaned = text.strip()
    if _THOUSANDS.fullmatch(cleaned):
        cleaned = cleaned.replace(",", "")
    cleaned = cleaned.rstrip(".")
    if not _NUMBER.fullmatch(cleaned):
        return None
    value = float(cleaned)
    return value if math.isfinite(value) else None


def answers_match(expected: str, actual: str, rel_tol: float = 1e-9, abs_tol: float = 1e-9) -> bool:
    """Numbers compare numerically, text after folding case and whitespace."""
    a, b = _parse_number(expected), _parse_number(actual)
    if a is not None and b is not None:
        return math.isclose(a, b, rel_tol=rel_tol, abs_tol=abs_tol)
    return " ".join(expected.casefold().split()) == " ".join(actual.casefold().split())


class Verifier(ABC):
    """Base class: :meth:`check` returns a :class:`Verdict`; :meth:`verify` raises on failure."""

    kind = "custom"

    @abstractmethod
    def check(self, question: str, answer: str, method: Optional[str]) -> Verdict:
        """Judge ``answer`` (and ``method``, where the verifier runs it)."""

    def verify(self, question: str, answer: str, method: Optional[str]) -> Verdict:
        verdict = self.check(question, answer, method)
        if not verdict.ok:
            raise VerificationError(f"{self.kind} verifier refused the answer {answer!r}: {verdict.detail}")
        return verdict


class ExactVerifier(Verifier):
    """The answer must equal ``expected`` (case and whitespace folded)."""

    kind = "exact"

    def __init__(self, expected: Optional[str] = None) -> None:
        self.expected = expected

    def check(self, question, answer, method) -> Verdict:
        started = time.perf_counter()
        if self.expected is None:
            raise InputError("the exact verifier needs the expected answer (ground truth)")
        ok = " ".join(self.expected.casefold().split()) == " ".join(answer.casefold().split())
        detail = "matches the ground truth" if ok else f"expected {self.expected!r}"
        return Verdict(ok, self.kind, output_sha256(self.expected), time.perf_counter() - started, detail)


class NumericVerifier(Verifier):
    """The answer must be the number ``expected`` within ``rel_tol`` / ``abs_tol``."""

    kind = "numeric"

    def __init__(self, expected: Union[float, str, None] = None, rel_tol: float = 1e-9, abs_tol: float = 1e-9) -> None:
        self.expected, self.rel_tol, self.abs_tol = expected, rel_tol, abs_tol

    def check(self, question, answer, method) -> Verdict:
        started = time.perf_counter()
        if self.expected is None:
            raise InputError("the numeric verifier needs the expected value (ground truth)")
        got = _parse_number(answer)
        want = _parse_number(str(self.expected))
        if want is None:
            raise InputError(f"the expected value {self.expected!r} is not a number")
        ok = got is not None and math.isclose(got, want, rel_tol=self.rel_tol, abs_tol=self.abs_tol)
        detail = "equal within tolerance" if ok else f"{answer!r} is not {want}"
        return Verdict(ok, self.kind, output_sha256(str(want)), time.perf_counter() - started, detail)


class CallableVerifier(Verifier):
    """Wraps ``function(question, answer, method) -> bool``."""

    def __init__(self, function: Callable[[str, str, Optional[str]], bool], name: str = "") -> None:
        self.function = function
        self.kind = f"callable:{name or getattr(function, '__name__', 'verifier')}"

    def check(self, question, answer, method) -> Verdict:
        started = time.perf_counter()
        try:
            ok = bool(self.function(question, answer, method))
        except Exception as exc:
            return Verdict(False, self.kind, output_sha256(repr(exc)), time.perf_counter() - started, f"raised {exc!r}")
        return Verdict(ok, self.kind, output_sha256(str(ok)), time.perf_counter() - started, "accepted" if ok else "rejected")


class PythonVerifier(Verifier):
    """Runs the method code in the sandbox (:mod:`skillgraft.verify.sandbox`); its last printed line must
    equal the answer. Output over ``max_output_bytes`` is refused, never judged on a partial line."""

    kind = "python"

    def __init__(
        self,
        *,
        timeout_s: float = 10.0,
        cpu_s: int = 5,
        memory_mb: int = 512,
        max_processes: int = 16,
        max_output_bytes: int = 65536,
        tmp_mb: int = 32,
    ) -> None:
        self.timeout_s, self.cpu_s, self.memory_mb = timeout_s, cpu_s, memory_mb
        self.max_processes, self.max_output_bytes, self.tmp_mb = max_processes, max_output_bytes, tmp_mb

    @property
    def limits(self) -> Limits:
        return Limits(
            wall_s=self.timeout_s,
            cpu_s=self.cpu_s,
            memory_mb=self.memory_mb,
            max_processes=self.max_processes,
            max_output_bytes=self.max_output_bytes,
            tmp_mb=self.tmp_mb,
        )

    def execute(self, code: str) -> SandboxRun:
        """Run ``code`` in a fresh sandbox under this verifier's limits."""
        return run_python(code, self.limits)

    def run(self, code: str) -> tuple[int, str, str, float]:
        """Run ``code``; return ``(returncode, stdout, stderr, seconds)``. Negative: killed by that signal."""
        result = self.execute(code)
        stderr = result.stderr + (f"\n{result.killed_reason}" if result.killed_reason else "")
        return result.returncode, result.stdout, stderr, result.seconds

    def check(self, question, answer, method) -> Verdict:
        if not method or not method.strip():
            raise InputError("the python verifier needs method code to run")
        result = self.execute(method)
        out, err, seconds = result.stdout, result.stderr, result.seconds
        if result.truncated:
            detail = f"method refused: {result.killed_reason}; its last line is not judged"
            return Verdict(False, self.kind, output_sha256(out + err), seconds, detail)
        if result.killed_reason or result.returncode != 0:
            if result.killed_reason:
                reason = f"killed: {result.killed_reason}"
            elif result.returncode < 0:
                reason = f"killed by signal {-result.returncode} (time or resource limit)"
            else:
                reason = f"exit code {result.returncode}"
            last = (err.strip().splitlines() or [""])[-1] or ("" if result.killed_reason else "no error output")
            detail = f"method failed: {reason}" + (f": {last}" if last else "")
            return Verdict(False, self.kind, output_sha256(out + err), seconds, detail)
        lines = [line.strip() for line in out.strip().splitlines() if line.strip()]
        printed = lines[-1] if lines else ""
        ok = answers_match(answer, printed)
        detail = f"method printed {printed!r}" + ("" if ok else f", not {answer!r}")
        return Verdict(ok, self.kind, output_sha256(out), seconds, detail)


def make_verifier(spec, expected: Optional[str] = None) -> Verifier:
    """A verifier from a name (``python``, ``exact``, ``numeric``), an instance or a callable.

    For ``exact`` and ``numeric`` given by name, ``expected`` is the ground truth.
    """
    if isinstance(spec, Verifier):
        return spec
    if spec == "python":
        return PythonVerifier()
    if spec == "exact":
        return ExactVerifier(expected)
    if spec == "numeric":
        return NumericVerifier(expected)
    if callable(spec):
        return CallableVerifier(spec)
    if spec is None:
        raise InputError("a verifier is required: unverified solutions are never stored")
    raise ConfigError(f"unknown verifier {spec!r}: use python, exact, numeric or a callable")


class Accepted(Verifier):
    """Re-uses a verdict already reached, so a candidate is not verified twice."""

    def __init__(self, verdict: Verdict) -> None:
        self.verdict, self.kind = verdict, verdict.verifier

    def check(self, question, answer, method) -> Verdict:
        return self.verdict
