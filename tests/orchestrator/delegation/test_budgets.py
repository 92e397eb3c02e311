"""Budgets, cost and run controls that cannot lie, over real child processes.

A budget crossed on an agent's last turn ends its run as ``budget`` (never
``completed``); agentcell never cancels the caller's task; reports count one run alone;
pause and resume cross the pipe and act at the child's turn boundary; the child-side
deny hook is a real second layer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import child_models
import pytest
from agentcell.orchestrator import AgentDefinition, Orchestrator, Settings
from agentcell.orchestrator.config._settings import Price
from agentcell.orchestrator.delegation._events import AgentActivity
from agentcell.orchestrator.delegation._request import DelegationRequest
from agentcell.orchestrator.delegation._runner import RunHandle
from agentcell.protocol import MAX_FRAME_BYTES, Notice, RunStatus, TurnStarted, Usage
from agentcell.worker.tools import function_tool
from conftest import SpawnRecorder
from delegation_util import gate

from agentcell.testing import FunctionModel, reply, tool_call, tool_results

BIG = Usage(input_tokens=80, output_tokens=40)
SMALL = Usage(input_tokens=10, output_tokens=5)


def worker(name: str, tools: list[str] | None = None) -> AgentDefinition:
    return AgentDefinition(
        name=name, description=f"{name} agent", tools=tools or [], model=f"function:{name}"
    )


def orchestrator(
    tmp_path: Path,
    *,
    main: Callable[..., Any] = lambda m, t: "unused",
    agents: dict[str, FunctionModel] | None = None,
    tools: list[Any] | None = None,
    **settings: Any,
) -> Orchestrator:
    models = dict(agents or {})
    return Orchestrator(
        model=FunctionModel(main, name="function:main"),
        settings=Settings(approval="allow", max_workers=4, warm_spares=1, **settings),
        workdir=tmp_path,
        agents=[worker(name.partition(":")[2], ["read_file"]) for name in models],
        models=models,
        tools=tools or [],
        load_agent_files=False,
        record=False,
    )


def big_answer(messages: list[Any], tools: list[Any]) -> Any:
    return reply("the answer", usage=BIG)


def caller_cancelled() -> int:
    task = asyncio.current_task()
    assert task is not None
    return task.cancelling()


async def test_a_token_budget_crossed_on_the_main_agents_last_turn_is_budget(
    spawned: SpawnRecorder, tmp_path: Path
) -> None:
    orch = orchestrator(tmp_path, main=big_answer)
    orch.settings.budgets.max_tokens = 100
    async with orch:
        report = await orch.run("answer at once")
    # The answer came on the very turn that went over: still not a completed run.
    assert report.status is RunStatus.BUDGET
    assert "token budget exceeded: 120 tokens, max_tokens is 100" in report.error
    assert report.final_text == "the answer"  # kept, but not reported as success
    assert caller_cancelled() == 0  # agentcell never cancels the caller's task


async def test_a_turn_budget_stops_the_main_agent(spawned: SpawnRecorder, tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("hello")

    def main(messages: list[Any], tools: list[Any]) -> Any:
        if not tool_results(messages):
            return reply("", tool_call("read_file", path="notes.txt"))
        return "read it"

    orch = orchestrator(tmp_path, main=main)
    orch.settings.budgets.max_turns = 1
    async with orch:
        report = await orch.run("read the notes")
    assert report.status is RunStatus.BUDGET
    assert report.error == "turn budget exceeded: 2 turns, max_turns is 1"
    assert caller_cancelled() == 0


async def test_a_sub_agent_that_crosses_the_budget_on_its_last_turn_is_budget(
    spawned: SpawnRecorder, tmp_path: Path
) -> None:
    orch = orchestrator(
        tmp_path, agents={"function:big": FunctionModel(big_answer, name="function:big")}
    )
    orch.settings.budgets.max_tokens = 100
    async with orch:
        direct = await orch.delegate("big", "answer")
    assert direct.status is RunStatus.BUDGET, direct
    assert direct.error == "token budget exceeded: 120 tokens, max_tokens is 100"
    assert caller_cancelled() == 0


async def test_a_sub_agent_crossing_the_budget_ends_the_main_run_as_budget(
    spawned: SpawnRecorder, tmp_path: Path
) -> None:
    def main(messages: list[Any], tools: list[Any]) -> Any:
        if not tool_results(messages):
            return reply("", tool_call("task", subagent_type="big", prompt="spend"), usage=SMALL)
        return reply("the sub-agent finished", usage=SMALL)

    orch = orchestrator(
        tmp_path, main=main, agents={"function:big": FunctionModel(big_answer, name="function:big")}
    )
    orch.settings.budgets.max_tokens = 130  # 15 (main) + 120 (the sub-agent's one turn)
    async with orch:
        report = await orch.run("delegate")
    (sub,) = report.subagents
    assert sub.status is RunStatus.BUDGET
    assert report.status is RunStatus.BUDGET
    assert report.error == "token budget exceeded: 135 tokens, max_tokens is 130"
    assert caller_cancelled() == 0


async def test_cost_and_usage_cover_one_run_and_the_lifetime_totals_add_up(
    spawned: SpawnRecorder, tmp_path: Path
) -> None:
    def main(messages: list[Any], tools: list[Any]) -> Any:
        if not tool_results(messages):
            return reply("", tool_call("task", subagent_type="big", prompt="p"), usage=BIG)
        return reply("done", usage=SMALL)

    prices = {
        "function:main": Price(input=2.0, output=4.0),  # dollars per million tokens
        "function:big": Price(input=1.0, output=3.0),
    }
    orch = orchestrator(
        tmp_path,
        main=main,
        agents={"function:big": FunctionModel(big_answer, name="function:big")},
        prices=prices,
    )
    async with orch:
        first = await orch.run("one")
        second = await orch.run("two")
    main_cost = (90 * 2.0 + 45 * 4.0) / 1e6
    sub_cost = (80 * 1.0 + 40 * 3.0) / 1e6
    for report in (first, second):
        assert report.status is RunStatus.COMPLETED, report.error
        assert report.usage == Usage(input_tokens=170, output_tokens=85)  # this run only
        assert report.cost_usd == pytest.approx(main_cost + sub_cost)
        assert report.subagents[0].cost_usd == pytest.approx(sub_cost)
    assert orch.total_usage == first.usage + second.usage
    assert orch.total_cost_usd == pytest.approx(2 * (main_cost + sub_cost))


async def test_pause_holds_a_child_at_its_turn_boundary_until_resume(
    spawned: SpawnRecorder, tmp_path: Path
) -> None:
    async with gate() as door:
        model = FunctionModel(child_models.gate_then_answer, name="function:pausable")
        orch = orchestrator(tmp_path, agents={"function:pausable": model}, tools=[door.tool()])
        orch.registry.add(worker("pausable", ["wait_at_gate"]))
        turns: list[int] = []
        held, acknowledged = asyncio.Event(), asyncio.Event()
        handle = RunHandle()

        def watch(event: Any) -> None:
            if not isinstance(event, AgentActivity):
                return
            inner = event.event
            if isinstance(inner, TurnStarted):
                turns.append(inner.turn)
            elif isinstance(inner, Notice) and inner.message.startswith("pause received"):
                door.open()  # the pause is in the child: let its tool call finish
            elif isinstance(inner, Notice) and inner.message.startswith("paused at the turn"):
                held.set()
            elif isinstance(inner, Notice) and inner.message.startswith("steering message"):
                acknowledged.set()

        async with orch:
            orch.bus.subscribe(watch)
            running = asyncio.ensure_future(
                orch.runner.run(
                    DelegationRequest(agent_type="pausable", prompt="job"),
                    orch._direct.scope(),
                    handle=handle,
                )
            )
            await asyncio.wait_for(door.wait_arrivals(1), 60)  # inside its first turn's tool
            handle.pause()
            await asyncio.wait_for(held.wait(), 60)
            # A round trip after the child said it waits: had it gone on instead, its
            # second turn's start would have reached us before this acknowledgement
            # (frames keep their order, and it would have been sent at once).
            handle.steer("carry on when resumed")
            await asyncio.wait_for(acknowledged.wait(), 60)
            assert turns == [1]
            assert not running.done()
            handle.resume()
            result = await asyncio.wait_for(running, 60)
    assert result.status is RunStatus.COMPLETED, result.error
    assert result.text == "done: job"
    assert turns == [1, 2]


def task_status() -> str:
    """A custom tool that takes a coordination tool's name."""
    return "the custom task_status ran"


