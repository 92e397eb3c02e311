"""Sub-agent processes start while the main model is still streaming its ``task`` calls.

The chain: a provider names each tool call before its arguments (``ToolCallStart``) →
the engine hands it to its ``StreamWatcher`` → ``StartAhead`` counts the task calls →
``WorkerPool.expect`` starts that many processes (within ``max_workers``) → whatever no
call took is retired down to ``warm`` and reaped. Real children throughout; streams
are held by the model server on an event, never timed.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pytest
from agentcell.orchestrator import AgentDefinition, Orchestrator, Settings
from agentcell.orchestrator.backends._forkserver import WorkerPool
from agentcell.orchestrator.config._settings import Budgets
from agentcell.orchestrator.task_tools._start_ahead import StartAhead
from agentcell.protocol import RunStatus, UserMessage
from agentcell.worker.engine._loop import Attachments, Engine
from agentcell.worker.models._anthropic import AnthropicModel
from agentcell.worker.models._base import (
    Model,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallStart,
    complete,
)
from agentcell.worker.models._http_options import HttpOptions
from agentcell.worker.models._openai import OpenAIChatModel
from conftest import SpawnRecorder
from model_servers import Call, ModelServer, Reply, events_through_last_tool_name

from agentcell.testing import FunctionModel, ScriptedModel, reply, tool_call

STEP_TIMEOUT_S = 30.0
WORKER_PROMPT = "You are a worker."


async def until(condition: Callable[[], bool], what: str) -> None:
    """Wait for observable state (the pool's counts, the server's threads), never a time."""
    try:
        async with asyncio.timeout(STEP_TIMEOUT_S):
            while not condition():  # noqa: ASYNC110 - state moved by other threads and processes
                await asyncio.sleep(0.005)
    except TimeoutError:
        raise AssertionError(f"timed out waiting for {what}") from None


def task_calls(n: int) -> list[Call]:
    return [
        Call("task", {"subagent_type": "worker", "prompt": f"job {i}", "description": f"j{i}"})
        for i in range(n)
    ]


def held_fan_out(n: int, release: threading.Event) -> Reply:
    """``n`` task calls, the stream held (until ``release``) once every call is named."""
    fan_out = Reply(tool_calls=task_calls(n), chunk_size=4)
    fan_out.pause_after = events_through_last_tool_name(fan_out, "openai")
    fan_out.release = release
    return fan_out


class Script:
    """The model server's answers: the main agent fans out once (``first``), then answers;
    each worker answers with its prompt."""

    def __init__(self, first: Reply) -> None:
        self.first = first
        self.main_calls = 0

    def __call__(self, body: dict[str, Any], api: str) -> Reply | str:
        messages = body["messages"]
        if messages[0]["role"] == "system" and WORKER_PROMPT in messages[0]["content"]:
            return f"done: {messages[-1]['content']}"
        self.main_calls += 1
        return self.first if self.main_calls == 1 else "all done"


def orchestrator(tmp_path: Path, server: ModelServer, **settings: Any) -> Orchestrator:
    worker = AgentDefinition(
        name="worker",
        description="answers once",
        system_prompt=WORKER_PROMPT,
        tools=[],
        model="inherit",
        source="test",
    )
    options = {"base_url": server.openai_base_url, "max_retries": 0}
    return Orchestrator(
        settings=Settings(
            model="openai:gpt-test",
            approval="allow",
            model_options={"openai": options},
            **settings,
        ),
        workdir=tmp_path,
        agents=[worker],
        load_agent_files=False,
        record=False,
    )


def peak_live(pool: WorkerPool) -> list[int]:
    """Records ``pool.live`` after every start the pool begins (its peak is the max)."""
    seen = [pool.live]
    spawn = pool.spawner._spawn

    def counting_spawn() -> None:
        spawn()
        seen.append(pool.live)

    pool.spawner._spawn = counting_spawn  # type: ignore[method-assign]
    return seen


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


# -- the stream item ---------------------------------------------------------------------


@pytest.mark.parametrize("api", ["openai", "anthropic"])
async def test_providers_name_each_tool_call_before_its_arguments_are_complete(
    model_server: ModelServer, api: str
) -> None:
    release = threading.Event()
    calls = [Call("read_file", {"path": "a" * 40}), Call("task", {"prompt": "b" * 40})]
    held = Reply(text="Both.", tool_calls=calls, chunk_size=4)
    held.pause_after = events_through_last_tool_name(held, api)
    held.release = release
    model_server.add(held)
    model: Model
    if api == "openai":
        model = OpenAIChatModel("gpt-test", http=HttpOptions(base_url=model_server.openai_base_url))
    else:
        http = HttpOptions(base_url=model_server.url, api_key="sk-ant-test")
        model = AnthropicModel("claude-test", http=http)
    request = ModelRequest(messages=[UserMessage(content="go")])
    stream = model.stream(request)
    seen: list[Any] = []
    try:
        async with asyncio.timeout(STEP_TIMEOUT_S):
            while sum(isinstance(item, ToolCallStart) for item in seen) < 2:
                seen.append(await anext(stream))
        # Both named while the server still holds the last call's arguments.
        assert not release.is_set()
        starts = [item for item in seen if isinstance(item, ToolCallStart)]
        assert [s.name for s in starts] == ["read_file", "task"]
        assert len({s.index for s in starts}) == 2
        assert not any(isinstance(item, ModelResponse) for item in seen)
        release.set()
        rest = [item async for item in stream]
    finally:
        release.set()
        await model.aclose()
    response = rest[-1]
    assert isinstance(response, ModelResponse)
    assert [c.name for c in response.tool_calls] == ["read_file", "task"]
    assert json.loads(response.tool_calls[1].arguments) == {"prompt": "b" * 40}
    assert not any(isinstance(item, ToolCallStart) for item in rest)  # each named once
    assert "".join(i.text for i in seen + rest if isinstance(i, TextPart)) == "Both."


async def test_test_doubles_name_their_tool_calls_like_a_provider() -> None:
    answer = reply("Two.", tool_call("task", prompt="a"), tool_call("read_file", path="b"))
    model = FunctionModel(lambda messages, tools: answer)
    request = ModelRequest(messages=[UserMessage(content="go")])
    items = [item async for item in model.stream(request)]
    starts = [item for item in items if isinstance(item, ToolCallStart)]
    assert starts == [ToolCallStart(index=0, name="task"), ToolCallStart(index=1, name="read_file")]
    assert isinstance(items[-1], ModelResponse)
    assert items.index(starts[-1]) < len(items) - 1  # before the response
    assert (await complete(model, request)).tool_calls == answer.tool_calls  # ignored there


# -- the engine's watcher ----------------------------------------------------------------


class Recorder:
    def __init__(self) -> None:
        self.log: list[str] = []

    def tool_call_started(self, start: ToolCallStart) -> None:
        self.log.append(f"start {start.index} {start.name}")

    def model_call_ended(self) -> None:
        self.log.append("end")


async def test_the_engine_shows_its_watcher_each_call_and_every_end() -> None:
    watcher = Recorder()
    model = ScriptedModel([reply("", tool_call("nothing_here")), "done"])
    result = await Engine(model, attached=Attachments(stream_watcher=watcher)).run("go")
    assert result.status is RunStatus.COMPLETED
    assert watcher.log == ["start 0 nothing_here", "end", "end"]


async def test_the_watcher_hears_the_end_of_a_failed_or_cancelled_model_call() -> None:
    failed = Recorder()
    model = ScriptedModel([RuntimeError("boom")])
    result = await Engine(model, attached=Attachments(stream_watcher=failed)).run("go")
    assert result.status is RunStatus.ERROR
    assert failed.log == ["end"]

    entered = asyncio.Event()

    async def never(messages: Any, tools: Any) -> str:
        entered.set()
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    cancelled = Recorder()
    engine = Engine(FunctionModel(never), attached=Attachments(stream_watcher=cancelled))
    running = asyncio.ensure_future(engine.run("go"))
    await entered.wait()
    engine.cancel()
    assert (await running).status is RunStatus.CANCELLED
    assert cancelled.log == ["end"]


# -- StartAhead's counting ---------------------------------------------------------------


class FakeBackend:
    def __init__(self) -> None:
        self.expected = 0

    async def acquire(self) -> Any:
        raise AssertionError("not used")

    def expect(self, n: int) -> None:
        self.expected += n

    async def close(self) -> None:
        return None


def test_start_ahead_counts_each_task_call_once_within_the_budget() -> None:
    backend = FakeBackend()
    left = [2]
    watcher = StartAhead(backend, room=lambda: left[0])
    watcher.tool_call_started(ToolCallStart(index=0, name="task"))
    watcher.tool_call_started(ToolCallStart(index=0, name="task"))  # a retry names it again
    watcher.tool_call_started(ToolCallStart(index=1, name="read_file"))  # not a sub-agent
    assert backend.expected == 1
    for index in (2, 3, 4):  # the budget allows two sub-agents in all
        watcher.tool_call_started(ToolCallStart(index=index, name="task"))
    assert backend.expected == 2
    watcher.model_call_ended()
    assert backend.expected == 0
    watcher.tool_call_started(ToolCallStart(index=0, name="task"))  # the next call's own
    assert backend.expected == 1
    watcher.model_call_ended()
    watcher.model_call_ended()
    assert backend.expected == 0


# -- the pool ----------------------------------------------------------------------------


async def test_the_pool_starts_what_is_expected_within_max_workers_and_retires_the_rest(
    spawned: SpawnRecorder,
) -> None:
    async with WorkerPool(max_workers=3, warm=1, heartbeat_timeout=30) as pool:
        pool.surplus_idle_s = 0.0
        await pool.warmed()
        seen = peak_live(pool)
        pool.expect(9)  # three times max_workers
        await until(lambda: pool.idle == 3, "three ready processes")
        assert max(seen) == 3 and pool.live == 3
        lease = await pool.acquire()  # an expected run takes one that is ready
        ready = set(pool.pids())
        assert lease.pid in ready and pool.live == 3
        pool.expect(-9)
        # One runs; beyond it only warm (1) spare may stay.
        await until(lambda: pool.live == 2, "the surplus spare to be retired")
        retired = ready - set(pool.pids())
        assert len(retired) == 1 and all(gone(pid) for pid in retired)
        await lease.release()
    assert max(seen) <= 3


# -- through the orchestrator ------------------------------------------------------------


async def test_task_calls_start_processes_while_the_model_is_still_streaming(
    spawned: SpawnRecorder, model_server: ModelServer, tmp_path: Path
) -> None:
    release = threading.Event()
    model_server.responder = Script(held_fan_out(4, release))
    try:
        async with orchestrator(tmp_path, model_server, max_workers=8, warm_spares=0) as orch:
            assert orch.pool.live == 0
            running = asyncio.ensure_future(orch.run("fan out"))
            # Every call named, none complete: the response has not arrived.
            await until(lambda: orch.pool.idle == 4, "four processes started and ready")
            assert not release.is_set() and len(model_server.requests) == 1
            release.set()
            report = await running
            assert orch.pool.expected == 0
    finally:
        release.set()
    assert report.status is RunStatus.COMPLETED, report.error
    assert report.final_text == "all done"
    texts = sorted(result.text for result in report.subagents)
    assert texts == [f"done: job {i}" for i in range(4)]
    assert all(result.ok for result in report.subagents)


@pytest.mark.parametrize("start_ahead", [True, False])
async def test_start_ahead_is_a_setting(
    spawned: SpawnRecorder, model_server: ModelServer, tmp_path: Path, start_ahead: bool
) -> None:
    """``start_ahead = false`` turns it off: the pool hears no expectation at all, and the
    fan-out still runs (each process started when its call is dispatched)."""
    model_server.responder = Script(Reply(tool_calls=task_calls(3), chunk_size=4))
    heard: list[int] = []
    async with orchestrator(
        tmp_path, model_server, max_workers=8, warm_spares=0, start_ahead=start_ahead
    ) as orch:
        expect = orch.pool.expect

        def spy(n: int) -> None:
            heard.append(n)
            expect(n)

        orch.pool.expect = spy  # type: ignore[method-assign]
        report = await orch.run("fan out")
    assert report.status is RunStatus.COMPLETED, report.error
    assert sorted(r.text for r in report.subagents) == [f"done: job {i}" for i in range(3)]
    assert heard == ([1, 1, 1, -3] if start_ahead else [])


async def test_three_times_max_workers_task_calls_never_start_more_than_max_workers(
    spawned: SpawnRecorder, model_server: ModelServer, tmp_path: Path
) -> None:
    release = threading.Event()
    model_server.responder = Script(held_fan_out(6, release))
    try:
        async with orchestrator(tmp_path, model_server, max_workers=2, warm_spares=0) as orch:
            seen = peak_live(orch.pool)
            running = asyncio.ensure_future(orch.run("fan out"))
            await until(lambda: orch.pool.idle == 2, "max_workers processes ready")
            assert orch.pool.live == 2 and not release.is_set()
            release.set()
            report = await running
    finally:
        release.set()
    assert max(seen) <= 2
    assert report.status is RunStatus.COMPLETED, report.error
    assert sorted(r.text for r in report.subagents) == [f"done: job {i}" for i in range(6)]


async def test_starts_for_a_stream_that_fails_are_retired_and_reaped(
    spawned: SpawnRecorder, model_server: ModelServer, tmp_path: Path
) -> None:
    broken = Reply(tool_calls=task_calls(3), chunk_size=4)
    broken.drop_after = events_through_last_tool_name(broken, "openai")  # named, then cut
    model_server.responder = Script(broken)
    async with orchestrator(tmp_path, model_server, max_workers=6, warm_spares=1) as orch:
        orch.pool.surplus_idle_s = 0.0
        await orch.pool.warmed()
        seen = peak_live(orch.pool)
        report = await orch.run("fan out")
        assert report.status is RunStatus.ERROR
        assert max(seen) == 4  # the spare and three started ahead
        await until(lambda: orch.pool.live == 1, "the pool back to its one warm spare")
        await until(lambda: orch.pool.idle == 1, "that spare ready")
        kept = set(orch.pool.pids())
        started = spawned.pids - kept
        assert len(started) == 3 and all(gone(pid) for pid in started)
        assert report.subagents == []


async def test_starts_for_task_calls_refused_by_policy_are_retired(
    spawned: SpawnRecorder, model_server: ModelServer, tmp_path: Path
) -> None:
    model_server.responder = Script(Reply(tool_calls=task_calls(3)))
    async with orchestrator(
        tmp_path, model_server, max_workers=6, warm_spares=0, deny_rules=["task"]
    ) as orch:
        orch.pool.surplus_idle_s = 0.0
        seen = peak_live(orch.pool)
        report = await orch.run("fan out")
        assert report.status is RunStatus.COMPLETED, report.error
        assert report.subagents == []  # every call was refused
        assert max(seen) == 3
        await until(lambda: orch.pool.live == 0, "every process started ahead retired")
        assert spawned.pids and all(gone(pid) for pid in spawned.pids)


async def test_the_subagent_budget_caps_what_starts_ahead(
    spawned: SpawnRecorder, model_server: ModelServer, tmp_path: Path
) -> None:
    model_server.responder = Script(Reply(tool_calls=task_calls(4)))
    async with orchestrator(
        tmp_path,
        model_server,
        max_workers=8,
        warm_spares=0,
        budgets=Budgets(max_subagents=1),
    ) as orch:
        seen = peak_live(orch.pool)
        report = await orch.run("fan out")
    statuses = sorted(r.status.value for r in report.subagents)
    assert statuses == ["budget", "budget", "budget", "completed"], report.subagents
    assert max(seen) == 1  # one started ahead (and taken), none for the refused three
