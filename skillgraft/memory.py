"""SkillMemory: the facade an agent calls before each generation.

``recall(query)`` says what to do — ``exact`` (a verified answer to this very question),
``graft`` (one relevant block) or ``abstain`` — and ``generate(query)`` does it: returns the
verified answer, restores the block's KV state at its own position and generates after it
(no re-prefill), or generates plainly. After a graft a confidence gate checks the answer's
first tokens and falls back to plain generation when they are not confident
(:mod:`skillgraft.core.gate`); the chat after a grafted block is laid out by
:mod:`skillgraft.core.chat_layout`. Every recall and generation writes a ledger row.

This module is longer than most: it is the one public facade, and each memory verb
(deposit, recall, generate, chat, list/get/update/rename/delete, recapture, check) is a
short method that delegates to the store, router, engine or gate.
"""

from __future__ import annotations

import dataclasses
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Iterator, Optional, Sequence, Union

from .core.blocks import Block, solution_text
from .config import EngineSettings, default_home, default_model
from .core.states import KVState, TokenStep
from .core.timings import Timings

if TYPE_CHECKING:
    from .engine.llama import Engine
    from .store.check import CheckReport
    from .protocols import GraftEngine, TextEmbedder
from .errors import SkillgraftError, BlockNotFoundError, ConflictError, ContextOverflowError, DuplicateBlockError, InputError, NameTakenError
from .core.chat_layout import block_tokens, continuation, with_system
from .core.gate import DEFAULT_GATE_LOGPROB, GATE_SETTING, GATE_TOKENS, confidence, graft_verdict, repeats_answer  # noqa: F401
from .core.gate import FELL_BACK, Confidence, GateCalibration, GateCase, GateVerdict, calibrate_threshold
from .store.ledger import LedgerEvent
from .core.questions import normalize_question, question_sha256
from .routing.router import DEFAULT_EMBEDDER, MAX_EXAMPLES, MAX_QUERY_CHARS, Embedder, Recall, Router, RouterCalibration
from .routing.router import clean_query, manual_key_texts, name_key, require_text
from .core.sampling import SamplingOptions
from .core.sha import BLOCK_ID
from .verify.verifiers import make_verifier

REPEAT_PENALTY = 1.1  # what llama.cpp's own sampler uses by default
MAX_VOICE_TOKENS = 8
# A block must leave this many tokens of the context free for the question and the answer.
QUERY_ROOM_TOKENS = 256
MAX_NAME_CHARS = 200


@dataclass(frozen=True)
class Generation:
    """The outcome of :meth:`SkillMemory.generate`."""

    text: str
    decision: str
    block_id: Optional[str]
    decoded_tokens: int
    prefill_tokens_avoided: int
    timings: Timings
    recall: Recall
    gate: Optional[GateVerdict] = None
    steps: list = field(default_factory=list, repr=False)

    def as_dict(self) -> dict:
        return {
            "text": self.text,
            "decision": self.decision,
            "block_id": self.block_id,
            "decoded_tokens": self.decoded_tokens,
            "prefill_tokens_avoided": self.prefill_tokens_avoided,
            "timings": self.timings.as_dict(),
            "recall": self.recall.as_dict(),
            "gate": self.gate.as_dict() if self.gate else None,
        }


