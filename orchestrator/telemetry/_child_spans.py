"""The parent's side of a traced sub-agent: the context its ``Start`` carries, the spans
its frames bring, and the spans it could not end itself.

The child makes its spans (``invoke_agent`` and what runs under it) under the span of the
``task`` call that started it; its finished spans arrive as ``SpanBatch`` frames (signed:
the backend's frame queue drops one without the run's signature) and go to the parent's
one exporter. A child that dies leaves its agent span open: ``settle`` ends it with an
error status and the cause the parent saw (a signal, a deadline, a protocol violation).
One that ends before its run began (it died starting, its walls or its model failed to
load) never opened its agent span: ``settle`` makes it then, so that every sub-agent that
got a process has its ``invoke_agent`` span in the trace, each time.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator
from typing import Any

from agentcell.protocol import DelegateRequest, SpanBatch, SpanRecord

log = logging.getLogger("agentcell.tracing")

#: Spans a child may keep open at once (its agent span, really: more is not its to open).
MAX_OPEN_SPANS = 8


class ChildSpans:
    def __init__(self, tracing: Any, agent_type: str) -> None:
        from agentcell.worker.tracing import MAX_CHILD_SPANS

        self.tracing = tracing
        self.task_span = tracing.current_span()  # the `task` call's execute_tool span
        self.own_span = None
        if not self.task_span.get_span_context().is_valid:  # a direct run: no task call
            self.own_span = self.task_span = tracing.start_task_span(agent_type)
        self.trace_context: dict[str, str] = tracing.child_context(self.task_span)
        self.trace_id: bytes = tracing.trace_id_of(self.trace_context)
        self.began_ns = time.time_ns()  # when the child was given its Start
        self.heard = False  # a span of this trace came (its agent span is always first)
        self.open: dict[bytes, SpanRecord] = {}
        self.room = MAX_CHILD_SPANS
        self.dropped = 0

    def take(self, frame: SpanBatch) -> None:
        """One batch from the child: open spans are remembered, finished ones exported.

        Every span exported counts against the one room: an open span takes its place
        there when it opens (so its end, or the parent's ending of it, is always taken),
        a finished one when it arrives. A child that opens and ends spans over and over
        runs out of room as one that sends finished spans does; past it, an open span is
        not remembered and its end is dropped like any finished span over the limit."""
        finished, closing = [], []
        for record in frame.spans:
            self.heard = self.heard or record.trace_id == self.trace_id
            if record.end_ns <= 0:
                if (
                    record.span_id not in self.open
                    and len(self.open) < MAX_OPEN_SPANS
                    and record.trace_id == self.trace_id
                    and self.room > 0
                ):
                    self.open[record.span_id] = record
                    self.room -= 1  # its end's place, taken now
            elif self.open.pop(record.span_id, None) is not None:
                closing.append(record)  # the end of a span it opened: its place is taken
            else:
                finished.append(record)
        allowed = finished[: max(self.room, 0)]
        self.dropped += len(finished) - len(allowed)
        self.room -= self.tracing.ingest(allowed, self.trace_id)
        self.tracing.ingest(closing, self.trace_id)

    def settle(self, result: Any, *, queued_ms: float | None) -> None:
        """The run is over: end what the child left open, and note on the ``task`` span
        where and how it ran."""
        status = result.status.value
        for record in self.open.values():
            self.tracing.end_open(record, result.error or f"the sub-agent ended: {status}", status)
        self.open.clear()
        if not self.heard and result.pid:
            self.tracing.make_unopened(
                self.task_span,
                f"invoke_agent {result.agent_type}",
                self.began_ns,
                {
                    "gen_ai.operation.name": "invoke_agent",
                    "gen_ai.agent.id": result.agent_id,
                    "gen_ai.agent.name": result.agent_type,
                    "agentcell.pid": result.pid,
                    "agentcell.status": status,
                },
                "" if result.ok else (result.error or f"the sub-agent ended: {status}"),
            )
        if self.dropped:
            log.warning(
                "sub-agent %s sent %d spans over the limit: dropped", result.agent_id, self.dropped
            )
        span = self.task_span
        if not span.is_recording():
            return
        attributes = {
            "gen_ai.agent.id": result.agent_id,
            "gen_ai.agent.name": result.agent_type,
            "agentcell.status": status,
            "agentcell.pid": result.pid,
            "agentcell.node": result.node,
            "agentcell.sandbox": result.sandbox.split(",")[0],  # the mode
            "agentcell.sandbox.report": result.sandbox,  # the walls the child reported
            "agentcell.queue_wait_ms": queued_ms,
        }
        span.set_attributes({k: v for k, v in attributes.items() if v not in (None, "")})
        if self.own_span is not None:
            if not result.ok:
                from opentelemetry.trace import Status, StatusCode

                span.set_status(Status(StatusCode.ERROR, result.error or status))
            span.end()


def child_spans(tracing: Any, agent_type: str) -> ChildSpans | None:
    """Spans for the sub-agent about to start (None: tracing is off)."""
    if tracing is None:
        return None
    spans = ChildSpans(tracing, agent_type)
    return spans if spans.trace_id else None


@contextlib.contextmanager
def nested_trace(spans: ChildSpans | None, frame: DelegateRequest) -> Iterator[None]:
    """While a child's ``DelegateRequest`` is answered, its span for that call is current,
    so a nested sub-agent is traced under it — if it is of the child's own trace."""
    if spans is None or not frame.trace_context:
        yield
        return
    if spans.tracing.trace_id_of(frame.trace_context) != spans.trace_id:
        yield  # another trace's context: not the child's to join
        return
    with spans.tracing.remote_parent(frame.trace_context):
        yield
