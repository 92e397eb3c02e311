"""The parent's long-lived tasks each have an owner: a ``TaskNursery`` (a ``TaskGroup`` whose
members fail alone) entered by the object whose work they are.

A member's failure is reported (its owner's result, or a log line), never its siblings'
cancellation; closing the owner cancels and awaits every member.
"""

from __future__ import annotations

import asyncio
import io
import logging
from pathlib import Path
from typing import Any

import child_models
import pytest
from agentcell.orchestrator import Orchestrator, Settings
from agentcell.orchestrator.approvals._hooks import HookRunner
from agentcell.orchestrator.backends._forkserver import WorkerPool
from agentcell.orchestrator.cli._chat import Chat, ChatRecord, _converse
from agentcell.orchestrator.cli._display import ProgressView
from agentcell.orchestrator.config._hooks import HookCommand
from agentcell.orchestrator.delegation._events import AgentActivity, SubAgentProcess
from agentcell.protocol import RunStatus, ToolMessage, ToolStarted
from agentcell.protocol._tasks import NurseryClosed, TaskNursery
from agentcell.worker import process as _proc
from conftest import SpawnRecorder
from rich.console import Console
from task_util import GUARD_S, agent

from agentcell.testing import FunctionModel, reply, tool_call, tool_results


# -- the nursery itself ------------------------------------------------------------------
async def test_a_members_failure_is_reported_and_its_sibling_and_owner_go_on() -> None:
    failures: list[Exception] = []
    go_on = asyncio.Event()

    async def broken() -> None:
        raise RuntimeError("this member broke")

    async def steady() -> str:
        await go_on.wait()
        return "steady done"

    async with TaskNursery("test") as nursery:
        sibling = nursery.start(steady())
        failed = nursery.start(broken(), on_error=failures.append)
        await asyncio.wait({failed})
        go_on.set()  # the owner was not cancelled: it gets here
    assert [str(e) for e in failures] == ["this member broke"]
    assert failed.result() is None
    assert sibling.result() == "steady done"


async def test_a_failure_without_a_reporter_is_logged_with_its_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def broken() -> None:
        raise ValueError("nobody asked")

    with caplog.at_level(logging.ERROR):
        async with TaskNursery("the test's owner") as nursery:
            nursery.start(broken())
    (record,) = [r for r in caplog.records if "a task failed" in r.getMessage()]
    assert record.getMessage() == "the test's owner: a task failed"
    assert record.exc_info is not None and "nobody asked" in str(record.exc_info[1])


async def test_closing_cancels_and_awaits_every_member_and_refuses_new_ones() -> None:
    ended: list[str] = []

    async def forever(name: str) -> None:
        try:
            await asyncio.Event().wait()
        finally:
            ended.append(name)

    nursery = await TaskNursery("test").open()
    members = [nursery.start(forever(n)) for n in ("a", "b")]
    await asyncio.sleep(0)  # both are running (a step, not a wait for time)
    await nursery.aclose()
    assert sorted(ended) == ["a", "b"] and all(m.cancelled() for m in members)
    late = forever("late")
    with pytest.raises(NurseryClosed, match="test is not open"):
        nursery.start(late)
    assert late.cr_frame is None  # closed, never run: no "never awaited" warning


async def test_leaving_on_an_exception_cancels_the_members_and_lets_it_go_on_unchanged() -> None:
    async def forever() -> None:
        await asyncio.Event().wait()

    with pytest.raises(OSError, match="the owner failed"):  # not an ExceptionGroup
        async with TaskNursery("test") as nursery:
            member = nursery.start(forever())
            raise OSError("the owner failed")
    assert member.cancelled()


# -- the owners --------------------------------------------------------------------------
async def test_a_background_run_that_fails_in_the_parent_is_its_own_error_and_its_sibling_completes(
    spawned: SpawnRecorder, tmp_path: Path
) -> None:
    def main_fn(messages: list[Any], tools: list[Any]) -> Any:
        if not any(isinstance(m, ToolMessage) for m in messages):
            return reply(
                "",
                tool_call("task", subagent_type="breaker", prompt="break", background=True),
                tool_call("task", subagent_type="steady", prompt="hold", background=True),
            )
        text = "\n".join(str(getattr(m, "content", "")) for m in messages)
        if "answer to: hold" not in text:
            return reply("", tool_call("task_wait", timeout_s=GUARD_S))
        return "both ended"

    orch = Orchestrator(
        model=FunctionModel(main_fn, name="function:main"),
        agents=[agent("breaker", []), agent("steady", [])],
        models={
            "function:breaker": FunctionModel(child_models.answer_prompt, name="function:breaker"),
            "function:steady": FunctionModel(child_models.answer_prompt, name="function:steady"),
        },
        settings=Settings(max_workers=2, warm_spares=0),
        load_agent_files=False,
        record=False,
        workdir=tmp_path,
    )
    run = orch.runner.run

    async def run_or_break(request: Any, *args: Any, **kwargs: Any) -> Any:
        if request.agent_type == "breaker":  # the parent fails around the runner's boundary
            raise RuntimeError("the parent broke")
        return await run(request, *args, **kwargs)

    orch.runner.run = run_or_break  # type: ignore[method-assign]
    async with orch:
        report = await asyncio.wait_for(orch.run("go"), GUARD_S)
    assert report.status is RunStatus.COMPLETED and report.final_text == "both ended"
    by_type = {r.agent_type: r.result for r in orch.tracker.records()}
    broken, steady = by_type["breaker"], by_type["steady"]
    assert broken is not None and broken.status is RunStatus.ERROR, broken
    assert broken.error == "the parent could not run this sub-agent: RuntimeError: the parent broke"
    assert steady is not None and steady.status is RunStatus.COMPLETED, steady
    assert steady.text == "answer to: hold"


