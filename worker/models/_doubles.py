"""Model test doubles that ship with agentcell (for our tests, the demo, and yours).

* ``FunctionModel(fn)``: ``fn(messages, tools)`` decides each reply — for branching logic.
* ``ScriptedModel([...])``: plays its steps in order, records every call, fails loudly on
  an unexpected extra call, and ``assert_complete()`` fails on unused steps.

Both stream their text in small chunks and announce each tool call (``ToolCallStart``)
before the whole response, like a real provider, report deterministic token usage, and
can be shipped into a child process (dill carries closures). A copy used in a child
records there; the runner hands that record back to the parent's object
(``export_record``/``absorb_record``), so assertions on ``calls`` see every child's calls.
"""

from __future__ import annotations

import inspect
import itertools
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

import msgspec
from agentcell.protocol import AssistantMessage, Message, ToolCall, ToolMessage, Usage, UserMessage
from agentcell.worker.models._base import (
    ModelRequest,
    ModelResponse,
    StopReason,
    StreamItem,
    TextPart,
    ToolCallStart,
    ToolSpec,
)

Reply = str | ModelResponse
ReplyFunction = Callable[[list[Message], list[ToolSpec]], Reply | Awaitable[Reply]]

_ids = itertools.count(1)
_CHUNK = re.compile(r"\S+\s*|\s+")


def tool_call(name: str, /, call_id: str | None = None, **arguments: Any) -> ToolCall:
    """A tool call as a model would make it: ``tool_call("read_file", path="a.py")``."""
    return ToolCall(
        id=call_id or f"call_{next(_ids)}",
        name=name,
        arguments=msgspec.json.encode(arguments).decode(),
    )


def reply(
    text: str = "",
    *calls: ToolCall,
    usage: Usage | None = None,
    stop_reason: StopReason | None = None,
) -> ModelResponse:
    """One assistant turn: some text and/or tool calls."""
    return ModelResponse(
        text=text,
        tool_calls=list(calls),
        usage=usage or Usage(),
        stop_reason=stop_reason or (StopReason.TOOL_USE if calls else StopReason.END),
    )


def last_user_text(messages: Sequence[Message]) -> str:
    for message in reversed(messages):
        if isinstance(message, UserMessage):
            return message.content
    return ""


def tool_results(messages: Sequence[Message]) -> list[ToolMessage]:
    """The tool results that answer the most recent assistant message."""
    results: list[ToolMessage] = []
    for message in reversed(messages):
        if isinstance(message, ToolMessage):
            results.append(message)
        elif isinstance(message, AssistantMessage):
            break
    return results[::-1]


class UnexpectedModelCall(AssertionError):
    """A ScriptedModel was called more times than it has steps."""


class _DoubleBase:
    name: str

    def __init__(self, name: str) -> None:
        self.name = name
        self.calls: list[ModelRequest] = []

    async def _play(
        self, request: ModelRequest, response: ModelResponse
    ) -> AsyncIterator[StreamItem]:
        for piece in _CHUNK.findall(response.text):
            yield TextPart(text=piece)
        for index, call in enumerate(response.tool_calls):  # as a provider announces them
            yield ToolCallStart(index=index, name=call.name)
        if response.usage == Usage():
            response = msgspec.structs.replace(response, usage=_estimate_usage(request, response))
        if not response.model:
            response = msgspec.structs.replace(response, model=self.name)
        yield response

    async def aclose(self) -> None:
        return None

    def __getstate__(self) -> dict[str, Any]:
        # A copy (a child's) starts with no calls of its own: carried over, the earlier
        # runs' calls came back in its record and were counted again, the record growing
        # with every run until its Start was too large to send.
        state = self.__dict__.copy()
        state["calls"] = []
        if "unexpected" in state:
            state["unexpected"] = []
        return state

    def export_record(self) -> dict[str, Any]:
        """What this copy saw (sent back from a child process)."""
        return {"calls": msgspec.to_builtins(self.calls)}

    def absorb_record(self, record: dict[str, Any]) -> None:
        """Merge a record exported by a copy of this model (in a child)."""
        self.calls.extend(msgspec.convert(record.get("calls", []), list[ModelRequest]))


