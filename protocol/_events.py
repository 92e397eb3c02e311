"""Progress events an agent run emits while it works.

The engine yields these to its caller; in a child process each one travels to the parent
inside an ``Event`` frame, unchanged. ``kind`` is the tag on the wire.
"""

from __future__ import annotations

import msgspec
from agentcell.protocol._messages import RunResult, Usage


class TurnStarted(msgspec.Struct, tag="turn", tag_field="kind", kw_only=True):
    turn: int


class TextDelta(msgspec.Struct, tag="text", tag_field="kind", kw_only=True):
    text: str


class ToolStarted(msgspec.Struct, tag="tool_start", tag_field="kind", kw_only=True):
    call_id: str
    name: str
    arguments: str


class ToolFinished(msgspec.Struct, tag="tool_result", tag_field="kind", kw_only=True):
    call_id: str
    name: str
    is_error: bool
    preview: str  # the head of the tool output, for progress displays
    duration_ms: float


class UsageUpdate(msgspec.Struct, tag="usage", tag_field="kind", kw_only=True):
    usage: Usage  # this model call's usage, not a running total
    model: str


class ApprovalNeeded(msgspec.Struct, tag="approval", tag_field="kind", kw_only=True):
    call_id: str
    tool: str
    arguments: str
    reason: str


class Notice(msgspec.Struct, tag="notice", tag_field="kind", kw_only=True):
    """Something worth showing that is not a failure of the run (a retry, a steer, a pause)."""

    message: str
    level: str = "info"
    # Its team's messages the agent took into its ``turn``-th model request (their ids):
    # what the parent journals as delivered.
    mail: list[str] = msgspec.field(default_factory=list)
    turn: int = 0


class RunFinished(msgspec.Struct, tag="done", tag_field="kind", kw_only=True):
    result: RunResult


AgentEvent = (
    TurnStarted
    | TextDelta
    | ToolStarted
    | ToolFinished
    | UsageUpdate
    | ApprovalNeeded
    | Notice
    | RunFinished
)
