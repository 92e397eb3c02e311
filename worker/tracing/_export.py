"""Where a run's spans go: one exporter in the parent, for its own spans and its children's.

``Tracing.from_env`` reads the standard variables (``OTEL_TRACES_EXPORTER``,
``OTEL_EXPORTER_OTLP_ENDPOINT``, ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``,
``OTEL_SDK_DISABLED``, ``OTEL_SERVICE_NAME``, ``TRACEPARENT``) and returns None when they
ask for nothing: then the SDK is never imported and no span is made. ``Tracing.to_exporter``
is the Python API (an exporter of the caller's, e.g. the SDK's in-memory one).

A child's finished spans arrive as ``SpanRecord``s; ``ingest`` checks them (this run's
trace only, sizes bounded, keys masked) and hands them to the same span processor as the
parent's own spans, so one exporter sends everything.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import msgspec
from agentcell.protocol import SpanRecord
from agentcell.worker.records._redact import Redactor
from agentcell.worker.tracing._env import tracing_requested
from agentcell.worker.tracing._spans import (
    CAPTURE_KEY,
    CONVERSATION,
    CONVERSATION_KEY,
    AgentTracer,
    capture_content_requested,
    context_from_headers,
    current_trace_context,
    trace_id_of,
)

log = logging.getLogger("agentcell.tracing")

#: What one child may have exported: spans, attributes per span, characters per value.
MAX_CHILD_SPANS = 2048
MAX_ATTRIBUTES = 64
MAX_VALUE_CHARS = 4096
_SCOPE = "agentcell"


class Tracing:
    """This process's tracer and the processor every span (a child's too) is ended into."""

    def __init__(
        self,
        provider: Any,
        processor: Any,
        *,
        traceparent: str | None = None,
        capture_content: bool | None = None,
        owned: bool = True,
    ) -> None:
        self.provider = provider
        self.processor = processor
        self.tracer = provider.get_tracer(_SCOPE)
        headers = {"traceparent": traceparent} if traceparent else {}
        self.parent = context_from_headers(headers)
        self.capture_content = (
            capture_content_requested() if capture_content is None else capture_content
        )
        self.owned = owned  # made from the environment: shut down with the orchestrator

    # -- making ----------------------------------------------------------------------------
    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Tracing | None:
        """Tracing as the ``OTEL_*`` variables ask (None: off, or not installed)."""
        env = os.environ if env is None else env
        if not tracing_requested(env):
            return None
        try:
            processors = _processors_from_env(env)
        except ImportError:
            log.warning(
                "agentcell: OTEL_* variables ask for traces but the OpenTelemetry SDK is not "
                "installed: pip install 'agentcell[otel]'"
            )
            return None
        except ValueError as exc:
            log.warning("agentcell: traces are off: %s", exc)
            return None
        if not processors:
            return None
        processor = processors[0] if len(processors) == 1 else _Fanout(processors)
        return cls(_provider(processor), processor, traceparent=env.get("TRACEPARENT"))

    @classmethod
    def to_exporter(
        cls,
        exporter: Any,
        *,
        traceparent: str | None = None,
        capture_content: bool | None = None,
        batch: bool = False,
    ) -> Tracing:
        """Tracing into ``exporter`` (an SDK ``SpanExporter``); ``traceparent`` makes the
        run a part of the caller's trace. ``batch``: export in the background."""
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

        processor = BatchSpanProcessor(exporter) if batch else SimpleSpanProcessor(exporter)
        return cls(
            _provider(processor),
            processor,
            traceparent=traceparent or os.environ.get("TRACEPARENT"),
            capture_content=capture_content,
            owned=False,
        )

    # -- using -----------------------------------------------------------------------------
    def agent_tracer(
        self,
        *,
        agent_id: str,
        agent_name: str,
        conversation_id: str,
        model: str,
        attributes: Mapping[str, Any] | None = None,
    ) -> AgentTracer:
        """The tracer of an agent run in this process (the main agent): a child of the
        ``TRACEPARENT`` run, else of whatever span is current."""
        return AgentTracer(
            self.tracer,
            agent_id=agent_id,
            agent_name=agent_name,
            conversation_id=conversation_id,
            model=model,
            parent=self.parent,
            attributes=attributes,
            capture_content=self.capture_content,
            redact=Redactor.from_env(),
        )

    def child_context(self, span: Any = None) -> dict[str, str]:
        """What a ``Start`` carries: ``span`` (default: the current one, the ``task``
        call's) as W3C headers, the conversation it belongs to, whether content is
        recorded."""
        headers = current_trace_context(span)
        if not headers:
            return {}
        conversation = CONVERSATION.get("")
        if conversation:
            headers[CONVERSATION_KEY] = conversation
        if self.capture_content:
            headers[CAPTURE_KEY] = "true"
        return headers

    def start_task_span(self, agent_type: str) -> Any:
        """A ``task`` span of our own, for a sub-agent run with no span current (a direct
        ``Orchestrator.delegate``): a child of the ``TRACEPARENT`` run, if any."""
        from opentelemetry.trace import SpanKind

        return self.tracer.start_span(
            "execute_tool task",
            context=self.parent,
            kind=SpanKind.INTERNAL,
            attributes={
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": "task",
                "gen_ai.tool.type": "function",
                "agentcell.subagent_type": agent_type,
            },
        )

    @staticmethod
    def trace_id_of(headers: Mapping[str, str]) -> bytes:
        return trace_id_of(headers)

    @staticmethod
    @contextlib.contextmanager
    def remote_parent(headers: Mapping[str, str]) -> Iterator[None]:
        """The span ``headers`` name (a child's) is current inside the block."""
        from opentelemetry import context as otel_context

        ctx = context_from_headers(headers)
        token = otel_context.attach(ctx) if ctx is not None else None
        try:
            yield
        finally:
            if token is not None:
                otel_context.detach(token)

    @staticmethod
    def current_span() -> Any:
        from opentelemetry import trace

        return trace.get_current_span()

    def end_open(self, record: SpanRecord, cause: str, status: str) -> None:
        """End a span a child opened and could not end (it died): now, with the cause."""
        from opentelemetry.trace import StatusCode

        attributes = {**record.attributes, "agentcell.status": status, "error.type": status}
        ended = msgspec.structs.replace(
            record,
            end_ns=time.time_ns(),
            attributes=attributes,
            status=StatusCode.ERROR.value,
            status_message=cause,
        )
        self.processor.on_end(self._readable(ended, Redactor.from_env()))

    def make_unopened(
        self, parent: Any, name: str, start_ns: int, attributes: dict[str, Any], error: str
    ) -> None:
        """The agent span of a child that never opened its own (it ended before its run
        began), under ``parent`` (its ``task`` span), from ``start_ns`` until now;
        ``error``: its cause, when the child did not complete."""
        from opentelemetry import trace
        from opentelemetry.trace import Status, StatusCode

        span = self.tracer.start_span(
            name,
            context=trace.set_span_in_context(parent),
            start_time=start_ns,
            attributes={**attributes, "agentcell.opened_by_parent": True},
        )
        if error:
            span.set_attribute("error.type", str(attributes.get("agentcell.status", "error")))
            span.set_status(Status(StatusCode.ERROR, error[:MAX_VALUE_CHARS]))
        span.end()

    def ingest(self, records: Iterable[SpanRecord], trace_id: bytes) -> int:
        """End a child's spans into our processor; returns how many were taken. Spans of
        another trace, or without a parent, are not the child's to send and are dropped."""
        taken = 0
        redact = Redactor.from_env()
        for record in records:
            if record.trace_id != trace_id or len(record.span_id) != 8 or not record.parent_id:
                continue
            if record.end_ns <= 0:
                continue
            self.processor.on_end(self._readable(record, redact))
            taken += 1
        return taken

    def _readable(self, record: SpanRecord, redact: Redactor) -> Any:
        from opentelemetry.sdk.trace import ReadableSpan
        from opentelemetry.sdk.util.instrumentation import InstrumentationScope
        from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

        trace_id = int.from_bytes(record.trace_id, "big")
        sampled = TraceFlags(TraceFlags.SAMPLED)
        kinds = {k.value: k for k in SpanKind}
        codes = {c.value: c for c in StatusCode}
        return ReadableSpan(
            name=record.name[:128],
            context=SpanContext(trace_id, int.from_bytes(record.span_id, "big"), False, sampled),
            parent=SpanContext(trace_id, int.from_bytes(record.parent_id, "big"), False, sampled),
            resource=self.provider.resource,
            attributes=_bounded(record.attributes, redact),
            kind=kinds.get(record.kind, SpanKind.INTERNAL),
            status=Status(
                codes.get(record.status, StatusCode.UNSET),
                redact(record.status_message[:MAX_VALUE_CHARS]) or None,
            ),
            start_time=record.start_ns,
            end_time=max(record.end_ns, record.start_ns),
            instrumentation_scope=InstrumentationScope(_SCOPE),
        )

    def flush(self) -> None:
        self.processor.force_flush()

    def close(self) -> None:
        """Send what is left; an exporter made from the environment is shut down."""
        self.processor.force_flush()
        if self.owned:
            self.provider.shutdown()


