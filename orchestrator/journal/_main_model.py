"""The main agent's model calls and tool calls in the run's journal, and a resume's
replay of them.

The main agent runs in this process, so its answers are journaled as it parsed them
(JSON, secrets masked), each with the digest of the request it answered. A resumed
main agent makes its requests again from its prompt; while each is the one journaled,
the journaled answer is its answer (the model is not asked again), and its tool calls
get their journaled results (``ToolJournal``); from the first that differs, it goes on
live.
"""

from __future__ import annotations

import collections
import hashlib
import logging
from collections.abc import AsyncIterator, Collection
from typing import Any

import msgspec
from agentcell.orchestrator.journal._journal import Journal
from agentcell.orchestrator.journal._replay import AgentPast, Answer
from agentcell.protocol import ToolCall, ToolRecord
from agentcell.worker import ToolJournal
from agentcell.worker.models import Model, ModelRequest, ModelResponse
from agentcell.worker.tools import ToolOutput

log = logging.getLogger("agentcell.orchestrator")

_encode = msgspec.msgpack.Encoder().encode


def request_digest(request: ModelRequest) -> bytes:
    return hashlib.blake2b(_encode(request), digest_size=16).digest()


class JournaledModel:
    """``model`` with each answer journaled, and a resume's journaled answers served."""

    def __init__(self, model: Model, journal: Journal | None, replay: list[Answer]) -> None:
        self.inner = model
        self.name = model.name
        self._journal = journal
        self._replay = collections.deque(replay)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)  # its options, its check_ready, ...

    @property
    def replaying(self) -> bool:
        return bool(self._replay)

    async def stream(self, request: ModelRequest) -> AsyncIterator[Any]:
        digest = request_digest(request)
        if self._replay:
            if self._replay[0].digest == digest:
                body = self._replay.popleft().body
                if self._journal is not None:
                    self._journal.main_answer(digest, body)
                yield msgspec.json.decode(body, type=ModelResponse)  # no deltas: said then
                return
            log.warning("the main agent's request differs from the one journaled: going on live")
            self._replay.clear()
        response: ModelResponse | None = None
        async for item in self.inner.stream(request):
            if isinstance(item, ModelResponse):
                response = item
            yield item
        if response is not None and self._journal is not None:
            self._journal.main_answer(digest, self._journal.masked(msgspec.json.encode(response)))

    async def aclose(self) -> None:
        await self.inner.aclose()


def main_tool_journal(
    journal: Journal | None, past: AgentPast | None, live: Collection[str]
) -> ToolJournal | None:
    """The main agent's tool calls, each journaled as it starts and ends (here, in the
    parent: written before the call runs); a resume's journaled ones not run again."""
    if journal is None and past is None:
        return None

    async def started(call: ToolCall, wait: bool) -> None:  # written here: never waits
        if journal is not None:
            record = ToolRecord(request_id=0, call_id=call.id, name=call.name)
            journal.tool("main", msgspec.structs.replace(record, arguments=call.arguments))

    def finished(call: ToolCall, output: ToolOutput) -> None:
        if journal is not None:
            record = ToolRecord(request_id=0, call_id=call.id, name=call.name, finished=True)
            journal.tool(
                "main",
                msgspec.structs.replace(record, content=output.content, is_error=output.is_error),
            )

    return ToolJournal(
        started, finished, replayed=past.tools if past is not None else None, live=live
    )
