"""Background sub-agents over the real runner and real child processes, as a state machine.

Each example builds an ``Orchestrator`` (a pool of 2 processes, so that tasks also queue
for one) on its own event loop and drives the main agent's coordination tools directly:
``task`` (background), ``task_control`` (cancel, steer), ``task_wait`` and the tracker's
``drain`` (the turn hook's way of delivering). Every child blocks at its own gate (a TCP
server keyed by the child's prompt) until the test lets it finish, so each step ends in
a known state — each task at its gate, queued for a process, or ended: no sleeps, no
races. Teardown does what the end of a main-agent run does (cancel the rest, wait).

Invariants: each task ends in exactly one terminal state, and keeps it; each result is
delivered exactly once (by ``drain`` or ``task_wait``); a cancelled task ends as
cancelled, whether it had a process or was still queued; a finished task's answer
includes every steering text it acknowledged; live processes never exceed the pool's
bound; and no process outlives the example (checked in teardown, as the ``spawned``
fixture does).

Below the machine: plain regression tests for what it found.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import os
import re
import select
import signal
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
from agentcell.orchestrator import (
    AgentActivity,
    AgentDefinition,
    Orchestrator,
    Settings,
    SubAgentProcess,
    SubAgentResult,
    SubAgentStarted,
)
from agentcell.orchestrator.backends import _forkserver as _pool
from agentcell.orchestrator.delegation._task_args import TaskArgs
from agentcell.orchestrator.task_tools._tools import (
    TaskControlArgs,
    TaskControlTool,
    TaskTool,
    TaskWaitArgs,
    TaskWaitTool,
)
from agentcell.orchestrator.task_tools._tracker import TaskState
from agentcell.protocol import Message, Notice, RunStatus, ToolMessage, UserMessage
from agentcell.worker.models import ToolSpec
from agentcell.worker.models._base import ModelResponse
from agentcell.worker.tools import ToolContext, ToolOutput, function_tool
from agentcell.worker.tools._base import FunctionTool
from conftest import SpawnRecorder
from hypothesis import Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from agentcell.testing import FunctionModel, reply, tool_call

T = TypeVar("T")

MAX_WORKERS = 2  # small, so that sequences reach a full pool and a queue of tasks
MAX_TASKS = 7  # per example: keeps each example a few seconds
MAX_QUEUED = 2  # tasks waiting for a process at once (the pool is full)
STEP_TIMEOUT_S = 60.0  # a bound on every wait, never a synchronisation
CONTEXT = ToolContext(workdir=Path("."))


# -- what runs in the children ---------------------------------------------------------
def child_parts(port: int) -> tuple[FunctionModel, FunctionTool]:
    """The sub-agent's model and its gate tool.

    Both are closures, so dill ships them by value: a child never imports this module
    (nor hypothesis, nor pytest).
    """

    def gated(messages: list[Message], tools: list[ToolSpec]) -> ModelResponse | str:
        # First turn: wait at the gate named by the prompt. Then: report every user
        # message seen (the prompt, then each steering text), in order.
        users = [m.content for m in messages if isinstance(m, UserMessage)]
        if not any(isinstance(m, ToolMessage) for m in messages):
            return reply("", tool_call("wait_at_gate", key=users[0]))
        return " | ".join(users)

    def wait_at_gate(key: str) -> str:
        """Wait until the test opens the gate named ``key``."""
        with socket.create_connection(("127.0.0.1", port), timeout=STEP_TIMEOUT_S) as conn:
            conn.sendall(key.encode() + b"\n")
            return conn.recv(16).decode().strip()

    model = FunctionModel(gated, name="function:gated")
    tool: FunctionTool = function_tool(wait_at_gate, name="wait_at_gate", read_only=True)
    return model, tool


class KeyedGates:
    """A TCP server on 127.0.0.1: a connection sends a key, then waits until the test
    opens that key's gate. ``arrived(key)`` says whether a child is waiting there."""

    def __init__(self, on_change: Callable[[], None]) -> None:
        self._on_change = on_change
        self._arrived: set[str] = set()
        self._open: dict[str, asyncio.Event] = collections.defaultdict(asyncio.Event)
        self._handlers: set[asyncio.Task[Any]] = set()
        self._server: asyncio.Server | None = None
        self.port = 0

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        try:
            key = (await reader.readline()).decode().strip()
            self._arrived.add(key)
            self._on_change()
            await self._open[key].wait()
            writer.write(b"go\n")
            await writer.drain()
        except ConnectionError:
            pass  # the child was cancelled or killed while it waited
        finally:
            writer.close()
            self._handlers.discard(task)

    def arrived(self, key: str) -> bool:
        return key in self._arrived

    def open(self, key: str) -> None:
        self._open[key].set()

    async def close(self) -> None:
        for event in self._open.values():
            event.set()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        if self._handlers:
            await asyncio.wait(list(self._handlers), timeout=STEP_TIMEOUT_S)


