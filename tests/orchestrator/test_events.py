"""Events that do what their docstrings say: ``events()`` sees everything from the moment
it is called and ends when the orchestrator closes; ``run_stream`` streams one run to its
report; a raising listener breaks nothing; a slow reader's buffer is bounded."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import child_models
import pytest
from agentcell.orchestrator import (
    AgentDefinition,
    Orchestrator,
    RunReport,
    Settings,
)
from agentcell.orchestrator.delegation._events import (
    AgentActivity,
    EventBus,
    SubAgentEnded,
    SubAgentStarted,
)
from agentcell.orchestrator.delegation._results import SubAgentResult
from agentcell.protocol import RunFinished, RunResult, RunStatus, TextDelta, ToolStarted
from conftest import SpawnRecorder

from agentcell.testing import FunctionModel, reply, tool_call, tool_results


def main_fn(messages: list[Any], tools: list[Any]) -> Any:
    if not tool_results(messages):
        return reply("", tool_call("task", subagent_type="fine", prompt="look"))
    return "all done"


async def collect(stream: Any) -> list[Any]:
    return [event async for event in stream]


def orchestrator(tmp_path: Path) -> Orchestrator:
    return Orchestrator(
        model=FunctionModel(main_fn, name="function:main"),
        settings=Settings(approval="allow", max_workers=4, warm_spares=1),
        workdir=tmp_path,
        agents=[AgentDefinition(name="fine", description="d", tools=[], model="function:fine")],
        models={"function:fine": FunctionModel(child_models.answer_prompt, name="function:fine")},
        load_agent_files=False,
        record=False,
    )


async def test_events_are_received_from_the_call_and_end_when_the_orchestrator_closes(
    spawned: SpawnRecorder, tmp_path: Path
) -> None:
    orch = orchestrator(tmp_path)
    async with orch:
        stream = orch.events()  # not read yet: it must already be listening
        result = await orch.delegate("fine", "first")
    # The orchestrator is closed: the loop below ends by itself after the held events.
    received = await asyncio.wait_for(collect(stream), 30)
    assert isinstance(received[0], SubAgentStarted)
    assert received[0].agent_id == result.agent_id
    assert isinstance(received[-1], SubAgentEnded) and received[-1].result == result
    assert await asyncio.wait_for(collect(orch.events()), 30) == []  # closed: ends at once


async def test_run_stream_yields_the_runs_events_then_its_report_last(
    spawned: SpawnRecorder, tmp_path: Path
) -> None:
    async with orchestrator(tmp_path) as orch:
        items = await asyncio.wait_for(collect(orch.run_stream("go")), 60)
    *events, report = items
    assert isinstance(report, RunReport) and report.status is RunStatus.COMPLETED
    assert report.final_text == "all done"
    assert not any(isinstance(e, RunReport) for e in events)
    main_done = [
        e
        for e in events
        if isinstance(e, AgentActivity)
        and e.agent_id == "main"
        and isinstance(e.event, RunFinished)
    ]
    assert len(main_done) == 1  # the run's own end is in the stream, before the report
    (ended,) = [e for e in events if isinstance(e, SubAgentEnded)]
    assert ended.result == report.subagents[0]


async def test_leaving_run_stream_early_cancels_the_run(
    spawned: SpawnRecorder, tmp_path: Path
) -> None:
    async with orchestrator(tmp_path) as orch:
        stream = orch.run_stream("go")
        async for item in stream:
            if isinstance(item, SubAgentStarted):
                break
        await stream.aclose()  # type: ignore[attr-defined]
        assert not orch._main.engines  # the main agent's run is over
        assert not orch.bus._streams


async def test_a_raising_listener_breaks_neither_the_run_nor_another_listener(
    spawned: SpawnRecorder, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    seen: list[Any] = []

    def broken(event: Any) -> None:
        raise RuntimeError("listener bug")

    async with orchestrator(tmp_path) as orch:
        orch.bus.subscribe(broken)
        orch.bus.subscribe(seen.append)
        with caplog.at_level(logging.ERROR, logger="agentcell.events"):
            report = await orch.run("go")
    assert report.status is RunStatus.COMPLETED, report.error
    assert any(isinstance(e, SubAgentEnded) for e in seen)
    logged = [r for r in caplog.records if r.name == "agentcell.events"]
    assert len(logged) == 1 and "listener bug" in (logged[0].exc_text or "")
    assert len(seen) > 5  # many events, one log line


def test_a_slow_readers_buffer_drops_progress_and_keeps_each_end() -> None:
    """Past the buffer, what a child sends (text, tool calls, notices, repeated ends: as
    often as a hostile one likes) is dropped and counted; the parent's events and each
    agent's first end always get in, so the stream stays bounded by the sub-agents."""
    bus = EventBus()
    stream = bus.stream(buffer=5)
    for i in range(20):
        bus.publish(AgentActivity(agent_id="a1", event=TextDelta(text=f"{i} ")))
    for i in range(50):
        bus.publish(
            AgentActivity(agent_id="a1", event=ToolStarted(call_id=str(i), name="x", arguments=""))
        )
    ended = SubAgentEnded(
        agent_id="a1",
        result=SubAgentResult(agent_id="a1", agent_type="x", status=RunStatus.COMPLETED),
    )
    finished = AgentActivity(
        agent_id="a1", event=RunFinished(result=RunResult(status=RunStatus.COMPLETED))
    )
    for _ in range(3):
        bus.publish(finished)
    bus.publish(ended)
    assert stream.dropped == 15 + 50 + 2
    assert stream.pending == 5 + 2  # the bound holds; each end gets in once
    bus.close()

    async def read() -> list[Any]:
        return [event async for event in stream]

    events = asyncio.run(read())
    assert events[-1] is ended and events[-2] == finished
