"""Completions through llama-server: plain, after a restored block, and streamed.

:class:`ServerCompletions` is the half of :class:`~skillgraft.server.engine.LlamaServerEngine`
that talks ``/completion``: every completion after a restored block checks that the server
reused exactly the cells kept (``timings.cache_n``) and evaluated exactly the new tokens
(``prompt_n``), streamed ones (an answer context's, :mod:`skillgraft.server.slot`) before their
first chunk is yielded. The sampler is one :class:`~skillgraft.core.sampling.SamplingOptions`
(one greedy token unless told otherwise).
"""

from __future__ import annotations

import json
import time
from typing import Iterator, Optional, Sequence, Union

import httpx

from ..errors import DamagedCellsError, InputError, ServerError
from .connection import response_to
from .records import (
    Completion,
    ServerGraft,
    StreamChunk,
    ServerStep,
    check_reuse,
    completion_from_body,
    Restore,
    kept_cells,
    reusable_cells,
    sampled_logprob,
    stop_type,
)
from ..core.deadline import Deadline
from ..core.sampling import SamplingOptions
from ..core.states import KVState

ONE_TOKEN = SamplingOptions(1)  # one greedy token: what a prefill or a check asks for


class ServerCompletions:
    """``/completion`` calls; mixed into the engine, which provides ``_request``, ``_client``,
    ``tokenize``, ``restore``, ``_require_serving``, ``_cells_damaged``, ``require_fits`` and ``_check_slot``."""

    def complete(
        self,
        tokens: Sequence[int],
        options: SamplingOptions = ONE_TOKEN,
        *,
        slot: Optional[int] = 0,
        n_probs: int = 0,
        cache_prompt: bool = True,
        stop: Sequence[str] = (),
    ) -> Completion:
        """One ``/completion`` with the prompt as a token array (no BOS added by the server)."""
        request = self.completion_request(tokens, options, slot=slot, n_probs=n_probs, cache_prompt=cache_prompt, stop=stop)
        for held_slot in range(self.n_slots) if slot is None else (slot,):  # the cells it may not keep are saved first
            held = self.held_tokens(held_slot) if cache_prompt and slot is not None else None
            self.cells_going(held_slot, reusable_cells(held, tokens) if held is not None else 0)
        self.forget_held(slot)
        started = time.perf_counter()
        self.completions += 1
        body = self._request("POST", "/completion", json=request)
        wall_s = time.perf_counter() - started
        try:
            return completion_from_body(body, wall_s)
        except DamagedCellsError:
            raise self._cells_damaged() from None

    def completion_request(
        self, tokens: Sequence[int], options: SamplingOptions, *, slot: Optional[int], n_probs: int = 0,
        cache_prompt: bool = True, stop: Sequence[str] = (), stream: bool = False,
    ) -> dict:
        """A ``/completion`` request with the prompt as token ids and the sampler pinned to
        ``options`` (llama-server's own extra samplers off, as in the in-process sampler)."""
        self._require_serving()
        if options.max_tokens < 1:
            raise InputError(f"llama-server needs max_tokens >= 1, got {options.max_tokens}")
        request = {
            "prompt": [int(t) for t in tokens],
            "n_predict": options.max_tokens,
            "n_probs": n_probs,
            "cache_prompt": cache_prompt,
            "temperature": options.temperature,
            "top_p": options.top_p,
            "top_k": 0,
            "min_p": 0.0,
            "typical_p": 1.0,
            "repeat_penalty": options.repeat_penalty,
            "repeat_last_n": options.penalty_last_n,
            "seed": options.seed,
            "stop": list(stop),
            "return_tokens": True,
            "stream": stream,
        }
        if options.grammar:
            request["grammar"] = options.grammar
        if stream:
            request["timings_per_token"] = True
        if slot is not None:
            request["id_slot"] = self._check_slot(slot)
        return request

    def _query_tokens(self, query: Union[str, Sequence[int]]) -> list[int]:
        tokens = self.tokenize(query, add_bos=False) if isinstance(query, str) else [int(t) for t in query]
        if not tokens:
            raise InputError("the query has no tokens")
        return tokens

    def graft(
        self,
        state: KVState,
        query: Union[str, Sequence[int]],
        block_id: str = "",
        *,
        options: SamplingOptions = ONE_TOKEN,
        slot: int = 0,
        n_probs: int = 0,
        verify_hash: bool = True,
    ) -> ServerGraft:
        """Restore ``state`` into ``slot`` and complete ``query`` after it, reusing the slot.

        Raises :class:`SlotReuseError` unless the server reused all ``N`` block tokens and
        evaluated exactly the ``q`` query tokens. ``verify_hash=False`` is for payloads
        already verified since they were read. This is the measurement path (a whole
        completion with its top-``n_probs`` log-probabilities); answers are grafted through
        :meth:`answer_slot`.
        """
        started = time.perf_counter()
        query_tokens, restored = self._restore_for(state, query, block_id, slot, options.max_tokens, verify_hash)
        completion = self.continue_restored(
            state, query_tokens, block_id, options=options, slot=slot, n_probs=n_probs,
        )
        return ServerGraft(
            block_id=block_id, n_block=state.n_tokens, n_query=len(query_tokens), restore=restored,
            completion=completion, wall_s=time.perf_counter() - started,
        )

    def continue_restored(
        self,
        state: KVState,
        query: Union[str, Sequence[int]],
        block_id: str = "",
        *,
        options: SamplingOptions = ONE_TOKEN,
        slot: int = 0,
        keep: Optional[int] = None,
        n_probs: int = 0,
        stop: Sequence[str] = (),
    ) -> Completion:
        """Complete ``query`` after the first ``keep`` cells of ``state`` (all by default),
        already restored into ``slot``; raise :class:`SlotReuseError` unless they were reused."""
        prompt = list(state.tokens[: kept_cells(state, keep)]) + self._query_tokens(query)
        completion = self.complete(prompt, options, slot=slot, n_probs=n_probs, stop=stop)
        check_reuse(block_id, slot, completion.cache_n, completion.prompt_n, reusable_cells(state.tokens, prompt), len(prompt))
        return completion

    def stream_request(self, request: dict, expected: Optional[tuple[str, int, int, int]],
                       deadline: Optional[Deadline] = None) -> Iterator[StreamChunk]:
        """Steps of a streamed ``/completion``; with ``expected`` = (block id, slot, cells to
        reuse, prompt tokens) the slot reuse is checked on the first chunk's timings. Past
        ``deadline`` :class:`DeadlineError` (no read waits longer than was left when it began): the stream
        is closed, which stops the server's work on it. Sent as every request is
        (:func:`~skillgraft.server.connection.response_to`): once more on a connection the server
        dropped before any of the response arrived, never once the stream has begun."""
        checked = expected is None
        self.forget_held(request.get("id_slot"))
        self.completions += 1
        client = self._client
        if client is None:
            raise ServerError("the engine is closed")
        timeout = httpx.USE_CLIENT_DEFAULT
        if deadline is not None:
            deadline.check()
            usual = client.timeout
            timeout = httpx.Timeout(connect=usual.connect, read=deadline.left(), write=usual.write, pool=usual.pool)
        try:
            with response_to(client, "POST", "/completion", json=request, timeout=timeout) as response:
                if response.status_code != 200:
                    raise ServerError(f"POST /completion answered {response.status_code}: {response.read()[:300]!r}")
                lines = response.iter_lines()
                for line in lines:
                    if deadline is not None:
                        deadline.check()
                    if not line.startswith("data: "):
                        continue
                    chunk = json.loads(line[len("data: "):])
                    timings = chunk.get("timings") or {}
                    cache_n = None
                    if not checked and timings:
                        block_id, slot, reuse, n_prompt = expected
                        cache_n = int(timings.get("cache_n", -1))
                        check_reuse(block_id, slot, cache_n, int(timings.get("prompt_n", -1)), reuse, n_prompt)
                        checked = True
                    probs = chunk.get("completion_probabilities") or []
                    steps = []
                    for index, token in enumerate(chunk.get("tokens") or []):
                        entry = probs[index] if index < len(probs) else {}
                        steps.append(ServerStep(int(token), str(entry.get("token", "")), sampled_logprob(entry), ()))
                    if steps and not checked:
                        raise ServerError("the server streamed a token without timings to check the slot reuse")
                    stopped = bool(chunk.get("stop"))
                    yield StreamChunk(str(chunk.get("content", "")), tuple(steps), stop_type(chunk) if stopped else None,
                                      cache_n)
                    if stopped:  # read the stream to its end, so its connection is kept for the next request
                        for _ in lines:
                            if deadline is not None:
                                deadline.check()
                        return
        except (httpx.HTTPError, RuntimeError) as exc:  # RuntimeError: a client replaced by a restart
            if deadline is not None and isinstance(exc, httpx.TimeoutException):
                deadline.check()
            raise ServerError(f"streaming from {self.url} failed: {exc!r}") from None
        except DamagedCellsError:
            raise self._cells_damaged() from None
        except ValueError as exc:
            raise ServerError(f"{self.url} streamed a chunk that is not JSON: {exc}") from None

    def _restore_for(
        self, state: KVState, query: Union[str, Sequence[int]], block_id: str, slot: int, max_tokens: int, verify_hash: bool
    ) -> tuple[list[int], Restore]:
        """The query's tokens, once the block plus query and answer are known to fit and
        ``state`` is restored into ``slot``."""
        query_tokens = self._query_tokens(query)
        self.require_fits(state.n_tokens + len(query_tokens) + max_tokens, "block plus query and answer")
        return query_tokens, self.restore(state, block_id, slot=slot, verify_hash=verify_hash)
