"""SkillMemory: the facade an agent calls before each generation.

``recall(query)`` says what to do — ``exact`` (a verified answer to this very question),
``graft`` (one relevant block) or ``abstain`` — and ``generate(query)`` does it: returns the
verified answer, restores the block's KV state at its own position and generates after it
(no re-prefill), or generates plainly. After a graft a confidence gate checks the answer's
first tokens and falls back to plain generation when they are not confident. Every recall
and generation writes a ledger row.
"""

from __future__ import annotations

import hashlib
import re
import time
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Optional, Sequence, Union

from .blocks import Block
from .config import EngineSettings, default_home, default_model
from .engine import Engine, KVState, TokenStep
from .errors import ConflictError, InputError
from .router import DEFAULT_EMBEDDER, Embedder, Recall, Router, clean_query

# Mean log-probability of the first grafted tokens below which the graft is not trusted:
# the highest value that kept every right answer of the gate evaluation (docs/routing.md).
DEFAULT_GATE_LOGPROB = -0.75
GATE_TOKENS = 8
GATE_SETTING = "gate.mean_logprob"
REPEAT_PENALTY = 1.1  # what llama.cpp's own sampler uses by default
MAX_VOICE_TOKENS = 8


def normalize_question(text: str) -> str:
    """The key under which a verified question recurs: case, whitespace, punctuation and
    number formatting folded, operators kept (``"What is 1,000 + 2.50?"`` → ``"what is 1000+2.5"``)."""
    text = unicodedata.normalize("NFKC", text).casefold()
    text = re.sub(r"(?<=\d),(?=\d{3}\b)", "", text)
    text = re.sub(r"\d+\.\d+", lambda m: repr(float(m.group())).rstrip("0").rstrip("."), text)
    text = re.sub(r"[^\w\s.+\-*/^=%<>()]|(?<!\d)\.|\.(?!\d)", " ", text)
    text = re.sub(r"\s*([+\-*/^=%<>()])\s*", r"\1", text)
    return " ".join(text.split())


def question_sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Generation:
    """The outcome of :meth:`SkillMemory.generate`."""

    text: str
    decision: str
    block_id: Optional[str]
    decoded_tokens: int
    prefill_tokens_avoided: int
    timings: dict
    recall: Recall
    gate: Optional[dict] = None
    steps: list = field(default_factory=list, repr=False)

    def as_dict(self) -> dict:
        return {
            "text": self.text,
            "decision": self.decision,
            "block_id": self.block_id,
            "decoded_tokens": self.decoded_tokens,
            "prefill_tokens_avoided": self.prefill_tokens_avoided,
            "timings": self.timings,
            "recall": self.recall.as_dict(),
            "gate": self.gate,
        }


