"""Model functions for the tracing tests' sub-agents (dill sends them by reference)."""

from __future__ import annotations

from typing import Any

import msgspec
from agentcell.protocol import (
    Message,
    RunResult,
    RunStatus,
    SpanBatch,
    SpanRecord,
    Start,
    ToolMessage,
    sign_frame,
)
from agentcell.worker.child._main import ChildLink
from agentcell.worker.models import ToolSpec
from agentcell.worker.models._base import ModelResponse
from opentelemetry.sdk.trace import ReadableSpan

from agentcell.testing import FunctionModel, reply, tool_call, tool_results


def read_notes_then_answer(messages: list[Message], tools: list[ToolSpec]) -> ModelResponse | str:
    """Reads notes.txt (one execute_tool span), then answers with what it read."""
    results = tool_results(messages)
    if not results:
        return reply("reading", tool_call("read_file", path="notes.txt"))
    return f"notes: {results[0].content.strip()}"


def _span(start: Start, i: int, *, trace_id: bytes | None = None) -> SpanRecord:
    from agentcell.worker.tracing._spans import trace_id_of

    return SpanRecord(
        trace_id=trace_id or trace_id_of(start.trace_context),
        span_id=(i + 1).to_bytes(8, "big"),
        parent_id=bytes.fromhex(start.trace_context["traceparent"].split("-")[2]),
        name=f"span {i}",
        start_ns=1,
        end_ns=2,
    )


async def send_spans(start: Start, link: ChildLink) -> RunResult:
    """A hostile child's span frames: unsigned, signed with a key of its own, spans of
    another trace, and more spans than a child may send; then one genuine batch."""
    send = link.channel.send_nowait
    key = start.frame_key
    agent = msgspec.structs.replace(_span(start, 99_999), name="agent", end_ns=0)
    send(sign_frame(SpanBatch(spans=[agent]), key))  # opened: ended below, past the limit
    send(SpanBatch(spans=[_span(start, 0)]))
    send(sign_frame(SpanBatch(spans=[_span(start, 1)]), b"k" * 32))
    send(sign_frame(SpanBatch(spans=[_span(start, 2, trace_id=b"\x01" * 16)]), key))
    count = int(start.args.get("flood", 0))
    for first in range(0, count, 64):
        batch = [_span(start, 10 + i) for i in range(first, min(first + 64, count))]
        send(sign_frame(SpanBatch(spans=batch), key))
        await link.writable()
    send(sign_frame(SpanBatch(spans=[msgspec.structs.replace(agent, end_ns=3)]), key))
    return RunResult(status=RunStatus.COMPLETED, text="sent")


def delegating_main(*calls: Any) -> FunctionModel:
    def fn(messages: list[Any], tools: list[Any]) -> Any:
        if not any(isinstance(m, ToolMessage) for m in messages):
            return reply("delegating", *calls)
        return "summary: " + " | ".join(r.content.splitlines()[0] for r in tool_results(messages))

    return FunctionModel(fn, name="function:main")


def by_name(spans: list[ReadableSpan], name: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name == name]


def parent_of(span: ReadableSpan) -> int:
    assert span.parent is not None, f"{span.name} has no parent"
    return span.parent.span_id
