"""``skillgraft mcp``: the skill memory as MCP tools over stdio (the ``mcp`` SDK).

Tools: ``recall`` (what the memory would do for a question, with the routed skill's text
for the host's own model and the memory's note), ``read_skill`` (one skill's text, examples
and, for a solution, its answer, method and verifier), ``ask`` (answer it through the answer
pipeline: the text with the pipeline's note, whatever its decision — exact, graft, fallback
or abstain; ``route`` false for a plain answer) and ``list_skills``; with deposits allowed
(``--allow-deposits``, rate-limited) also ``add_manual``, ``add_solution`` (verified here by
running its method in the sandbox; nothing the client says is trusted) and ``feedback`` (a
routing correction, given by ``mcp``). Results are typed (pydantic models and dataclasses), so MCP hosts see their
schemas. The memory is used by one tool call at a time; a refused call (a
:class:`SkillgraftError`) returns its message as the tool's error, except what a refused
method printed. Imported Agent Skills are also ``skill://`` resources (``skill://index.json``,
``skill://NAME/PATH``), listed and described by the MCP Skills extension's ``skills/list`` and
``skills/get`` (:mod:`.skills_extension`). Logs go to stderr at WARNING unless asked for more. Needs the ``serve`` extra.
"""

from __future__ import annotations

import dataclasses
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Optional, Union

from pydantic import BaseModel

from ..core.answer import AnswerNote
from ..core.blocks import Block
from ..core.skill_text import SkillRecall, SkillText, recall_text, skill_text
from ..deposit_policy import DepositPolicy, DepositRate
from ..errors import ConflictError, ContextOverflowError, SkillgraftError, VerificationError
from ..memory import SkillMemory
from ..routing.feedback import FeedbackResult, give_feedback
from ..skills.manual_split import with_split_hint
from ..verify.verifiers import withheld_refusal

INSTRUCTIONS = (
    "A verified memory of skills. Call recall before answering a question in one of the skills listed "
    "by list_skills: it returns the skill's text (or a verified answer) and how to use it; ask answers "
    "with the memory's own model; add_solution stores an answer only after its method is run and checked."
)


@dataclass(frozen=True)
class AskResult(AnswerNote):
    """An answer of ``ask``: the pipeline's note (its fields, as every door reports them), the
    answer's ``text`` and how many tokens were generated for it."""

    text: str = dataclasses.field(kw_only=True)
    completion_tokens: int = dataclasses.field(kw_only=True)

    @classmethod
    def of(cls, note: AnswerNote, text: str, completion_tokens: int) -> "AskResult":
        fields = {field.name: getattr(note, field.name) for field in dataclasses.fields(AnswerNote)}
        return cls(**fields, text=text, completion_tokens=completion_tokens)


class SkillInfo(BaseModel):
    id: str
    name: str
    kind: Literal["manual", "solution"]
    description: str
    n_tokens: int
    question: Optional[str] = None
    answer: Optional[str] = None

    @classmethod
    def of(cls, block: Block) -> "SkillInfo":
        return cls(
            id=block.id, name=block.name, kind=block.kind, description=block.description,
            n_tokens=block.n_tokens, question=block.question, answer=block.answer,
        )


def build_server(memory: SkillMemory, deposits: DepositPolicy = DepositPolicy(), *, log_level: str = "WARNING"):
    """An :class:`mcp.server.MCPServer` whose tools use ``memory``; the deposit tools only
    when ``deposits`` allows them. The SDK logs at ``log_level``."""
    from mcp.server import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError

    from mcp_types import Resource

    from .skills_extension import skill_md_listing, skills_extension

    lock = threading.Lock()

    class Server(MCPServer):
        async def list_resources(self):
            """The registered resources, then each imported skill's SKILL.md (read at each call)."""
            with lock:
                listed = skill_md_listing(memory)
            return [*await super().list_resources(), *(Resource(**entry) for entry in listed)]

    server = Server("skillgraft", instructions=INSTRUCTIONS, log_level=log_level,
                    extensions=[skills_extension(memory, lock)])

    @contextmanager
    def one_call():
        """One tool call at a time; a refusal reaches the client as its message, not as a crash."""
        with lock:
            try:
                yield
            except SkillgraftError as exc:
                raise ToolError(str(exc)) from None

    _read_tools(server, memory, one_call)
    _skill_resources(server, memory, lock)
    if deposits.allowed:
        _deposit_tools(server, memory, one_call, DepositRate(deposits.per_minute), ToolError)
    return server


