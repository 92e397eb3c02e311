"""A sub-agent that opens and ends spans over and over on its own pipe (dill sends the
model function by reference)."""

from __future__ import annotations

import gc

import msgspec
from agentcell.protocol import Message, SpanBatch, SpanRecord, sign_frame
from agentcell.worker.child._main import ChildLink
from agentcell.worker.models import ToolSpec

#: Open-and-end pairs a hostile sub-agent sends: far past the limit of a child's spans.
PAIRS = 3000


def open_and_end_spans(messages: list[Message], tools: list[ToolSpec]) -> str:
    """Code in the child's own process (a hostile custom tool, say) writes signed span
    frames of its own trace: each opens a span and ends it at once, reusing the open
    slots, ``PAIRS`` times over; then it answers."""
    from agentcell.worker.tracing._spans import trace_id_of

    link = next(o for o in gc.get_objects() if isinstance(o, ChildLink))
    start = link.start
    trace_id = trace_id_of(start.trace_context)
    parent = bytes.fromhex(start.trace_context["traceparent"].split("-")[2])
    batch: list[SpanRecord] = []
    for i in range(PAIRS):
        span = SpanRecord(
            trace_id=trace_id,
            span_id=(0x7000_0000 + i).to_bytes(8, "big"),
            parent_id=parent,
            name=f"forged {i}",
            start_ns=1,
            end_ns=0,
        )
        batch += [span, msgspec.structs.replace(span, end_ns=2)]
        if len(batch) >= 64:
            link.channel.send_nowait(sign_frame(SpanBatch(spans=batch), start.frame_key))
            batch = []
    if batch:
        link.channel.send_nowait(sign_frame(SpanBatch(spans=batch), start.frame_key))
    return "flooded"
