"""OpenTelemetry traces of agent runs, across the processes they run in.

``tracing_requested`` reads the ``OTEL_*`` variables without importing anything; the rest
imports OpenTelemetry when first used (``pip install 'agentcell[otel]'`` for the SDK and
the OTLP/HTTP exporter), so a run that traces nothing pays nothing for it.

_env      whether this process traces at all (no OpenTelemetry import)
_spans    ``AgentTracer``: the spans of one agent run (GenAI semantic conventions)
_child    a sub-agent's spans, made in its process and sent to the parent as frames
_export   ``Tracing``: where spans go, one exporter in the parent for every process
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agentcell.worker.tracing._env import tracing_requested

if TYPE_CHECKING:  # imported on first use (see __getattr__): OpenTelemetry comes with them
    from agentcell.worker.tracing._export import MAX_CHILD_SPANS, Tracing

__all__ = [
    "MAX_CHILD_SPANS",
    "Tracing",
    "tracing_requested",
]

_LAZY = {
    "Tracing": "agentcell.worker.tracing._export",
    "MAX_CHILD_SPANS": "agentcell.worker.tracing._export",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