# -- the harness: an orchestrator, its gates, and the main agent's coordination tools ----
class Harness:
    """An ``Orchestrator`` whose ``gated`` sub-agents wait at their gates, with the main
    agent's ``task`` and ``task_control`` tools (built as ``Orchestrator.run`` builds them)
    and what the test can observe: processes given out, steering acknowledged, tasks
    ended. ``changed`` is set on each of those and on every gate arrival."""

    def __init__(self, orch: Orchestrator, gates: KeyedGates, changed: asyncio.Event) -> None:
        self.orch = orch
        self.tracker = orch.tracker
        self.gates = gates
        self.changed = changed
        self.started: dict[str, str] = {}  # task id -> agent id, from SubAgentStarted
        self.processes: dict[str, int] = {}  # agent id -> pid, from SubAgentProcess
        self.acks: collections.Counter[str] = collections.Counter()  # steering acks per agent
        self.task_tool = TaskTool(
            registry=orch.registry,
            runner=orch.runner,
            tracker=orch.tracker,
            scope=orch._direct.scope,
            nursery=orch.background.nursery,
        )
        self.wait_tool = TaskWaitTool(orch.tracker)
        self.control_tool = TaskControlTool(orch.tracker)
        orch.bus.subscribe(self._watch)
        # A task's end is recorded a step after its SubAgentEnded: wake on both.
        finish = orch.tracker.finish

        def finish_and_tell(task_id: str, result: SubAgentResult) -> bool:
            try:
                return finish(task_id, result)
            finally:
                changed.set()

        orch.tracker.finish = finish_and_tell  # type: ignore[method-assign]

    def _watch(self, event: Any) -> None:
        if isinstance(event, SubAgentStarted):
            self.started[event.task_id] = event.agent_id
        elif isinstance(event, SubAgentProcess):
            self.processes[event.agent_id] = event.pid
        elif (
            isinstance(event, AgentActivity)
            and isinstance(event.event, Notice)
            and event.event.message.startswith("steering message received")
        ):
            self.acks[event.agent_id] += 1
        self.changed.set()

    async def start(self, key: str) -> str:
        """``task`` with background=True; returns the task id once its run has begun
        (SubAgentStarted is published right before the run asks the pool for a process)."""
        output = await self.task_tool.execute(
            TaskArgs(subagent_type="gated", prompt=key, description=key, background=True),
            CONTEXT,
        )
        assert isinstance(output, ToolOutput) and not output.is_error, output
        match = re.search(r"task (a\d+) started in the background", output.content)
        assert match, output.content
        return match.group(1)

    async def control(self, task_id: str, action: str, text: str = "") -> ToolOutput:
        output = await self.control_tool.execute(
            TaskControlArgs(task_id=task_id, action=action, text=text),  # type: ignore[arg-type]
            CONTEXT,
        )
        assert isinstance(output, ToolOutput)
        return output

    async def until(self, condition: Callable[[], bool]) -> None:
        """Wait for observable state (bus events, gate arrivals) — never for time."""
        async with asyncio.timeout(STEP_TIMEOUT_S):
            while not condition():
                self.changed.clear()
                await self.changed.wait()