def _read_tools(server, memory: SkillMemory, one_call) -> None:
    """``recall``, ``read_skill``, ``ask`` and ``list_skills``: the tools every client has."""

    @server.tool()
    def recall(question: str) -> SkillRecall:
        """What the memory would do for this question — exact (a verified answer), graft (a skill) or
        abstain — with the skill's text for your own model, the score, the reasons, how to use it and the
        memory's note (the note ask returns, its decision text when a skill's text is handed over)."""
        with one_call():
            return recall_text(memory, question)

    @server.tool()
    def read_skill(ref: str) -> SkillText:
        """One skill's text and examples (for a verified solution also its question, answer, method
        and verifier), by id, name or a solution's question."""
        with one_call():
            return skill_text(memory, ref)

    @server.tool()
    def ask(question: str, system: Optional[str] = None, max_tokens: int = 128, route: bool = True) -> AskResult:
        """Answer a question with the memory's own model: the verified answer (exact), a grafted skill
        (graft), a plain answer after a graft that did not stand (fallback), or a plain answer (abstain),
        with what the memory did and why. ``route`` false answers plainly, nothing recalled (abstain)."""
        with one_call():
            result = memory.generate(question, system=system, max_tokens=max(1, min(max_tokens, 1024)), route=route)
        return AskResult.of(result.note, result.text, result.decoded_tokens)

    @server.tool()
    def list_skills(kind: Optional[Literal["manual", "solution"]] = None) -> list[SkillInfo]:
        """The skills in the memory (manuals and verified solutions)."""
        with one_call():
            return [SkillInfo.of(block) for block in memory.blocks.list(kind)]


def _skill_resources(server, memory: SkillMemory, lock) -> None:
    """Imported Agent Skills as ``skill://`` resources, the files of each skill's default
    version as imported: ``skill://index.json`` lists them with their manifests (path, size,
    SHA-256), ``skill://NAME/PATH`` reads one file. Only stored files are served (a path is
    looked up in the manifest, never on disk). The Skills extension's ``skills/list`` and
    ``skills/get`` are :mod:`.skills_extension`'s."""
    import json

    @server.resource("skill://index.json", mime_type="application/json")
    def skill_index() -> str:
        """The imported skills: name, description, the URI of their SKILL.md and their files."""
        with lock:
            skills = [
                {"name": s.name, "description": s.description, "uri": f"skill://{s.name}/SKILL.md", "version": s.version,
                 "model_invocable": s.model_invocable,
                 "files": [{**f, "uri": f"skill://{s.name}/{f['path']}"} for f in s.files]}
                for s in memory.skills.list()
            ]
        return json.dumps({"skills": skills})

    @server.resource("skill://{name}/{+path}")
    def skill_file(name: str, path: str) -> Union[str, bytes]:
        """One file of an imported skill (its default version), as imported; none of an expired skill."""
        with lock:
            if name not in memory.skills.names():
                raise ValueError(f"no skill {name!r} is served here")
            data = memory.skills.file(name, path)
        if data is None:
            raise ValueError(f"skill {name!r} has no file {path!r}")
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            return data


def _deposit_tools(server, memory: SkillMemory, one_call, rate: DepositRate, ToolError) -> None:
    """``add_manual`` and ``add_solution``, offered only when deposits are allowed; each call
    takes one of the client's deposits a minute."""

    def take() -> None:
        wait = rate.take("stdio")
        if wait:
            raise ToolError(f"over {rate.capacity:g} deposits a minute; retry in {wait:.0f} s")

    @server.tool()
    def add_manual(name: str, text: str, description: str = "", examples: Optional[list[str]] = None) -> SkillInfo:
        """Store a skill manual, so later questions on it are answered with it (stored as text: its KV state is made where it is first used)."""
        take()
        with one_call():
            try:
                return SkillInfo.of(memory.add_manual(name, text, description=description, examples=examples or (),
                                                      capture=False))
            except ContextOverflowError as exc:
                raise with_split_hint(exc, "add it as several manuals, one per section") from None

    @server.tool()
    def add_solution(question: str, answer: str, method: str, name: Optional[str] = None) -> SkillInfo:
        """Store a solution after running its Python ``method`` (which must print the answer) and checking it."""
        take()
        with one_call():
            try:
                block = memory.add_solution(question, answer, method=method, verifier="python", name=name)
            except VerificationError as exc:
                if isinstance(exc, ConflictError):
                    raise
                # What the method printed is withheld: beyond the verdict, nothing leaves the sandbox.
                raise ToolError(withheld_refusal(answer)) from None
        return SkillInfo.of(block)

    @server.tool()
    def feedback(query: str, expected: Optional[str] = None) -> FeedbackResult:
        """Correct the routing of a query: ``expected`` the skill (name or id) it belongs to, or null when no skill fits."""
        take()
        with one_call():
            return give_feedback(memory, query, expected, by="mcp")


def run_stdio(
    home: Union[str, Path], *, model: Optional[str] = None, catalog: Optional[str] = None, blocks: Optional[str] = None,
    deposits: DepositPolicy = DepositPolicy(), log_level: str = "WARNING", embedder: Optional[str] = None,
    namespace: Optional[str] = None,
) -> None:
    """Serve the memory at ``home`` (and the shared ``catalog``/``blocks`` URLs, if any), or
    that of its ``namespace`` (:mod:`skillgraft.memory.namespaces`), over stdin/stdout until
    the client disconnects."""
    deposits.check(None)
    with SkillMemory.open(home, model=model, catalog=catalog, blocks=blocks, embedder=embedder,
                          namespace=namespace) as memory:
        build_server(memory, deposits, log_level=log_level).run("stdio")