class SkillMemory:
    """A block store, its router and (lazily) one engine.

    ``reprefill_foreign=True`` lets a routed block captured under another runtime (other
    model file, context size, build ...) be answered by prefilling its stored source text
    instead of raising :class:`FingerprintMismatchError`; no prefill is then avoided.
    ``catalog`` and ``blocks`` are the store's URLs (see :mod:`skillgraft.store.backends`).
    """

    def __init__(
        self,
        home: Union[str, Path, None] = None,
        *,
        model: Union[str, Path, None] = None,
        settings: Optional[EngineSettings] = None,
        embedder: Union[str, Path, TextEmbedder, None] = None,
        engine: Optional[GraftEngine] = None,
        reprefill_foreign: bool = False,
        catalog: Optional[str] = None,
        blocks: Optional[str] = None,
    ) -> None:
        from .store.block_store import BlockStore

        if embedder is None or isinstance(embedder, (str, Path)):
            embedder = Embedder(str(embedder or DEFAULT_EMBEDDER))
        elif not isinstance(getattr(embedder, "name", None), str) or not callable(getattr(embedder, "encode", None)):
            raise InputError(f"the embedder must be a name or have .name and .encode(texts), got {type(embedder).__name__}")
        self.store = BlockStore(home or default_home(), catalog=catalog, blocks=blocks)
        self.model = model or default_model()
        self.settings = settings
        self._engine = engine
        self._owns_engine = engine is None
        self.reprefill_foreign = reprefill_foreign
        self.router = Router(self.store, embedder)

    @classmethod
    def open(cls, home: Union[str, Path, None] = None, **options) -> "SkillMemory":
        """Open (creating if needed) the store at ``home`` or ``$SKILLGRAFT_HOME``."""
        return cls(home, **options)

    @property
    def engine(self) -> "Engine":
        """The engine, loaded on first use (routing alone never loads the model)."""
        if self._engine is None:
            from .engine.llama import Engine

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

    def _source_tokens(self, text: str) -> list[int]:
        """The tokens a block of ``text`` captures: the chat prefix with ``text`` as system turn."""
        return block_tokens(self.engine, text)

    def _capturable_tokens(self, name: str, kind: str, text) -> list[int]:
        """The tokens a block of ``text`` would hold, or a clear error before any capture."""
        if not isinstance(text, str) or not text.strip():
            raise InputError(f"{kind} {name!r} has no text")
        require_text(text, f"{kind} {name!r}")
        tokens = self._source_tokens(text)
        room = self.engine.n_ctx - QUERY_ROOM_TOKENS
        if len(tokens) > room:
            raise ContextOverflowError(
                len(tokens), room, f"{kind} {name!r} (the context keeps {QUERY_ROOM_TOKENS} tokens free for questions)"
            )
        return tokens

    def _settle_capture(self, name: str, kind: str, text: str) -> tuple[list[int], Optional[Block]]:
        """Settle name clashes and duplicate text *before* any capture.

        Returns the tokens to capture and, when this very text is already stored under this
        name, that block (nothing to capture). Raises :class:`NameTakenError` or
        :class:`DuplicateBlockError` otherwise.
        """
        taken = self._named(name)
        if taken is not None:
            if taken.source == text and taken.status == "ok":
                return list(taken.tokens), taken
            raise NameTakenError(name, taken.id)
        tokens = self._capturable_tokens(name, kind, text)
        same = self.store.find_same(tokens, self.engine.fingerprint.id)
        if same is not None and same.status == "ok":
            if same.name == name and same.source == text:  # another process stored it meanwhile
                return tokens, same
            raise DuplicateBlockError(same.id, same.name, name)
        return tokens, None

    def _named(self, name: str) -> Optional[Block]:
        try:
            block = self.store.get(name)
        except BlockNotFoundError:
            return None
        return block if block.name == name else None

    def _capture(
        self, name: str, kind: str, text: str, description: str, solution: Optional[dict], progress=None
    ) -> Block:
        tokens, existing = self._settle_capture(name, kind, text)
        if existing is not None:
            return existing
        state = self.engine.capture(tokens, progress)
        block, _ = self.store.put(state, name=name, kind=kind, source=text, description=description, solution=solution)
        if block.name != name:  # the very same bytes are stored already (under another runtime)
            raise DuplicateBlockError(block.id, block.name, name)
        return block

    def add_manual(
        self, name: str, text: str, *, examples: Sequence[str] = (), description: str = "", progress=None
    ) -> Block:
        """Capture a skill manual as a block and make it routable by its name, description,
        examples and its own sentences.

        A name already taken raises :class:`NameTakenError` and a text already stored under
        another name :class:`DuplicateBlockError`, both before anything is captured; the same
        text under the same name returns the stored block. ``progress(done, total)`` is
        called as the manual's tokens are prefilled.
        """
        name = _clean_name(name)
        examples = _clean_keys(description, examples)
        block = self._capture(name, "manual", text, description, None, progress)
        self._add_keys(block, name=True, description=description, examples=examples, manual=text)
        return block

    def _add_keys(
        self, block: Block, *, name: bool = False, description: str = "", examples: Sequence[str] = (), manual: str = ""
    ) -> None:
        self.router.add_key_sets(block, [
            ("name", [name_key(block.name)] if name else []),
            ("description", [description]),
            ("example", examples),
            ("manual", manual_key_texts(manual) if manual else []),
        ])

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
        question = clean_query(question)
        if len(question) > MAX_QUERY_CHARS:
            raise InputError(f"the question is {len(question)} characters (at most {MAX_QUERY_CHARS})")
        examples = _clean_keys("", examples)
        if name is not None:
            name = _clean_name(name)
        if not isinstance(answer, str) or not answer.strip():
            raise InputError("the answer is empty")
        answer = answer.strip()
        key = normalize_question(question)
        if not key:
            raise InputError(f"the question {question!r} holds nothing visible to recur by")
        name = name or _solution_name(question, key)
        stored = self._stored_answer(key, answer, name)
        if stored is not None:
            return stored
        check = make_verifier(verifier, expected).verify(question, answer, method)
        stored = self._stored_answer(key, answer, name)  # another process may have won meanwhile
        if stored is not None:
            return stored
        block = self._capture(
            name,
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
        self.store.log(LedgerEvent("deposit", decision="solution", block_id=block.id, detail=check.as_dict()))
        return block

    def _stored_answer(self, key: str, answer: str, name: str) -> Optional[Block]:
        """The solution already stored for this question (same answer), or a clear error.

        A different stored answer raises :class:`ConflictError`; a name held by another block
        :class:`NameTakenError`. The store decides a race inside its write transaction.
        """
        def same_answer(other: Block) -> Block:
            if other.answer != answer:
                raise ConflictError(other.question or key, other.id, other.answer or "", answer)
            return other

        for other in self.store.solutions_for(key):
            return same_answer(other)
        taken = self._named(name)
        if taken is None:
            return None
        if taken.kind == "solution" and taken.status == "ok" and taken.question_key == key:
            return same_answer(taken)  # another writer stored this question between the two reads
        raise NameTakenError(name, taken.id)

    # -- recall ----------------------------------------------------------------------------

    def route(self, query) -> Recall:
        """The routing decision alone: ``graft`` one block or ``abstain``.

        Only blocks this runtime can graft are candidates (when the store holds blocks of
        several runtimes, say two models), unless ``reprefill_foreign`` is set.
        """
        accept = None
        if not self.reprefill_foreign and len(self.store.fingerprint_ids()) > 1:
            runtime = self.engine.fingerprint.id
            accept = lambda block: block.fingerprint_id == runtime  # noqa: E731
        recall = self.router.route(query, accept=accept)
        block = recall.block
        if recall.decision == "graft" and block.kind == "solution" and block.question_key != normalize_question(query):
            reason = (
                f"{recall.reason}; near miss: block {recall.block.name!r} is the verified solution of another "
                f"question ({recall.block.question!r}), grafted as a worked example only: its answer is not reused"
            )
            recall = dataclasses.replace(recall, reason=reason, near_miss=True)
        return recall

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
            self._log("recall", query, recall, timings=Timings(recall_s=time.perf_counter() - started))
        return recall

    def calibrate(self, in_domain, out_of_domain, **options) -> RouterCalibration:
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
        system: Optional[str] = None,
        max_tokens: int = 128,
        temperature: float = 0.0,
        seed: int = 0,
        voice: bool = False,
        gate: bool = True,
        recall: Optional[Recall] = None,
    ) -> Generation:
        """Apply the recall decision and generate (see the module docstring).

        ``system`` is the app's own system prompt: after a graft it is prefilled right after
        the restored block (see :meth:`chat`); it never changes what the query recalls.
        """
        query = clean_query(query)
        messages = with_system(system, [("user", query)])
        started = time.perf_counter()
        recall = recall or self.recall(query, log=False)
        recall_s = time.perf_counter() - started
        options = SamplingOptions(max_tokens, temperature, seed=seed, repeat_penalty=REPEAT_PENALTY)
        if recall.decision == "exact":
            result = self._exact(query, recall, voice, options)
        elif recall.decision == "graft":
            result = self._graft(messages, recall, gate, options)
        else:
            result = self._plain(messages, recall, options, Timings())
        result.timings.recall_s = recall_s
        result.timings.total_s = time.perf_counter() - started
        self._log("generate", query, recall, generation=result)
        return result

    def _exact(self, query: str, recall: Recall, voice: bool, options: SamplingOptions) -> Generation:
        block = recall.block
        if not voice:
            return Generation(block.answer, "exact", block.id, 0, block.n_tokens, Timings(), recall)
        # Let the model voice the verified answer with its solution grafted: a handful of tokens.
        timings, _ = self._restore(block, [("user", f"{query}\nReply with the verified answer only.")])
        steps = list(self.engine.generate(MAX_VOICE_TOKENS, temperature=0.0))
        text = "".join(s.piece for s in steps).strip()
        return Generation(text or block.answer, "exact", block.id, len(steps), block.n_tokens, timings, recall, steps=steps)

    def restored_tokens(self, block: Block, messages: Sequence[tuple[str, str]]) -> int:
        """How many of ``block``'s cells a graft leading this chat restores (see :meth:`chat`)."""
        return continuation(self.engine, block, messages)[0]

    def graft_verdict(
        self, block: Block, text: str, confident: Confidence, *, gate: bool = True, query: str = ""
    ) -> GateVerdict:
        """Whether a grafted answer to ``query`` stands; see :func:`skillgraft.core.gate.graft_verdict`."""
        return graft_verdict(block, text, confident, gate=gate, query=query)

    def confidence(self, steps: Sequence[TokenStep]) -> Confidence:
        """Mean log-probability of the first generated tokens against this store's gate threshold."""
        return confidence(steps, self.gate_threshold)

    def _restore(self, block: Block, messages: Sequence[tuple[str, str]]) -> tuple[Timings, int]:
        """The graft: restore ``block`` at its own position ``[0, N)`` and prefill the chat after it.

        Returns its timings and how many of the block's cells were restored.

        The restored cells are byte-identical to a fresh prefill of the block, and the whole
        graft equals a fresh prefill of the same tokens decoded in the same chunks. A block
        captured under another runtime raises :class:`FingerprintMismatchError`, unless
        ``reprefill_foreign`` was set: then its stored source text is prefilled.
        """
        engine = self.engine
        keep, text = continuation(engine, block, messages)
        after = engine.tokenize(text, add_bos=False)
        if self.reprefill_foreign and block.fingerprint_id != engine.fingerprint.id:
            started = time.perf_counter()
            engine.prefill(block_tokens(engine, block.source)[:keep] + after)
            return Timings(prefill_s=time.perf_counter() - started, reprefilled=True), 0
        loaded = self.store.load_state(block)
        started = time.perf_counter()
        engine.graft(loaded.state, after, block.id, keep=keep, verify_hash=False)
        return Timings(load_s=loaded.read_s, graft_s=time.perf_counter() - started, from_cache=loaded.from_cache), keep

    def _graft(self, messages: list, recall: Recall, gate: bool, options: SamplingOptions) -> Generation:
        block = recall.block
        timings, avoided = self._restore(block, messages)
        started = time.perf_counter()
        steps = list(self._sample(options))
        timings.generate_s = time.perf_counter() - started
        text = "".join(s.piece for s in steps).strip()
        query = next((content for role, content in reversed(messages) if role == "user"), "")
        verdict = self.graft_verdict(block, text, self.confidence(steps), gate=gate, query=query)
        if verdict.fell_back:
            fallback = self._plain(messages, recall, options, timings)
            return Generation(
                fallback.text, FELL_BACK, None, fallback.decoded_tokens + len(steps), 0, fallback.timings, recall,
                verdict, fallback.steps,
            )
        return Generation(text, "graft", block.id, len(steps), avoided, timings, recall, verdict, steps)

    def _plain(self, messages: list, recall: Recall, options: SamplingOptions, timings: Timings) -> Generation:
        """Generate without a block: an abstain, or the fallback of a graft that did not stand."""
        prompt = self.engine.chat_prompt(list(messages))
        started = time.perf_counter()
        self.engine.prefill(self.engine.tokenize(prompt))
        prefilled = time.perf_counter()
        steps = list(self._sample(options))
        timings = dataclasses.replace(timings, plain_prefill_s=prefilled - started, plain_generate_s=time.perf_counter() - prefilled)
        text = "".join(s.piece for s in steps).strip()
        return Generation(text, "abstain", None, len(steps), 0, timings, recall, steps=steps)

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
        own position as the leading system turn; the chat's own system turns and messages
        are prefilled after it, as the template renders them (see :mod:`skillgraft.core.chat_layout`), so
        the result equals a fresh prefill of the same chat. Otherwise the whole chat is
        prefilled.
        """
        if not messages:
            raise InputError("the chat has no messages")
        for role, content in messages:
            require_text(content, f"a {role} message")
        if block is None:
            self.engine.prefill(self.engine.tokenize(self.engine.chat_prompt(list(messages))))
        else:
            self._restore(block if isinstance(block, Block) else self.get(block), messages)
        yield from self._sample(SamplingOptions(max_tokens, temperature, seed=seed, repeat_penalty=REPEAT_PENALTY))

    def _sample(self, options: SamplingOptions) -> Iterator[TokenStep]:
        return self.engine.generate(
            options.max_tokens,
            temperature=options.temperature,
            top_p=options.top_p,
            seed=options.seed,
            repeat_penalty=options.repeat_penalty,
            penalty_last_n=options.penalty_last_n,
        )

    def calibrate_gate(
        self, cases: Sequence[tuple[str, str, str]], *, max_tokens: int = 32, save: bool = True
    ) -> GateCalibration:
        """Choose the gate threshold from grafted answers whose correctness is known.

        ``cases`` are ``(query, block name or id, text a right answer contains)``. The
        threshold is the highest that keeps every right answer; the report says how many
        wrong answers it turns away.
        """
        rows = []
        for query, block, expected in cases:
            steps = list(self.chat([("user", clean_query(query))], block=block, max_tokens=max_tokens))
            text = "".join(s.piece for s in steps)
            rows.append(GateCase(query, block, expected in text, self.confidence(steps).mean_logprob))
        report = calibrate_threshold(rows)
        if save:
            self.store.set_setting(GATE_SETTING, repr(report.threshold))
        return report

    # -- memory verbs ----------------------------------------------------------------------

    def list(self, kind: Optional[str] = None, *, include_quarantined: bool = False) -> list[Block]:
        """Every block (of ``kind``), oldest first."""
        return self.store.blocks(kind=kind, include_quarantined=include_quarantined)

    def get(self, ref: str) -> Block:
        """A block by id, unique id prefix, name, or the question a solution answers."""
        try:
            return self.store.get(ref)
        except BlockNotFoundError:
            matches = self.store.solutions_for(normalize_question(ref))
            if matches:
                return matches[0]
            raise

    def delete(self, ref: str) -> Block:
        """Delete a block, its routing keys and (when no other block shares it) its file."""
        return self.store.remove(self.get(ref).id)

    def rename(self, ref: str, new_name: str) -> Block:
        """Give a block a new name (free, or :class:`NameTakenError`); its name key follows."""
        block = self.get(ref)
        new_name = _clean_name(new_name)
        if new_name == block.name:
            return block
        keys = self.router.key_rows([("name", [name_key(new_name)])])  # before any change
        renamed = self.store.rename(block.id, new_name)
        self.store.set_routing_keys(block.id, "name", keys)
        return renamed

    def update(
        self,
        ref: str,
        *,
        text: Optional[str] = None,
        examples: Optional[Sequence[str]] = None,
        description: Optional[str] = None,
        progress=None,
    ) -> Block:
        """Change a manual's text (recaptured, keeping its name and keys), examples or description.

        ``examples`` and ``description``, when given, replace the old ones. A solution's text
        is its verified question and answer: add a new solution instead of editing it.
        """
        block = self.get(ref)
        if examples is not None:
            examples = _clean_keys(description or "", examples)
        elif description is not None:
            _clean_keys(description, ())
        new_text = text is not None and text != block.source
        sets = []
        if examples is not None:
            sets.append(("example", [*([block.question] if block.kind == "solution" else []), *examples]))
        if description is not None and description != block.description:
            sets.append(("description", [description]))
        if new_text:
            if block.kind == "solution":
                raise InputError(f"block {block.id} is a verified solution: add a new solution instead of editing it")
            tokens = self._capturable_tokens(block.name, block.kind, text)
            same = self.store.find_same(tokens, self.engine.fingerprint.id)
            if same is not None and same.id != block.id:
                raise DuplicateBlockError(same.id, same.name, block.name)
            sets.append(("manual", manual_key_texts(text)))
        rows = self.router.key_rows(sets)  # embedded before any change: a failing embedder changes nothing
        keys = {kind: [row for row in rows if row["kind"] == kind] for kind, _ in sets}
        if new_text:
            state = self.engine.capture(tokens, progress)
            block = self.store.replace(block, state, source=text, keys={"manual": keys["manual"]})
        if "description" in keys:
            block = self.store.set_description(block.id, description, keys["description"])
        if "example" in keys:
            self.store.set_routing_keys(block.id, "example", keys["example"])
        return block

    def recapture(self, progress=None) -> "RecaptureReport":
        """Capture every block again under the current runtime, keeping names, keys and answers.

        Blocks already captured under this runtime are left alone. Use it after changing the
        model file, a context setting or the llama.cpp build. ``progress(done, total)`` is
        called per block.
        """
        runtime = self.engine.fingerprint.id
        blocks = self.list(include_quarantined=True)
        report = RecaptureReport()
        for done, block in enumerate(blocks, 1):
            if block.fingerprint_id == runtime and block.status == "ok":
                report.unchanged.append(block.id)
            else:
                try:
                    state = self.engine.capture(self._source_tokens(block.source))
                    new = self.store.replace(block, state, source=block.source)
                    report.recaptured.append({"old": block.id, "new": new.id, "name": block.name})
                except SkillgraftError as exc:
                    report.failed.append({"block_id": block.id, "name": block.name, "error": str(exc)})
            if progress:
                progress(done, len(blocks))
        return report

    # -- upkeep ----------------------------------------------------------------------------

    def check(self, *, repair: bool = False) -> "CheckReport":
        """Store integrity; repair re-captures lost blocks from their source when the runtime
        matches, and gives each manual the routing keys of its own sentences (a manual stored
        before manuals had them, or one whose keys do not match its text)."""

        def recapture(block: Block) -> Optional[KVState]:
            if block.fingerprint_id != self.engine.fingerprint.id:
                return None
            state = self.engine.capture(list(block.tokens))
            return state if state.sha256 == block.sha256 else None

        report = self.store.check(repair=repair, recapture=recapture if repair else None)
        if repair:
            keyed: dict[str, set[str]] = {}
            for key in self.store.routing_keys():
                if key["kind"] == "manual":
                    keyed.setdefault(key["block_id"], set()).add(key["text"])
            for block in self.store.blocks(kind="manual", include_quarantined=False):
                texts = manual_key_texts(block.source)
                if keyed.get(block.id, set()) != {t.strip() for t in texts}:
                    self.router.replace_keys(block, texts, kind="manual")
                    problem = "routing keys that are not the manual's sentences" if block.id in keyed else (
                        "no routing keys from the manual's sentences")
                    report.repaired.append({
                        "block_id": block.id, "name": block.name, "problem": problem, "action": f"set {len(texts)}",
                    })
        return report

    def _log(
        self, event: str, query: str, recall: Recall, generation: Optional[Generation] = None, timings: Optional[Timings] = None
    ) -> None:
        common = dict(
            event=event, query_sha256=question_sha256(query), score=recall.score, threshold=recall.threshold,
        )
        if generation is None:
            self.store.log(LedgerEvent(decision=recall.decision, block_id=recall.block_id, timings=timings.as_dict() if timings else {}, **common))
            return
        self.store.log(LedgerEvent(
            decision=generation.decision, block_id=generation.block_id, timings=generation.timings.as_dict(),
            decoded_tokens=generation.decoded_tokens, prefill_tokens_avoided=generation.prefill_tokens_avoided,
            detail={"routed": recall.decision, "gate": generation.gate.as_dict() if generation.gate else None}, **common,
        ))


@dataclass
class RecaptureReport:
    """What :meth:`SkillMemory.recapture` did."""

    recaptured: list = field(default_factory=list)
    unchanged: list = field(default_factory=list)
    failed: list = field(default_factory=list)

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def _clean_name(name) -> str:
    if not isinstance(name, str) or not name.strip():
        raise InputError("a block needs a non-empty name")
    name = name.strip()
    if len(name) > MAX_NAME_CHARS or any(not c.isprintable() for c in name):
        raise InputError(f"a block name must be printable and at most {MAX_NAME_CHARS} characters: {name[:40]!r}")
    if BLOCK_ID.fullmatch(name):
        raise InputError(f"the name {name!r} has the form of a block id (16 hex digits): ids and names must not be confused")
    return name


def _clean_keys(description, examples) -> list[str]:
    """The examples as a list, or :class:`InputError` when a routing key text is not one a
    bundle can carry (see :mod:`skillgraft.bundles.reader`): each text without NUL bytes and at
    most ``MAX_QUERY_CHARS`` long, at most ``MAX_EXAMPLES`` examples."""
    if isinstance(examples, (str, bytes)):
        raise InputError("the examples must be a list of texts, not one text")
    examples = list(examples)
    if len(examples) > MAX_EXAMPLES:
        raise InputError(f"{len(examples)} examples given (at most {MAX_EXAMPLES})")
    for what, text in [("the description", description), *(("an example", t) for t in examples)]:
        stored_as_given = what == "the description"  # examples are stored stripped, a description as given
        require_text(text, what)
        size = len(text) if stored_as_given else len(text.strip())
        if size > MAX_QUERY_CHARS:
            raise InputError(f"{what} is {size} characters (at most {MAX_QUERY_CHARS}): {text[:40]!r}")
    return examples


def _solution_name(question: str, key: str) -> str:
    """A readable default name for a solution: its question's words plus a short hash."""
    words = re.sub(r"[^0-9a-z]+", "-", key.casefold()).strip("-")[:40].rstrip("-")
    return f"solution-{words}-{question_sha256(key)[:8]}" if words else f"solution-{question_sha256(key)[:10]}"