@contextlib.asynccontextmanager
async def gated_orchestrator(max_workers: int, warm: int) -> AsyncIterator[Harness]:
    """A ``Harness``; on the way out every background run is cancelled and awaited, the
    orchestrator (its pool, its processes) is closed, and the gates are released."""
    changed = asyncio.Event()
    gates = KeyedGates(changed.set)
    await gates.start()
    try:
        model, tool = child_parts(gates.port)
        orch = Orchestrator(
            model=FunctionModel(lambda m, t: "unused", name="function:main"),
            agents=[
                AgentDefinition(
                    name="gated",
                    description="waits at its gate",
                    system_prompt="You wait.",
                    tools=["wait_at_gate"],
                    model="function:gated",
                    source="test",
                )
            ],
            models={"function:gated": model},
            tools=[tool],
            settings=Settings(approval="allow", max_workers=max_workers, warm_spares=warm),
            load_agent_files=False,
            record=False,
        )
        async with orch:
            harness = Harness(orch, gates, changed)
            try:
                yield harness
            finally:
                await harness.task_tool.shutdown()
    finally:
        await gates.close()


# -- the model kept by the test ---------------------------------------------------------
QUEUED = "queued"  # started, waiting for a free process (the pool is full)
AT_GATE = "at gate"  # its child is blocked at its gate


@dataclasses.dataclass
class Expected:
    key: str  # the prompt, which is also the gate's key
    agent_id: str
    phase: str  # QUEUED or AT_GATE while it runs
    expect: TaskState = TaskState.RUNNING  # what it must end as (RUNNING: not decided yet)
    steers: list[str] = dataclasses.field(default_factory=list)
    result: SubAgentResult | None = None  # the first terminal result seen
    delivered: int = 0


