"""A sub-agent's spans, made in its own process and sent to the parent as frames.

A child has no network of its own, so it exports nothing: a span processor turns each
finished span into a ``SpanRecord`` and sends them in signed ``SpanBatch`` frames — after
each model request (so a crash loses at most the turn in progress) and when the agent
span ends. The agent span is also sent the moment it starts, still open, so that a parent
whose child dies can end it with the cause. A child sends at most ``MAX_CHILD_SPANS``
spans (the parent holds it to that too).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from typing import Any

from agentcell.protocol import AgentSpec, ChannelClosed, SpanBatch, SpanRecord, Start, sign_frame
from agentcell.worker.records._redact import Redactor
from agentcell.worker.tracing._export import MAX_CHILD_SPANS
from agentcell.worker.tracing._spans import (
    CAPTURE_KEY,
    CONVERSATION_KEY,
    AgentTracer,
    context_from_headers,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider

#: Spans per frame: a frame stays far below the frame size limit.
MAX_SPANS_PER_FRAME = 64


def record_of(span: ReadableSpan, *, open_: bool = False) -> SpanRecord:
    context = span.context
    assert context is not None
    parent = span.parent
    return SpanRecord(
        trace_id=context.trace_id.to_bytes(16, "big"),
        span_id=context.span_id.to_bytes(8, "big"),
        parent_id=parent.span_id.to_bytes(8, "big") if parent is not None else b"",
        name=span.name,
        kind=span.kind.value,
        start_ns=span.start_time or 0,
        end_ns=0 if open_ else (span.end_time or 0),
        attributes={k: _plain(v) for k, v in (span.attributes or {}).items()},
        status=span.status.status_code.value,
        status_message=span.status.description or "",
    )


class FrameSpanProcessor(SpanProcessor):
    """Sends finished spans to the parent, in batches, signed with the run's frame key."""

    def __init__(self, send: Callable[[SpanBatch], None], key: bytes) -> None:
        self._send = send
        self._key = key
        self._buffer: list[SpanRecord] = []
        self.sent = 0

    def on_start(self, span: Span, parent_context: Any = None) -> None:
        if span.parent is not None and span.parent.is_remote:  # the agent span: say it opened
            self._send_batch([record_of(span, open_=True)])

    def on_end(self, span: ReadableSpan) -> None:
        record = record_of(span)
        if span.parent is not None and span.parent.is_remote:
            # The agent span's end goes whatever the count: the parent would otherwise
            # end it as if this process had died.
            self.flush()
            self._send_batch([record])
            return
        self._buffer.append(record)
        if len(self._buffer) >= MAX_SPANS_PER_FRAME or span.name.startswith("chat"):
            self.flush()

    def flush(self) -> None:
        room = MAX_CHILD_SPANS - self.sent
        spans, self._buffer = self._buffer[: max(room, 0)], []
        for i in range(0, len(spans), MAX_SPANS_PER_FRAME):
            chunk = spans[i : i + MAX_SPANS_PER_FRAME]
            self._send_batch(chunk)
            self.sent += len(chunk)

    def _send_batch(self, spans: list[SpanRecord]) -> None:
        with contextlib.suppress(ChannelClosed):
            self._send(sign_frame(SpanBatch(spans=spans), self._key))

    def shutdown(self) -> None:
        self.flush()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        self.flush()
        return True


def child_tracer(start: Start, send: Callable[[SpanBatch], None]) -> AgentTracer | None:
    """The tracer of this child's run, or None when the parent asked for no spans."""
    spec = start.spec
    parent = context_from_headers(start.trace_context) if spec is not None else None
    if spec is None or parent is None:
        return None
    processor = FrameSpanProcessor(send, start.frame_key)
    # No resource of its own: the parent exports a child's spans under its own, and the
    # default one runs the SDK's detectors in a thread pool, a thread the sandbox, next,
    # could find still listed (the run refused, at random, on a loaded machine).
    provider = TracerProvider(resource=Resource.get_empty(), shutdown_on_exit=False)
    provider.add_span_processor(processor)
    return AgentTracer(
        provider.get_tracer("agentcell"),
        agent_id=spec.agent_id,
        agent_name=spec.agent_type,
        conversation_id=start.trace_context.get(CONVERSATION_KEY, spec.agent_id),
        model=spec.model,
        parent=parent,
        attributes=_agent_attributes(spec),
        capture_content=start.trace_context.get(CAPTURE_KEY) == "true",
        redact=Redactor.from_env(digests=spec.redactions),
    )


def _agent_attributes(spec: AgentSpec) -> dict[str, Any]:
    return {
        "agentcell.pid": os.getpid(),
        "agentcell.node": os.uname().nodename,
        "agentcell.sandbox": spec.sandbox,
        "agentcell.depth": spec.depth,
        "agentcell.background": spec.background,
    }


def _plain(value: Any) -> Any:
    if isinstance(value, str | bool | int | float):
        return value
    return [v for v in value if isinstance(v, str | bool | int | float)]