async def test_the_child_side_hook_refuses_coordination_tools_the_parent_let_through(
    spawned: SpawnRecorder, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agentcell.orchestrator.definitions._tool_policy import ResolvedTools
    from agentcell.orchestrator.delegation import _prepare

    # Break the first layer (the parent's resolve_tools) on purpose: the child must hold.
    monkeypatch.setattr(
        _prepare,
        "resolve_tools",
        lambda allow, deny, parent: ResolvedTools(tools=["task_status"], unknown=[]),
    )
    model = FunctionModel(child_models.call_tool_named_in_prompt, name="function:sneaky")
    orch = orchestrator(
        tmp_path,
        agents={"function:sneaky": model},
        tools=[function_tool(task_status, name="task_status", read_only=True)],
    )
    async with orch:
        result = await orch.delegate("sneaky", "task_status")
    assert result.status is RunStatus.COMPLETED, result.error
    assert result.text.startswith("after task_status: permission denied: sub-agents at depth 1")
    assert "custom task_status ran" not in result.text


async def test_a_prompt_too_large_for_a_frame_is_refused_in_one_line(
    spawned: SpawnRecorder, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    orch = orchestrator(
        tmp_path, agents={"function:big": FunctionModel(big_answer, name="function:big")}
    )
    async with orch:
        result = await orch.delegate("big", "x" * (MAX_FRAME_BYTES + 1))
    assert result.status is RunStatus.ERROR
    assert result.error.startswith("the prompt is too large to send to a sub-agent: 16.0 MiB,")
    assert "at most 16 MiB (MAX_FRAME_BYTES)" in result.error
    assert "\n" not in result.error and result.pid is None  # no process was spent on it
    assert not [r for r in caplog.records if r.exc_info]  # no traceback anywhere


async def test_engine_cancel_stops_its_own_task_never_the_callers() -> None:
    from agentcell.protocol import UsageUpdate
    from agentcell.worker import Engine

    engine = Engine(FunctionModel(big_answer, name="function:big"))

    def on_event(event: Any) -> None:
        if isinstance(event, UsageUpdate):  # as the final answer arrives
            engine.cancel("over budget", RunStatus.BUDGET)

    result = await engine.run("go", on_event=on_event)
    assert (result.status, result.error, result.text) == (
        RunStatus.BUDGET,
        "over budget",
        "the answer",
    )
    assert caller_cancelled() == 0
    await asyncio.sleep(0)  # a yield: a stray cancel of this task would land here


async def test_a_budget_stop_that_lands_as_the_loop_returns_still_ends_the_run_as_budget() -> None:
    from agentcell.worker import Engine

    engine = Engine(FunctionModel(lambda m, t: "the answer", name="function:quick"))
    running = asyncio.ensure_future(engine.run("go"))
    await asyncio.sleep(0)  # a yield: run() has started its loop task
    assert engine._task is not None
    # Runs right after the loop's task ended and before run() resumes to report it.
    engine._task.add_done_callback(lambda _: engine.cancel("over budget", RunStatus.BUDGET))
    result = await running
    assert (result.status, result.error, result.text) == (
        RunStatus.BUDGET,
        "over budget",
        "the answer",
    )