class RunnerMachine(RuleBasedStateMachine):
    """One orchestrator per example, on its own event loop; every rule ends with each
    task either at its gate, queued for a process, or ended."""

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.recorder = SpawnRecorder()
        self._original_init = _pool._Worker.__init__
        self._patch_worker_init()
        self.stack = contextlib.AsyncExitStack()
        self.model: dict[str, Expected] = {}
        try:
            self.h = self.run(self.stack.enter_async_context(gated_orchestrator(MAX_WORKERS, 1)))
        except BaseException:
            self._cleanup()
            raise

    def _patch_worker_init(self) -> None:
        """Record every child pid and the fork server: what the ``spawned`` fixture does
        (a state machine takes no fixtures)."""
        recorder, original = self.recorder, self._original_init

        def recording_init(worker: _pool._Worker, *args: Any, **kwargs: Any) -> None:
            original(worker, *args, **kwargs)
            recorder.add(worker.pid)
            fs = worker.forkserver
            if fs is not None:
                recorder.forkservers.add(fs)

        _pool._Worker.__init__ = recording_init  # type: ignore[method-assign,assignment]

    def run(self, coro: Awaitable[T]) -> T:
        async def bounded() -> T:
            async with asyncio.timeout(STEP_TIMEOUT_S):
                return await coro

        return self.loop.run_until_complete(bounded())

    # -- teardown: everything ends, everything is delivered once, nothing survives ----------
    def teardown(self) -> None:
        try:
            # What the end of a main-agent run does: cancel the rest, wait for each.
            queued = set(self.running_ids(QUEUED))
            for expected in self.model.values():
                if expected.expect is TaskState.RUNNING:
                    expected.expect = TaskState.CANCELLED
            self.run(self.h.task_tool.shutdown())
            for task_id in queued:  # whether it got a process first is a race of the pool's
                self._ended_in_the_queue(task_id)
            self.observe()
            self.drain()
            for task_id, expected in self.model.items():
                assert expected.delivered == 1, f"{task_id} delivered {expected.delivered}x"
        finally:
            self._cleanup()

    def _ended_in_the_queue(self, task_id: str) -> None:
        """A task still queued when the run ends: "never got a process" (an error, issue
        27) if it was cancelled in the queue; cancelled if a freed process reached it first."""
        record = self.h.tracker.get(task_id)
        assert record is not None and record.result is not None
        if record.result.no_process:
            assert record.result.error.startswith("never got a process: "), record.result
            self.model[task_id].expect = TaskState.FAILED

    def _cleanup(self) -> None:
        try:
            self.run(self.stack.aclose())  # closes the orchestrator, then the gates
            leftovers = self.recorder.leftovers()
            assert not leftovers, leftovers
        finally:
            self.recorder.kill_all()
            _pool._Worker.__init__ = self._original_init  # type: ignore[method-assign]
            self.loop.close()

    # -- helpers ---------------------------------------------------------------------------
    def running_ids(self, phase: str | None = None) -> list[str]:
        return [
            t
            for t, e in self.model.items()
            if e.expect is TaskState.RUNNING and (phase is None or e.phase == phase)
        ]

    def observe(self) -> None:
        """Note first terminal results; a terminal state, once seen, never changes."""
        for task_id, expected in self.model.items():
            record = self.h.tracker.get(task_id)
            assert record is not None
            if record.state.terminal:
                assert record.result is not None
                if expected.result is None:
                    expected.result = record.result
                assert record.result is expected.result, f"{task_id}'s result was replaced"
                assert record.state is expected.expect, (
                    f"{task_id} ended {record.state.value}, expected {expected.expect.value}: "
                    f"{record.result.error}"
                )
            else:
                assert expected.result is None, f"{task_id} went back to running"

    def count_delivered(self, task_ids: list[str]) -> None:
        for task_id in task_ids:
            expected = self.model[task_id]
            assert expected.result is not None, f"{task_id} delivered before it ended"
            expected.delivered += 1
            assert expected.delivered == 1, f"{task_id} delivered twice"

    def reach_gate(self, task_id: str) -> None:
        """Wait until the task's child is at its gate and has acknowledged every steering
        text (or the task ended: observe() then says whether that was expected)."""
        expected = self.model[task_id]
        record = self.h.tracker.get(task_id)
        assert record is not None
        self.run(
            self.h.until(
                lambda: (
                    record.state.terminal
                    or (
                        self.h.gates.arrived(expected.key)
                        and self.h.acks[expected.agent_id] >= len(expected.steers)
                    )
                )
            )
        )
        self.observe()
        expected.phase = AT_GATE

    def promote_queued(self) -> None:
        """A process was freed: the oldest queued task (the pool is FIFO) gets it."""
        queued = self.running_ids(QUEUED)
        if queued:
            self.reach_gate(queued[0])

    # -- rules -----------------------------------------------------------------------------
    @initialize()
    def first_task(self) -> None:
        self.start()

    @precondition(
        lambda self: len(self.model) < MAX_TASKS and len(self.running_ids(QUEUED)) < MAX_QUEUED
    )
    @rule()
    def start(self) -> None:
        """``task`` with background=True: an id at once; the child then reaches its gate,
        or, with every process busy, the task waits in the pool's queue."""
        key = f"job {len(self.model) + 1}"
        task_id = self.run(self.h.start(key))
        self.run(self.h.until(lambda: task_id in self.h.started))
        record = self.h.tracker.get(task_id)
        assert record is not None and record.state is TaskState.RUNNING
        assert record.agent_id == self.h.started[task_id]
        full = len(self.running_ids(AT_GATE)) >= MAX_WORKERS
        self.model[task_id] = Expected(key=key, agent_id=record.agent_id, phase=QUEUED)
        if full:
            assert self.h.orch.pool.waiting == len(self.running_ids(QUEUED))
        else:
            self.reach_gate(task_id)

    @precondition(
        lambda self: (
            not self.running_ids(QUEUED)
            and len(self.model) + MAX_WORKERS - len(self.running_ids(AT_GATE)) < MAX_TASKS
        )
    )
    @rule()
    def fill_the_pool(self) -> None:
        """Start tasks until every process is busy and one task waits in the queue."""
        while not self.running_ids(QUEUED):
            self.start()

    @precondition(lambda self: bool(self.running_ids(AT_GATE)))
    @rule(data=st.data())
    def finish(self, data: st.DataObject) -> None:
        """Open one child's gate: it answers, and its task ends as completed."""
        task_id = data.draw(st.sampled_from(self.running_ids(AT_GATE)))
        expected = self.model[task_id]
        expected.expect = TaskState.COMPLETED
        self.h.gates.open(expected.key)
        assert self.run(self.h.tracker.wait([task_id], None))
        self.observe()
        assert expected.result is not None
        assert expected.result.status is RunStatus.COMPLETED, expected.result
        assert expected.result.text == " | ".join([expected.key, *expected.steers])
        self.promote_queued()

    @precondition(lambda self: bool(self.running_ids()))
    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        """``task_control cancel``, at its gate or still queued: it ends as cancelled."""
        task_id = data.draw(st.sampled_from(self.running_ids()))
        expected = self.model[task_id]
        output = self.run(self.h.control(task_id, "cancel"))
        assert not output.is_error, output.content
        expected.expect = TaskState.CANCELLED
        assert self.run(self.h.tracker.wait([task_id], None))
        self.observe()
        assert expected.result is not None
        assert expected.result.status is RunStatus.CANCELLED, expected.result
        if expected.phase == AT_GATE:
            assert expected.agent_id in self.h.processes
            self.promote_queued()
        else:
            assert expected.agent_id not in self.h.processes  # it never got one

    # Queued tasks too: what is steered while it waits for a process follows its Start
    # (test_steer_sent_while_a_task_waits_for_a_process_reaches_it).
    @precondition(lambda self: bool(self.running_ids()))
    @rule(data=st.data(), text=st.sampled_from(["check the tests", "be brief", "also docs"]))
    def steer(self, data: st.DataObject, text: str) -> None:
        """``task_control steer``: acknowledged by the child, part of its next turn."""
        task_id = data.draw(st.sampled_from(self.running_ids()))
        expected = self.model[task_id]
        output = self.run(self.h.control(task_id, "steer", text))
        assert not output.is_error, output.content
        expected.steers.append(text)
        if expected.phase == AT_GATE:
            self.reach_gate(task_id)  # i.e. until the child has acknowledged it
        # A queued task's steering is acknowledged once it gets a process (promote_queued).

    @precondition(lambda self: any(e.expect.terminal for e in self.model.values()))
    @rule(data=st.data(), action=st.sampled_from(["cancel", "steer"]))
    def control_after_end(self, data: st.DataObject, action: str) -> None:
        """A control for a task that has ended is refused and changes nothing."""
        ended = [t for t, e in self.model.items() if e.expect.terminal]
        task_id = data.draw(st.sampled_from(ended))
        output = self.run(self.h.control(task_id, action, "too late"))
        assert output.is_error and "has already ended" in output.content

    def drain(self) -> None:
        """The turn hook's delivery: every finished, undelivered result, once."""
        self.observe()
        drained = self.h.tracker.drain()
        expected = [t for t, e in self.model.items() if e.result is not None and not e.delivered]
        assert [r.task_id for r in drained] == expected
        self.count_delivered([r.task_id for r in drained])

    def task_wait_snapshot(self) -> None:
        """``task_wait`` with a zero timeout: finished results once, a snapshot of the rest."""
        self.observe()
        output = self.run(self.h.wait_tool.execute(TaskWaitArgs(timeout_s=0), CONTEXT))
        assert isinstance(output, ToolOutput) and not output.is_error
        fresh = [t for t, e in self.model.items() if e.result is not None and not e.delivered]
        self.count_delivered(fresh)
        for task_id in fresh:
            result = self.model[task_id].result
            assert result is not None
            assert result.render() in output.content
        assert ("still running after 0 s" in output.content) is bool(self.running_ids())
        assert not self.h.tracker.undelivered()

    @rule(via=st.sampled_from(["drain", "task_wait"]))
    def deliver(self, via: str) -> None:
        """Hand finished results out, by either of the two ways the main agent gets them."""
        if via == "drain":
            self.drain()
        else:
            self.task_wait_snapshot()

    # -- invariants ------------------------------------------------------------------------
    @invariant()
    def states_agree(self) -> None:
        self.observe()
        assert [r.task_id for r in self.h.tracker.running()] == self.running_ids()

    @invariant()
    def delivered_at_most_once(self) -> None:
        for task_id, expected in self.model.items():
            assert expected.delivered <= 1
            record = self.h.tracker.get(task_id)
            assert record is not None and record.delivered is (expected.delivered == 1)

    @invariant()
    def processes_bounded(self) -> None:
        assert self.h.orch.pool.live <= MAX_WORKERS


