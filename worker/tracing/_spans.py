"""OpenTelemetry spans of one agent run, after the GenAI semantic conventions.

An ``AgentTracer`` makes the spans of one engine run: ``invoke_agent {name}`` around it,
``chat {model}`` per model request, ``execute_tool {tool}`` per tool call (the current
span while the tool runs, so a ``task`` call's sub-agent is traced under it). It works on
the OpenTelemetry *API* only; where spans go (an exporter in the parent, frames to the
parent in a child) is decided by whoever made the tracer it wraps.

Nothing here is imported, and no span is made, unless tracing is on: an engine without a
tracer pays one ``is None`` test per model request and per tool call.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import os
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from agentcell.protocol import RunResult, RunStatus, ToolCall, Usage
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

#: The conventions' switch for recording prompts, answers and tool arguments/results.
CAPTURE_CONTENT_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
#: Longest recorded content attribute (the rest is cut: spans are not transcripts).
MAX_CONTENT_CHARS = 4096
_W3C = TraceContextTextMapPropagator()
#: ``Start.trace_context`` keys besides the W3C headers.
CONVERSATION_KEY = "agentcell-conversation"
CAPTURE_KEY = "agentcell-capture-content"
#: The conversation of the agent whose span is current (its sub-agents share it).
CONVERSATION: contextvars.ContextVar[str] = contextvars.ContextVar("agentcell_conversation")


def capture_content_requested(env: Mapping[str, str] | None = None) -> bool:
    value = (env if env is not None else os.environ).get(CAPTURE_CONTENT_ENV, "")
    return value.strip().lower() in {"true", "1", "yes", "on"}


def split_model(name: str) -> tuple[str, str]:
    """``openai:gpt-4o`` → (``openai``, ``gpt-4o``); a bare name has no provider."""
    provider, sep, model = name.partition(":")
    return (provider, model) if sep else ("", name)


def current_trace_context(span: Span | None = None) -> dict[str, str]:
    """The W3C headers (``traceparent``, ``tracestate``) of ``span`` (default: the current
    one), for a child."""
    carrier: dict[str, str] = {}
    _W3C.inject(carrier, context=trace.set_span_in_context(span) if span is not None else None)
    return carrier


def context_from_headers(headers: Mapping[str, str]) -> otel_context.Context | None:
    """The context a ``traceparent`` (and ``tracestate``) names; None when it names none."""
    if not headers.get("traceparent"):
        return None
    ctx = _W3C.extract(dict(headers))
    if not trace.get_current_span(ctx).get_span_context().is_valid:
        return None
    return ctx


def trace_id_of(headers: Mapping[str, str]) -> bytes:
    """The trace id a ``traceparent`` carries (b"" when it carries none)."""
    ctx = context_from_headers(headers)
    if ctx is None:
        return b""
    return trace.get_current_span(ctx).get_span_context().trace_id.to_bytes(16, "big")


class AgentTracer:
    """The spans of one agent's run. ``attributes`` are agentcell's own (pid, node,
    sandbox mode) for the agent span; ``redact`` masks keys in recorded content."""

    def __init__(
        self,
        tracer: trace.Tracer,
        *,
        agent_id: str,
        agent_name: str,
        conversation_id: str,
        model: str,
        parent: otel_context.Context | None = None,
        attributes: Mapping[str, Any] | None = None,
        capture_content: bool = False,
        redact: Callable[[str], str] = str,
    ) -> None:
        self.tracer = tracer
        self.agent_id = agent_id
        self.agent_name = agent_name
        self.conversation_id = conversation_id
        self.provider, self.model = split_model(model)
        self.parent = parent
        self.attributes = dict(attributes or {})
        self.capture_content = capture_content
        self.redact = redact
        self.agent_span: Span | None = None

    # -- the agent span ------------------------------------------------------------------
    def start_agent(self) -> object:
        """Open the ``invoke_agent`` span and make it current; returns the token that
        ``detach`` takes (once the engine's task has copied the context)."""
        attributes = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.id": self.agent_id,
            "gen_ai.agent.name": self.agent_name,
            "gen_ai.conversation.id": self.conversation_id,
            **self._model_attributes(),
            **self.attributes,
        }
        span = self.tracer.start_span(
            f"invoke_agent {self.agent_name}",
            context=self.parent,
            kind=SpanKind.INTERNAL,
            attributes=attributes,
        )
        self.agent_span = span
        token = otel_context.attach(trace.set_span_in_context(span, self.parent))
        CONVERSATION.set(self.conversation_id)  # copied into the engine's task with the span
        return token

    @staticmethod
    def detach(token: object) -> None:
        otel_context.detach(token)  # type: ignore[arg-type]

    def end_agent(self, result: RunResult | None, error: str = "") -> None:
        span = self.agent_span
        if span is None:
            return
        if result is not None:
            span.set_attribute("agentcell.status", result.status.value)
            _set_usage(span, result.usage)
            span.set_attribute("agentcell.turns", result.turns)
            span.set_attribute("agentcell.tool_calls", result.tool_calls)
            if result.status is not RunStatus.COMPLETED:
                error = error or result.error or result.status.value
        if error:
            span.set_status(Status(StatusCode.ERROR, error[:MAX_CONTENT_CHARS]))
            span.set_attribute("error.type", result.status.value if result else "error")
        span.end()

    # -- model requests ------------------------------------------------------------------
    def start_chat(self, messages: Any = None) -> Span:
        span = self.tracer.start_span(
            f"chat {self.model}",
            kind=SpanKind.CLIENT,
            attributes={"gen_ai.operation.name": "chat", **self._model_attributes()},
        )
        if self.capture_content and messages is not None:
            span.set_attribute("gen_ai.input.messages", self._content(messages))
        return span

    def end_chat(self, span: Span, response: Any = None, error: str = "") -> None:
        if response is not None:
            if response.model:
                span.set_attribute("gen_ai.response.model", split_model(response.model)[1])
            span.set_attribute("gen_ai.response.finish_reasons", [str(response.stop_reason.value)])
            _set_usage(span, response.usage)
            if self.capture_content:
                output = {"text": response.text, "tool_calls": response.tool_calls}
                span.set_attribute("gen_ai.output.messages", self._content(output))
        if error:
            span.set_status(Status(StatusCode.ERROR, error[:MAX_CONTENT_CHARS]))
            span.set_attribute("error.type", "model_error")
        span.end()

    # -- tool calls ----------------------------------------------------------------------
    @contextlib.contextmanager
    def tool(self, call: ToolCall) -> Iterator[Span]:
        """The ``execute_tool`` span of one call, current while the tool runs."""
        attributes = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": call.name,
            "gen_ai.tool.call.id": call.id,
            "gen_ai.tool.type": "function",
        }
        with self.tracer.start_as_current_span(
            f"execute_tool {call.name}",
            kind=SpanKind.INTERNAL,
            attributes=attributes,
            record_exception=False,
            set_status_on_exception=True,
        ) as span:
            if self.capture_content:
                span.set_attribute("gen_ai.tool.call.arguments", self._content(call.arguments))
            yield span

    def end_tool(self, span: Span, content: str, is_error: bool) -> None:
        if self.capture_content:
            span.set_attribute("gen_ai.tool.call.result", self._content(content))
        if is_error:
            span.set_status(Status(StatusCode.ERROR, content[:200]))
            span.set_attribute("error.type", "tool_error")

    @staticmethod
    def approval_waited(ms: float) -> None:
        """Time the current tool call waited for a person's approval."""
        trace.get_current_span().set_attribute("agentcell.approval_wait_ms", round(ms, 3))

    # -- helpers -------------------------------------------------------------------------
    def _model_attributes(self) -> dict[str, str]:
        attributes = {"gen_ai.request.model": self.model}
        if self.provider:
            attributes["gen_ai.provider.name"] = self.provider
        return attributes

    def _content(self, value: Any) -> str:
        text = value if isinstance(value, str) else json.dumps(value, default=_plain)
        return self.redact(text[:MAX_CONTENT_CHARS])


def _set_usage(span: Span, usage: Usage) -> None:
    span.set_attribute("gen_ai.usage.input_tokens", usage.input_tokens)
    span.set_attribute("gen_ai.usage.output_tokens", usage.output_tokens)
    span.set_attribute("gen_ai.usage.cache_read.input_tokens", usage.cache_read_tokens)
    span.set_attribute("gen_ai.usage.cache_creation.input_tokens", usage.cache_write_tokens)


def _plain(value: Any) -> Any:
    import msgspec

    return msgspec.to_builtins(value)