class _ScriptedInput:
    """The chat's terminal input: lines (or an exception) the test hands over one at a time."""

    def __init__(self) -> None:
        self.lines: asyncio.Queue[str | BaseException] = asyncio.Queue()

    def __enter__(self) -> _ScriptedInput:
        return self

    def __exit__(self, *exc_info: object) -> None:
        pass

    async def read(self) -> str:
        item = await self.lines.get()
        if isinstance(item, BaseException):
            raise item
        return item


def sleep_in_bash(messages: list[Any], tools: list[Any]) -> Any:
    """A sub-agent whose one tool call runs until it is cancelled."""
    if not tool_results(messages):
        return reply("", tool_call("bash", command="sleep 600"))
    return "unreachable: the sleep is cancelled"


async def test_a_chat_whose_input_fails_during_a_turn_leaves_no_turn_pending_nor_a_child(
    spawned: SpawnRecorder, tmp_path: Path
) -> None:
    def main_fn(messages: list[Any], tools: list[Any]) -> Any:
        if not any(isinstance(m, ToolMessage) for m in messages):
            return reply("", tool_call("task", subagent_type="sleeper", prompt="hold"))
        return "the turn ended"

    orch = Orchestrator(
        model=FunctionModel(main_fn, name="function:main"),
        agents=[agent("sleeper", ["bash"])],
        models={"function:sleeper": FunctionModel(sleep_in_bash, name="function:sleeper")},
        settings=Settings(approval="allow", max_workers=1, warm_spares=0),
        load_agent_files=False,
        record=False,
        workdir=tmp_path,
    )
    pids: list[int] = []
    sleeping = asyncio.Event()

    def watch(event: Any) -> None:
        if isinstance(event, SubAgentProcess):
            pids.append(event.pid)
        elif isinstance(event, AgentActivity) and isinstance(event.event, ToolStarted):
            sleeping.set() if event.event.name == "bash" else None  # the main agent's is `task`

    orch.bus.subscribe(watch)
    console = Console(file=io.StringIO())
    view = ProgressView(console, live=False, show_main=False)
    chat = Chat(orch, console, view, ChatRecord(tmp_path, "function:main"))
    typed = _ScriptedInput()
    async with orch:
        typed.lines.put_nowait("hold on")
        conversing = asyncio.create_task(_converse(chat, orch, typed, None))  # type: ignore[arg-type]
        await asyncio.wait_for(sleeping.wait(), GUARD_S)  # the turn's sub-agent is in bash
        typed.lines.put_nowait(OSError("the terminal went away"))
        with pytest.raises(OSError, match="the terminal went away"):
            await asyncio.wait_for(conversing, GUARD_S)
        # The session's end cancelled and awaited its turn: nothing of it is left
        # pending, and the turn's sub-agent process is gone with it.
        assert chat.turn is not None and chat.turn.done()
        assert not chat.turns.is_open
        assert len(pids) == 1 and not _proc.is_alive(pids[0])


async def test_a_pool_clean_up_that_fails_is_logged_not_lost(
    spawned: SpawnRecorder, caplog: pytest.LogCaptureFixture
) -> None:
    async def broken_clean_up() -> None:
        raise OSError("the clean-up broke")

    with caplog.at_level(logging.ERROR):
        async with WorkerPool(max_workers=1, warm=0) as pool:
            pool._background(broken_clean_up())
    failures = [r for r in caplog.records if r.getMessage() == "the worker pool: a task failed"]
    assert len(failures) == 1 and "the clean-up broke" in str(failures[0].exc_info)


async def test_a_hook_whose_start_fails_is_reported_and_the_run_goes_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A command the OS refuses to start (a NUL byte, from JSON's \\u0000) is a start
    failure like a missing shell: logged, and the call is not held or failed by it."""
    hooks = HookRunner(
        [
            HookCommand(event="PreToolUse", command="echo a\x00b", origin="the test"),
            HookCommand(event="PreToolUse", command="echo ok"),
        ],
        cwd=str(tmp_path),
    )
    with caplog.at_level(logging.WARNING):
        outcome = await asyncio.wait_for(
            hooks.run("PreToolUse", {"tool_name": "Bash", "tool_input": {}}, "Bash"), GUARD_S
        )
    assert not outcome.blocked
    (line,) = [r.getMessage() for r in caplog.records if "could not start" in r.getMessage()]
    assert line.startswith("PreToolUse hook 'echo a\\x00b' (the test) could not start: ")
    assert "null byte" in line and line.endswith("; the run goes on")


async def test_the_nursery_counts_only_members_still_running() -> None:
    go_on = asyncio.Event()
    async with TaskNursery("test") as nursery:
        nursery.start(go_on.wait())
        done = nursery.start(asyncio.sleep(0))
        assert len(nursery) == 2
        await done
        assert len(nursery) == 1  # a long-lived owner's table stays flat
        go_on.set()
    assert len(nursery) == 0 and nursery
