"""OpenTelemetry traces of agent runs, across the processes they run in.

``tracing_requested`` reads the ``OTEL_*`` variables without importing anything; the rest
imports OpenTelemetry when first used (``pip install 'agentcell[otel]'`` for the SDK and
the OTLP/HTTP exporter), so a run that traces nothing pays nothing for it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agentcell.worker._tracing_env import tracing_requested

if TYPE_CHECKING:  # imported on first use (see __getattr__): OpenTelemetry comes with them
    from agentcell.worker._tracing import AgentTracer
    from agentcell.worker._tracing_child import child_tracer
    from agentcell.worker._tracing_export import MAX_CHILD_SPANS, Tracing

__all__ = [
    "MAX_CHILD_SPANS",
    "AgentTracer",
    "Tracing",
    "child_tracer",
    "tracing_requested",
]

_LAZY = {
    "AgentTracer": "agentcell.worker._tracing",
    "Tracing": "agentcell.worker._tracing_export",
    "MAX_CHILD_SPANS": "agentcell.worker._tracing_export",
    "child_tracer": "agentcell.worker._tracing_child",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