class SkillMemory:
    """A block store, its router and (lazily) one engine.

    ``reprefill_foreign=True`` lets a routed block captured under another runtime (other
    model file, context size, build ...) be answered by prefilling its stored source text
    instead of raising :class:`FingerprintMismatchError`; no prefill is then avoided.
    """

    def __init__(
        self,
        home: Union[str, Path, None] = None,
        *,
        model: Union[str, Path, None] = None,
        settings: Optional[EngineSettings] = None,
        embedder: Union[str, Embedder, None] = None,
        engine: Optional[Engine] = None,
        reprefill_foreign: bool = False,
    ) -> None:
        from .store import BlockStore

        self.store = BlockStore(home or default_home())
        self.model = model or default_model()
        self.settings = settings
        self._engine = engine
        self._owns_engine = engine is None
        self.reprefill_foreign = reprefill_foreign
        if not isinstance(embedder, Embedder):
            embedder = Embedder(embedder or DEFAULT_EMBEDDER)
        self.router = Router(self.store, embedder)

    @classmethod
    def open(cls, home: Union[str, Path, None] = None, **options) -> "SkillMemory":
        """Open (creating if needed) the store at ``home`` or ``$SKILLGRAFT_HOME``."""
        return cls(home, **options)

    @property
    def engine(self) -> Engine:
        if self._engine is None:
            self._engine = Engine(self.model, self.settings)
        return self._engine

    def close(self) -> None:
        if self._engine is not None and self._owns_engine:
            self._engine.close()
            self._engine = None
        self.store.close()

    def __enter__(self) -> "SkillMemory":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- deposits --------------------------------------------------------------------------

    def _prefix_tokens(self, system_text: str) -> list[int]:
        prefix, _ = self.engine.chat_split(system_text)
        return self.engine.tokenize(prefix)

    def _capture(
        self, name: str, kind: str, text: str, description: str, solution: Optional[dict], progress=None
    ) -> Block:
        if not isinstance(text, str) or not text.strip():
            raise InputError(f"{kind} {name!r} has no text")
        tokens = self._prefix_tokens(text)
        existing = self.store.find_same(tokens, self.engine.fingerprint.id)
        if existing is not None and existing.status == "ok":
            return existing
        state = self.engine.capture(tokens, progress)
        block, _ = self.store.put(state, name=name, kind=kind, source=text, description=description, solution=solution)
        return block

    def add_manual(
        self, name: str, text: str, *, examples: Sequence[str] = (), description: str = "", progress=None
    ) -> Block:
        """Capture a skill manual as a block and make it routable by name, description and examples.

        ``progress(done, total)`` is called as the manual's tokens are prefilled.
        """
        if not isinstance(name, str) or not name.strip():
            raise InputError("a manual needs a non-empty name")
        block = self._capture(name.strip(), "manual", text, description, None, progress)
        self.router.add_keys(block, [block.name.replace("-", " ").replace("_", " ")], kind="name")
        if description:
            self.router.add_keys(block, [description], kind="description")
        self.router.add_keys(block, examples, kind="example")
        return block

    def add_solution(
        self,
        question: str,
        answer: str,
        *,
        method: Optional[str] = None,
        verifier=None,
        expected: Optional[str] = None,
        name: Optional[str] = None,
        examples: Sequence[str] = (),
    ) -> Block:
        """Verify a solution and deposit it; unverified or failing solutions are never stored.

        ``verifier`` is ``"python"``, ``"exact"``, ``"numeric"``, a :class:`Verifier` or a
        callable ``(question, answer, method) -> bool``; ``exact`` and ``numeric`` compare
        with ``expected`` (the ground truth).
        """
        from .flywheel import make_verifier, solution_text

        question = clean_query(question)
        if not isinstance(answer, str) or not answer.strip():
            raise InputError("the answer is empty")
        answer = answer.strip()
        key = normalize_question(question)
        for other in self.store.solutions_for(key):
            if other.answer != answer:
                raise ConflictError(
                    f"question {question!r} is stored as block {other.id} with answer {other.answer!r}, not {answer!r}"
                )
            return other
        check = make_verifier(verifier, expected).verify(question, answer, method)
        block = self._capture(
            name or f"solution-{question_sha256(key)[:10]}",
            "solution",
            solution_text(question, answer, method),
            question,
            {
                "question": question,
                "question_key": key,
                "answer": answer,
                "method": method,
                "verifier": check.verifier,
                "verifier_output_sha256": check.output_sha256,
                "verify_seconds": check.seconds,
            },
        )
        self.router.add_keys(block, [question, *examples], kind="example")
        self.store.log("deposit", block_id=block.id, decision="solution", detail=check.as_dict())
        return block

    # -- recall ----------------------------------------------------------------------------

    def route(self, query) -> Recall:
        """The routing decision alone: ``graft`` one block or ``abstain``."""
        return self.router.route(query)

    def recall(self, query, *, log: bool = True) -> Recall:
        """``exact`` when the normalized query is a verified question, else :meth:`route`."""
        query = clean_query(query)
        started = time.perf_counter()
        matches = self.store.solutions_for(normalize_question(query))
        if matches:
            block = matches[0]
            recall = Recall("exact", block, 1.0, 1.0, f"the question recurs: verified answer in block {block.id}")
        else:
            recall = self.route(query)
        if log:
            self._log("recall", query, recall, timings={"recall_s": time.perf_counter() - started})
        return recall

    before_generation = recall

    def calibrate(self, in_domain, out_of_domain, **options) -> dict:
        """Choose and store the abstain threshold; see :meth:`Router.calibrate`."""
        return self.router.calibrate(in_domain, out_of_domain, **options)

    # -- generation ------------------------------------------------------------------------

    @property
    def gate_threshold(self) -> float:
        stored = self.store.setting(GATE_SETTING)
        return float(stored) if stored is not None else DEFAULT_GATE_LOGPROB

    def generate(
        self,
        query,
        *,
        max_tokens: int = 128,
        temperature: float = 0.0,
        seed: int = 0,
        voice: bool = False,
        gate: bool = True,
        recall: Optional[Recall] = None,
    ) -> Generation:
        """Apply the recall decision and generate (see the module docstring)."""
        query = clean_query(query)
        started = time.perf_counter()
        recall = recall or self.recall(query, log=False)
        recall_s = time.perf_counter() - started
        options = {"max_tokens": max_tokens, "temperature": temperature, "seed": seed}
        if recall.decision == "exact":
            result = self._exact(query, recall, voice, options)
        elif recall.decision == "graft":
            result = self._graft(query, recall, gate, options)
        else:
            result = self._plain(query, recall, "abstain", options, {})
        result.timings["recall_s"] = recall_s
        result.timings["total_s"] = time.perf_counter() - started
        self._log("generate", query, recall, generation=result)
        return result

    def _exact(self, query: str, recall: Recall, voice: bool, options: dict) -> Generation:
        block = recall.block
        if not voice:
            return Generation(block.answer, "exact", block.id, 0, block.n_tokens, {}, recall)
        # Let the model voice the verified answer with its solution grafted: a handful of tokens.
        timings = self._restore(block, f"{query}\nReply with the verified answer only.")
        steps = list(self.engine.generate(MAX_VOICE_TOKENS, temperature=0.0))
        text = "".join(s.piece for s in steps).strip()
        return Generation(text or block.answer, "exact", block.id, len(steps), block.n_tokens, timings, recall, steps=steps)

    def _restore(self, block: Block, query: str) -> dict:
        """Restore ``block`` at its own position and evaluate the user's turn after it.

        A block captured under another runtime raises :class:`FingerprintMismatchError`,
        unless ``reprefill_foreign`` was set: then its stored source text is prefilled.
        """
        prefix, turn = self.engine.chat_split(block.source, query)
        if self.reprefill_foreign and block.fingerprint_id != self.engine.fingerprint.id:
            started = time.perf_counter()
            self.engine.prefill(self.engine.tokenize(prefix) + self.engine.tokenize(turn, add_bos=False))
            return {"reprefilled": True, "prefill_s": time.perf_counter() - started}
        loaded = self.store.load_state(block)
        started = time.perf_counter()
        self.engine.restore(loaded.state, block.id, verify_hash=False)
        restored = time.perf_counter()
        self.engine.append(self.engine.tokenize(turn, add_bos=False))
        return {
            "load_s": loaded.read_s,
            "from_cache": loaded.from_cache,
            "restore_s": restored - started,
            "query_prefill_s": time.perf_counter() - restored,
        }

    def _graft(self, query: str, recall: Recall, gate: bool, options: dict) -> Generation:
        block = recall.block
        timings = self._restore(block, query)
        started = time.perf_counter()
        steps = list(self._sample(options))
        timings["generate_s"] = time.perf_counter() - started
        verdict = self.confidence(steps)
        if gate and not verdict["confident"]:
            fallback = self._plain(query, recall, "abstain", options, timings)
            gate_info = {**verdict, "fell_back": True, "reason": f"graft not confident: {verdict['reason']}; generated plainly"}
            return Generation(
                fallback.text, "abstain", None, fallback.decoded_tokens + len(steps), 0, fallback.timings, recall,
                gate_info, fallback.steps,
            )
        text = "".join(s.piece for s in steps).strip()
        avoided = 0 if timings.get("reprefilled") else block.n_tokens
        return Generation(text, "graft", block.id, len(steps), avoided, timings, recall, {**verdict, "fell_back": False}, steps)

    def _plain(self, query: str, recall: Recall, decision: str, options: dict, timings: dict) -> Generation:
        prompt = self.engine.chat_prompt([("user", query)])
        started = time.perf_counter()
        self.engine.prefill(self.engine.tokenize(prompt))
        prefilled = time.perf_counter()
        steps = list(self._sample(options))
        timings = {**timings, "plain_prefill_s": prefilled - started, "plain_generate_s": time.perf_counter() - prefilled}
        text = "".join(s.piece for s in steps).strip()
        return Generation(text, decision, None, len(steps), 0, timings, recall, steps=steps)

    def chat(
        self,
        messages: Sequence[tuple[str, str]],
        *,
        block: Union[Block, str, None] = None,
        max_tokens: int = 256,
        temperature: float = 0.0,
        seed: int = 0,
    ) -> Iterator[TokenStep]:
        """Stream tokens after a chat of ``[(role, content), ...]``.

        With ``block`` (a :class:`Block`, id or name) the block's state is restored at its
        own position as the leading system turn and only the chat after it is prefilled;
        otherwise the whole chat is prefilled.
        """
        if not messages:
            raise InputError("the chat has no messages")
        engine = self.engine
        if block is None:
            engine.prefill(engine.tokenize(engine.chat_prompt(list(messages))))
        else:
            block = block if isinstance(block, Block) else self.store.get(block)
            prefix, _ = engine.chat_split(block.source)
            rendered = engine.chat_prompt([("system", block.source), *messages])
            if not rendered.startswith(prefix):
                raise InputError(f"block {block.id} cannot lead this chat: the template reorders the system turn")
            loaded = self.store.load_state(block)
            engine.restore(loaded.state, block.id, verify_hash=False)
            engine.append(engine.tokenize(rendered[len(prefix):], add_bos=False))
        yield from self._sample({"max_tokens": max_tokens, "temperature": temperature, "seed": seed})

    def _sample(self, options: dict) -> Iterator[TokenStep]:
        return self.engine.generate(
            options["max_tokens"], temperature=options["temperature"], seed=options["seed"], repeat_penalty=REPEAT_PENALTY
        )

    def confidence(self, steps: Sequence[TokenStep]) -> dict:
        """Mean log-probability of the first generated tokens against the gate threshold."""
        head = list(steps)[:GATE_TOKENS]
        threshold = self.gate_threshold
        if not head:
            return {"confident": False, "mean_logprob": None, "threshold": threshold, "reason": "no tokens generated"}
        mean = sum(s.logprob for s in head) / len(head)
        confident = mean >= threshold
        relation = ">=" if confident else "<"
        return {
            "confident": confident,
            "mean_logprob": round(mean, 4),
            "threshold": threshold,
            "reason": f"mean log-probability of the first {len(head)} tokens {mean:.3f} {relation} {threshold:.3f}",
        }

    def calibrate_gate(self, cases: Sequence[tuple[str, str, str]], *, max_tokens: int = 32, save: bool = True) -> dict:
        """Choose the gate threshold from grafted answers whose correctness is known.

        ``cases`` are ``(query, block name or id, text a right answer contains)``. The
        threshold is the highest that keeps every right answer; the report says how many
        wrong answers it turns away.
        """
        rows = []
        for query, block, expected in cases:
            steps = list(self.chat([("user", clean_query(query))], block=block, max_tokens=max_tokens))
            text = "".join(s.piece for s in steps)
            rows.append({"query": query, "block": block, "correct": expected in text,
                         "mean_logprob": self.confidence(steps)["mean_logprob"]})
        right = [r["mean_logprob"] for r in rows if r["correct"] and r["mean_logprob"] is not None]
        if not right:
            raise InputError("no grafted answer was right, so no threshold can keep the right ones")
        threshold = round(min(right) - 0.005, 4)
        wrong = [r for r in rows if not r["correct"]]
        report = {
            "threshold": threshold,
            "cases": len(rows),
            "right": len(right),
            "wrong_turned_away": sum(1 for r in wrong if r["mean_logprob"] is None or r["mean_logprob"] < threshold),
            "wrong": len(wrong),
            "rows": rows,
        }
        if save:
            self.store.set_setting(GATE_SETTING, repr(threshold))
        return report

    # -- upkeep ----------------------------------------------------------------------------

    def check(self, *, repair: bool = False) -> dict:
        """Store integrity; repair re-captures lost blocks from their source when the runtime matches."""

        def recapture(block: Block) -> Optional[KVState]:
            if block.fingerprint_id != self.engine.fingerprint.id:
                return None
            state = self.engine.capture(list(block.tokens))
            return state if state.sha256 == block.sha256 else None

        return self.store.check(repair=repair, recapture=recapture if repair else None)

    def _log(self, event: str, query: str, recall: Recall, generation: Optional[Generation] = None, timings=None) -> None:
        fields = {
            "query_sha256": question_sha256(query),
            "decision": generation.decision if generation else recall.decision,
            "block_id": generation.block_id if generation else recall.block_id,
            "score": recall.score,
            "threshold": recall.threshold,
            "timings": generation.timings if generation else (timings or {}),
        }
        if generation:
            fields.update(
                decoded_tokens=generation.decoded_tokens,
                prefill_tokens_avoided=generation.prefill_tokens_avoided,
                detail={"routed": recall.decision, "gate": generation.gate},
            )
        self.store.log(event, **fields)