def _bounded(attributes: Mapping[str, Any], redact: Redactor) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in list(attributes.items())[:MAX_ATTRIBUTES]:
        if isinstance(value, str):
            out[key[:128]] = redact(value[:MAX_VALUE_CHARS])
        elif isinstance(value, list):
            out[key[:128]] = [
                redact(v[:MAX_VALUE_CHARS]) if isinstance(v, str) else v for v in value[:64]
            ]
        else:
            out[key[:128]] = value
    return out


def _provider(processor: Any) -> Any:
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider

    # Resource.create reads OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES.
    resource = Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME", "agentcell")})
    provider = TracerProvider(resource=resource, shutdown_on_exit=False)
    provider.add_span_processor(processor)
    return provider


def _processors_from_env(env: Mapping[str, str]) -> list[Any]:
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    names = [n.strip() for n in env.get("OTEL_TRACES_EXPORTER", "otlp").lower().split(",")]
    processors = []
    for name in filter(None, names):
        if name == "none":
            continue
        if name == "otlp":
            processors.append(BatchSpanProcessor(_otlp_exporter(env)))
        elif name == "console":
            from opentelemetry.sdk.trace.export import ConsoleSpanExporter

            processors.append(BatchSpanProcessor(ConsoleSpanExporter()))
        else:
            raise ValueError(f"OTEL_TRACES_EXPORTER={name!r} is not one of otlp, console, none")
    return processors


def _otlp_exporter(env: Mapping[str, str]) -> Any:
    protocol = (
        env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        or env.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        or "http/protobuf"
    )
    if protocol.strip().lower() != "http/protobuf":
        raise ValueError(
            f"OTEL_EXPORTER_OTLP_PROTOCOL={protocol!r}: agentcell exports over http/protobuf "
            "only (set it to http/protobuf and point the endpoint at the collector's HTTP port)"
        )
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter()  # it reads the endpoint, headers and timeout variables itself


class _Fanout:
    """Several exporters (``OTEL_TRACES_EXPORTER=otlp,console``) behind one processor."""

    def __init__(self, processors: list[Any]) -> None:
        self.processors = processors

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        for p in self.processors:
            p.on_start(span, parent_context=parent_context)

    def on_end(self, span: Any) -> None:
        for p in self.processors:
            p.on_end(span)

    def shutdown(self) -> None:
        for p in self.processors:
            p.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return all(p.force_flush(timeout_millis) for p in self.processors)