# A few sequences of a few steps: each step waits on real processes. No "explain" phase:
# it re-runs a failure under a tracer, which makes shipping objects into children (dill)
# crawl; the shrunk steps and the assertion say enough.
RunnerMachine.TestCase.settings = settings(
    max_examples=10,
    stateful_step_count=30,
    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink],
)
TestRunnerStateMachine = pytest.mark.slow(RunnerMachine.TestCase)


# -- regressions found by the machine above (plain tests, each with the ``spawned`` check) --


async def test_steer_sent_while_a_task_waits_for_a_process_reaches_it(
    spawned: SpawnRecorder,
) -> None:
    async with gated_orchestrator(max_workers=1, warm=1) as h:
        first = await h.start("first")
        await h.until(lambda: h.gates.arrived("first"))
        second = await h.start("second")  # the only process is busy: it waits in the queue
        await h.until(lambda: second in h.started)
        assert h.orch.pool.waiting == 1
        output = await h.control(second, "steer", "also this")
        assert not output.is_error, output.content
        h.gates.open("first")
        assert await h.tracker.wait([first], STEP_TIMEOUT_S)
        record = h.tracker.get(second)
        assert record is not None
        await h.until(lambda: record.state.terminal or h.gates.arrived("second"))
        assert not record.state.terminal, record.result  # today: crashed (exit code 2)
        await h.until(lambda: h.acks[record.agent_id] == 1)
        h.gates.open("second")
        assert await h.tracker.wait([second], STEP_TIMEOUT_S)
        assert record.result is not None and record.result.text == "second | also this"


