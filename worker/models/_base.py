"""The one interface every model provider implements, and its errors.

A provider turns a ``ModelRequest`` into a stream: zero or more ``TextPart`` chunks as
text arrives and a ``ToolCallStart`` as each tool call's name arrives (before its
arguments), then exactly one ``ModelResponse`` with the whole assistant turn (text,
assembled tool calls, usage, stop reason). A consumer that only wants the answer ignores
everything but the ``ModelResponse`` (see ``complete``).
"""

from __future__ import annotations

import enum
from collections.abc import AsyncIterator
from typing import Any, Protocol, runtime_checkable

import msgspec
from agentcell.protocol import Message, ThinkingBlock, ToolCall, Usage


class ToolSpec(msgspec.Struct, kw_only=True, frozen=True):
    """A tool as the model sees it: name, description, JSON schema of its arguments."""

    name: str
    description: str
    parameters: dict[str, Any]


class ModelRequest(msgspec.Struct, kw_only=True):
    messages: list[Message]  # the system prompt, if any, is the first (SystemMessage)
    tools: list[ToolSpec] = msgspec.field(default_factory=list)
    max_output_tokens: int | None = None


class StopReason(enum.StrEnum):
    END = "end"  # the model finished its turn (a final answer if there are no tool calls)
    TOOL_USE = "tool_use"  # it wants the tool calls run
    MAX_TOKENS = "max_tokens"  # it was cut off by the output token limit
    REFUSAL = "refusal"  # it declined (content filter, safety refusal)


class TextPart(msgspec.Struct, kw_only=True):
    """A chunk of streamed assistant text."""

    text: str


class ToolCallStart(msgspec.Struct, kw_only=True, frozen=True):
    """A tool call's name has arrived; its arguments are still streaming.

    Lets a consumer get ready for the call early (the orchestrator starts a sub-agent
    process for each ``task`` call while the model is still writing the others).
    ``index`` tells the calls of one response apart (the provider's own: a tool call's
    index for OpenAI, its content block's for Anthropic); a retried request repeats the
    same indexes, so count distinct indexes, not items. The ``ModelResponse`` stays the
    authority on which calls were made.
    """

    index: int
    name: str


class ModelResponse(msgspec.Struct, kw_only=True):
    """One whole assistant turn. ``reasoning``: the thinking blocks of a thinking model,
    to be kept in the session and sent back as they came (never shown as text)."""

    text: str = ""
    tool_calls: list[ToolCall] = msgspec.field(default_factory=list)
    reasoning: list[ThinkingBlock] = msgspec.field(default_factory=list)
    usage: Usage = msgspec.field(default_factory=Usage)
    stop_reason: StopReason = StopReason.END
    model: str = ""


StreamItem = TextPart | ToolCallStart | ModelResponse


class ModelErrorKind(enum.StrEnum):
    AUTH = "auth"  # 401/403: bad or missing API key
    NOT_FOUND = "not_found"  # 404: unknown model or wrong base URL
    BAD_REQUEST = "bad_request"  # 400/422: the request was refused as malformed
    RATE_LIMIT = "rate_limit"  # 429 after retries
    SERVER = "server"  # 5xx after retries
    CONNECTION = "connection"  # unreachable, reset, dropped mid-stream (after retries)
    TIMEOUT = "timeout"  # no answer within the request timeout (after retries)
    PROTOCOL = "protocol"  # the server answered with something that is not the API
    BLOCKED = "blocked"  # a real model request was attempted where they are forbidden
    CONFIG = "config"  # the model string or options are wrong


class ModelError(Exception):
    """A model call that failed for good. The message names the cause and the fix."""

    def __init__(self, kind: ModelErrorKind, message: str, *, status: int | None = None):
        super().__init__(message)
        self.kind = kind
        self.status = status


@runtime_checkable
class Model(Protocol):
    """A chat model. ``name`` is the model string it was made from (``openai:gpt-4o``)."""

    name: str

    def stream(self, request: ModelRequest) -> AsyncIterator[StreamItem]:
        """Stream one assistant turn: ``TextPart`` chunks and ``ToolCallStart``
        announcements, then one ``ModelResponse``."""
        ...

    async def aclose(self) -> None:
        """Release connections. The model must not be used afterwards."""
        ...


async def complete(model: Model, request: ModelRequest) -> ModelResponse:
    """Run ``model.stream`` to its end and return the final response."""
    response: ModelResponse | None = None
    async for item in model.stream(request):
        if isinstance(item, ModelResponse):
            response = item
    if response is None:
        raise ModelError(
            ModelErrorKind.PROTOCOL, f"{model.name}: the stream ended without a response"
        )
    return response
