"""The chat data model shared by the engine, the providers and the wire.

These structs cross the parent/child pipe as they are: the engine in a child appends
them to its session and the parent can decode them without any conversion step.
"""

from __future__ import annotations

import enum
from typing import Annotated

import msgspec

#: More tokens than any run could use: a count beyond it (or below 0) is a lie, from a
#: forged frame or a broken server, and is refused when decoded rather than summed.
MAX_TOKENS = 10**10
TokenCount = Annotated[int, msgspec.Meta(ge=0, le=MAX_TOKENS)]


class Usage(msgspec.Struct, kw_only=True, omit_defaults=True):
    """Token counts of one model call, or a sum of several."""

    input_tokens: TokenCount = 0
    output_tokens: TokenCount = 0
    cache_read_tokens: TokenCount = 0
    cache_write_tokens: TokenCount = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cache_read_tokens=self.cache_read_tokens + other.cache_read_tokens,
            cache_write_tokens=self.cache_write_tokens + other.cache_write_tokens,
        )

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens


class ToolCall(msgspec.Struct, kw_only=True, omit_defaults=True):
    """A tool call requested by the model. ``arguments`` is the JSON text as produced."""

    id: str
    name: str
    arguments: str = "{}"


class SystemMessage(msgspec.Struct, tag="system", tag_field="role", kw_only=True):
    content: str


class UserMessage(msgspec.Struct, tag="user", tag_field="role", kw_only=True):
    content: str


class ThinkingBlock(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One block of a model's reasoning, kept so that it can be sent back unchanged.

    Anthropic's extended thinking: a ``thinking`` block has the text and the
    ``signature`` that vouches for it; a ``redacted_thinking`` block only ``data``, the
    encrypted reasoning (``redacted`` is then true). The API refuses a tool-use turn
    whose thinking is missing or altered, so these are opaque: never edited or merged.
    Thinking is not the answer, and is never shown as answer text.
    """

    thinking: str = ""
    signature: str = ""
    data: str = ""  # a redacted_thinking block's encrypted content

    @property
    def redacted(self) -> bool:
        return bool(self.data)


class AssistantMessage(
    msgspec.Struct, tag="assistant", tag_field="role", kw_only=True, omit_defaults=True
):
    """One assistant turn: its text, its tool calls and, from a thinking model, its
    reasoning blocks (empty otherwise; omitted on the wire, so records and frames from
    before the field existed decode unchanged)."""

    content: str = ""
    tool_calls: list[ToolCall] = msgspec.field(default_factory=list)
    reasoning: list[ThinkingBlock] = msgspec.field(default_factory=list)


class ToolMessage(msgspec.Struct, tag="tool", tag_field="role", kw_only=True, omit_defaults=True):
    """The observation for one tool call; ``is_error`` marks a failed or refused call."""

    tool_call_id: str
    name: str
    content: str
    is_error: bool = False


Message = SystemMessage | UserMessage | AssistantMessage | ToolMessage


class RunStatus(enum.StrEnum):
    """How an agent run ended. Every run ends in exactly one of these."""

    COMPLETED = "completed"  # the model gave a final answer
    ERROR = "error"  # the model or the runtime failed (provider error, bad request, ...)
    CANCELLED = "cancelled"  # cancelled by the caller (Ctrl-C, task_control, parent turn)
    TIMEOUT = "timeout"  # the run's wall-clock deadline passed
    MAX_TURNS = "max_turns"  # the turn limit was reached before a final answer
    BUDGET = "budget"  # a token, turn or sub-agent budget was used up
    LIMIT = "limit"  # a resource limit of this agent: memory, CPU time, tool calls
    DENIED = "denied"  # the run could not start or go on because permission was refused
    CRASHED = "crashed"  # the child process died (set by the parent, never by a child)


class RunResult(msgspec.Struct, kw_only=True, omit_defaults=True):
    """The terminal payload of one run, produced by the engine (or a fixture handler)."""

    status: RunStatus
    text: str = ""
    error: str = ""
    usage: Usage = msgspec.field(default_factory=Usage)
    turns: int = 0
    tool_calls: int = 0
    data: dict[str, object] = msgspec.field(default_factory=dict)