async def test_cancel_sent_before_the_background_run_starts_is_not_lost(
    spawned: SpawnRecorder,
) -> None:
    async with gated_orchestrator(max_workers=2, warm=1) as h:
        # ``task`` returns before its background run has taken a step; a cancel in that
        # window (the end of a run, a budget exceeded) comes from the same loop turn.
        task_id = await h.start("early")
        record = h.tracker.get(task_id)
        assert record is not None and record.controls is not None
        record.controls.cancel()
        assert await h.tracker.wait([task_id], STEP_TIMEOUT_S), "the cancelled run went ahead"
        assert record.state is TaskState.CANCELLED, record.result
        assert not h.gates.arrived("early")
        assert record.agent_id not in h.processes  # it never got a process


async def test_a_child_lost_between_handshake_and_start_does_not_strand_its_task(
    spawned: SpawnRecorder,
) -> None:
    async with gated_orchestrator(max_workers=1, warm=0) as h:
        pool = h.orch.pool
        original = pool.spawner._on_ready
        victims: list[int] = []

        def on_ready_then_die(worker: _pool._Worker) -> None:
            # The race, made deterministic: the child is handed to the waiting run, and
            # its death is seen (its sentinel handled) before that run resumes — as when
            # its Hello and its sentinel arrive in the same turn of the loop.
            original(worker)
            if not victims:
                victims.append(worker.pid)
                os.kill(worker.pid, signal.SIGKILL)
                select.select([worker.process.sentinel], [], [], STEP_TIMEOUT_S)
                worker.on_sentinel()

        pool.spawner._on_ready = on_ready_then_die  # type: ignore[method-assign]
        task_id = await h.start("doomed")
        record = h.tracker.get(task_id)
        assert record is not None
        # The run either gets another process or ends with an error: never left running.
        await h.until(lambda: record.state.terminal or h.gates.arrived("doomed"))
        assert victims
        h.gates.open("doomed")
        assert await h.tracker.wait([task_id], STEP_TIMEOUT_S), "the task was left running"
        assert record.result is not None
        if record.state is TaskState.COMPLETED:
            assert record.result.pid != victims[0]  # it ran in another process
        else:
            assert record.state is TaskState.FAILED, record.result
