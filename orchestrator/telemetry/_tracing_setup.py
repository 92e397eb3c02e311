"""The orchestrator's tracing: made from the ``OTEL_*`` variables unless given, and the
main agent's tracer. OpenTelemetry is imported only when traces are asked for."""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any

from agentcell.worker.tracing import tracing_requested


def tracing_from_env() -> Any:
    """A ``Tracing`` when the environment asks for traces, else None (nothing imported)."""
    if not tracing_requested(os.environ):
        return None
    from agentcell.worker.tracing import Tracing

    return Tracing.from_env()


def tracing_preload(tracing: Any) -> list[str] | None:
    """What a traced run's fork server imports for its children: the SDK and the span
    frames (~0.2 s a child would otherwise pay on its first span)."""
    return ["agentcell.worker.tracing._child"] if tracing is not None else None


def main_tracer(tracing: Any, *, model: str, run_dir: Path | None) -> Any:
    """The main agent's ``AgentTracer`` for one run (None when tracing is off)."""
    if tracing is None:
        return None
    return tracing.agent_tracer(
        agent_id="main",
        agent_name="main",
        conversation_id=run_dir.name if run_dir is not None else uuid.uuid4().hex,
        model=model,
        # The main agent runs in this process, outside any sandbox (its sub-agents' walls
        # are on their own spans).
        attributes={"agentcell.pid": os.getpid(), "agentcell.sandbox": "off"},
    )
