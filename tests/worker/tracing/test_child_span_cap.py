"""A sub-agent's spans are capped at ``MAX_CHILD_SPANS`` however it sends them (issue 39
§7): a child that opens a span and ends it at once, over and over in its few open slots,
runs out of room as one that sends finished spans does. Red with ``ChildSpans.take``
taking a span's end without counting it."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import pytest
import span_cap_models
from agentcell.orchestrator import AgentDefinition, Orchestrator, Settings
from agentcell.protocol import RunStatus, ToolMessage
from conftest import SpawnRecorder

from agentcell.testing import FunctionModel, reply, tool_call, tool_results

pytest.importorskip("opentelemetry.sdk", reason="the otel extra is not installed")

from agentcell.worker.tracing import MAX_CHILD_SPANS, Tracing
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)
from opentelemetry.trace import StatusCode


def main_model(messages: list[Any], tools: list[Any]) -> Any:
    if not any(isinstance(m, ToolMessage) for m in messages):
        return reply("", tool_call("task", subagent_type="flooder", prompt="flood"))
    return "summary: " + tool_results(messages)[0].content


async def test_open_and_end_pairs_count_against_a_childs_span_limit(
    spawned: SpawnRecorder, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    assert span_cap_models.PAIRS > MAX_CHILD_SPANS  # the attack sends more than the cap
    exporter = InMemorySpanExporter()
    orch = Orchestrator(
        settings=Settings(approval="allow", max_workers=2, warm_spares=0),
        load_agent_files=False,
        workdir=tmp_path,
        tracing=Tracing.to_exporter(exporter),
        model=FunctionModel(main_model, name="function:main"),
        agents=[
            AgentDefinition(
                name="flooder",
                description="opens and ends spans",
                system_prompt="You flood.",
                tools=[],
                model="function:flooder",
                source="test",
            )
        ],
        models={
            "function:flooder": FunctionModel(
                span_cap_models.open_and_end_spans, name="function:flooder"
            )
        },
    )
    with caplog.at_level(logging.WARNING, logger="agentcell.tracing"):
        async with orch:
            report = await asyncio.wait_for(orch.run("go"), 120)
    assert report.status is RunStatus.COMPLETED, report.error
    (sub,) = report.subagents
    assert sub.status is RunStatus.COMPLETED and "flooded" in report.final_text

    spans = list(exporter.get_finished_spans())
    forged = [s for s in spans if s.name.startswith("forged ")]
    (agent,) = [s for s in spans if s.name == "invoke_agent flooder"]
    from_child = [s for s in spans if s.name.startswith("forged ") or s.name.endswith("flooder")]
    # The parent exported at most the cap of everything the child sent (its own agent and
    # chat spans included) — some of the forged ones, not all 3,000.
    assert len(from_child) <= MAX_CHILD_SPANS, len(from_child)
    assert 0 < len(forged) < MAX_CHILD_SPANS
    # The child's agent span took its place when it opened: its end was still taken.
    assert agent.status.status_code is not StatusCode.ERROR
    assert agent.attributes is not None and agent.attributes["agentcell.pid"] == sub.pid
    assert any("spans over the limit: dropped" in r.getMessage() for r in caplog.records)


def test_a_childs_tracer_starts_no_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    """It is made before the walls go up, which refuse a process with a thread beside its
    own: the SDK's default resource ran its detectors in a thread pool, joined, but still
    listed by the kernel a moment later, and a sub-agent was refused at random (issue 44:
    its ``invoke_agent`` span "lost" in one of four on a loaded machine)."""
    import threading

    from agentcell.protocol import PROTOCOL_VERSION, AgentSpec, Start
    from agentcell.worker.tracing._child import child_tracer

    started: list[str] = []
    real_start = threading.Thread.start

    def recorded(thread: threading.Thread) -> None:
        started.append(thread.name)
        real_start(thread)

    monkeypatch.setattr(threading.Thread, "start", recorded)
    traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    start = Start(
        protocol_version=PROTOCOL_VERSION,
        run_id="r1",
        handler="agentcell.worker.child:run_agent",
        spec=AgentSpec(agent_id="a1", agent_type="reader", prompt="go"),
        trace_context={"traceparent": traceparent},
    )
    tracer = child_tracer(start, lambda frame: None)
    assert tracer is not None
    assert started == []
