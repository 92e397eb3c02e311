"""A sub-agent on a Ray node is traced like a local one: its spans are made on the node,
travel back over its TCP channel as signed frames and nest under the task span."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest
from agentcell.orchestrator import AgentDefinition, Orchestrator, Settings
from agentcell.orchestrator.backends.ray._local import RayHead
from agentcell.protocol import RunStatus
from otel_models import by_name, delegating_main, parent_of

from agentcell.testing import FunctionModel, reply, tool_call, tool_results

pytest.importorskip("ray", reason="the ray extra is not installed")
pytest.importorskip("opentelemetry.sdk", reason="the otel extra is not installed")

from agentcell.worker.tracing import Tracing
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)

pytestmark = pytest.mark.slow


@pytest.fixture
def head(ray_head: RayHead) -> RayHead:
    return ray_head  # the session's one head (conftest.py)


async def test_a_ray_sub_agents_spans_nest_under_the_task_span(
    head: RayHead, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key, value in head.env.items():
        if key.startswith("RAY_"):
            monkeypatch.setenv(key, value)
    (tmp_path / "notes.txt").write_text("the notes\n")
    settings = Settings(backend="ray", warm_spares=0, approval="allow")
    settings.ray.address = head.address
    exporter = InMemorySpanExporter()

    def read_notes(messages: list[Any], tools: list[Any]) -> Any:
        # Defined here: a node imports no test module, so dill sends it by value.
        if not tool_results(messages):
            return reply("reading", tool_call("read_file", path="notes.txt"))
        return "read"

    worker = FunctionModel(read_notes, name="function:worker")
    orch = Orchestrator(
        model=delegating_main(tool_call("task", subagent_type="reader", prompt="read")),
        agents=[
            AgentDefinition(
                name="reader", model="function:worker", tools=["read_file"], description="r"
            )
        ],
        models={"function:worker": worker},
        settings=settings,
        load_agent_files=False,
        workdir=tmp_path,
        record=False,
        tracing=Tracing.to_exporter(exporter),
    )
    async with orch:
        report = await asyncio.wait_for(orch.run("go"), 180)
    assert report.status is RunStatus.COMPLETED, report.error
    (sub,) = report.subagents
    spans = list(exporter.get_finished_spans())
    (task,) = by_name(spans, "execute_tool task")
    (child,) = by_name(spans, "invoke_agent reader")
    assert parent_of(child) == task.context.span_id
    assert child.attributes["agentcell.pid"] == sub.pid != os.getpid()
    (read,) = by_name(spans, "execute_tool read_file")
    assert parent_of(read) == child.context.span_id
    assert len(by_name(spans, "chat worker")) == 2