class FunctionModel(_DoubleBase):
    """A model whose every reply comes from ``fn(messages, tools)`` (sync or async).

    ``fn`` returns a string (a final answer) or a ``ModelResponse`` (see ``reply`` and
    ``tool_call``); raising an exception makes the model call fail with it.
    """

    def __init__(self, fn: ReplyFunction, *, name: str = "function") -> None:
        super().__init__(f"function:{name}" if ":" not in name else name)
        self.fn = fn

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamItem]:
        self.calls.append(request)
        produced = self.fn(request.messages, request.tools)
        if inspect.isawaitable(produced):
            produced = await produced
        async for item in self._play(request, _as_response(produced)):
            yield item


Step = Reply | BaseException | Callable[[ModelRequest], Reply]


class ScriptedModel(_DoubleBase):
    """A model that plays ``steps`` in order: replies, exceptions to raise, or callables.

    Every call is recorded in ``calls``. A call beyond the last step raises
    ``UnexpectedModelCall``; ``assert_complete()`` fails if steps were left unused.
    """

    def __init__(self, steps: Sequence[Step], *, name: str = "scripted") -> None:
        super().__init__(f"scripted:{name}" if ":" not in name else name)
        self.steps = list(steps)
        self.unexpected: list[str] = []
        self.runs = 1  # copies merged in by absorb_record (each plays the whole script)
        self._used = 0
        self._min_used: int | None = None

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamItem]:
        self.calls.append(request)
        if self._used >= len(self.steps):
            message = (
                f"{self.name} was called {self._used + 1} times but its script has "
                f"{len(self.steps)} steps; the last user message was "
                f"{last_user_text(request.messages)!r}"
            )
            self.unexpected.append(message)
            raise UnexpectedModelCall(message)
        step = self.steps[self._used]
        self._used += 1
        if isinstance(step, BaseException):
            raise step
        produced = step(request) if callable(step) else step
        async for item in self._play(request, _as_response(produced)):
            yield item

    @property
    def remaining(self) -> int:
        used = self._used if self._min_used is None else min(self._used, self._min_used)
        return len(self.steps) - used

    def assert_complete(self) -> None:
        if self.unexpected:
            raise UnexpectedModelCall("; ".join(self.unexpected))
        if self.remaining:
            raise AssertionError(
                f"{self.name}: {self.remaining} of {len(self.steps)} scripted steps were never used"
            )

    def export_record(self) -> dict[str, Any]:
        record = super().export_record()
        record.update(unexpected=self.unexpected, used=self._used)
        return record

    def absorb_record(self, record: dict[str, Any]) -> None:
        super().absorb_record(record)
        self.unexpected.extend(record.get("unexpected", []))
        used = int(record.get("used", 0))
        self._min_used = used if self._min_used is None else min(self._min_used, used)
        self._used = max(self._used, used)


def _as_response(produced: Reply) -> ModelResponse:
    if isinstance(produced, ModelResponse):
        return produced
    if isinstance(produced, str):
        return reply(produced)
    raise TypeError(
        f"a test model must return a str or a ModelResponse, not {type(produced).__name__}"
    )


def _estimate_usage(request: ModelRequest, response: ModelResponse) -> Usage:
    """Deterministic token counts (about 4 characters a token) so usage can be asserted."""
    chars_in = 0
    for message in request.messages:
        chars_in += len(getattr(message, "content", ""))
        for call in getattr(message, "tool_calls", ()):
            chars_in += len(call.arguments)
    chars_out = len(response.text) + sum(len(c.arguments) for c in response.tool_calls)
    return Usage(input_tokens=chars_in // 4 + 1, output_tokens=chars_out // 4 + 1)
