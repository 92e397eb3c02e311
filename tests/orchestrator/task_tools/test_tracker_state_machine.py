"""``TaskTracker`` as a state machine: random sequences of starts, finishes, controls,
drains and waits, checked step by step against a model kept here.

Pure and in-process (no child processes): the tracker and the coordination tools
(``task_wait``, ``task_control``) are driven directly, one event loop per example.

Invariants:
* every finished result is delivered exactly once over the whole run (``drain`` and
  ``task_wait`` are the two ways out; deliveries are counted per task id);
* a terminal state is never overwritten: the first ``finish`` wins, later ones return
  False and change nothing (state, result, end time);
* ``running()``, ``undelivered()`` and ``records()`` agree with the model;
* a task's controls are dropped when it ends, and nothing reaches them afterwards.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
from pathlib import Path

from agentcell.orchestrator import SubAgentResult
from agentcell.orchestrator.task_tools._tools import (
    TaskControlArgs,
    TaskControlTool,
    TaskWaitArgs,
    TaskWaitTool,
)
from agentcell.orchestrator.task_tools._tracker import TaskRecord, TaskState, TaskTracker
from agentcell.protocol import RunStatus
from agentcell.worker.tools import ToolContext, ToolOutput
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
)

CONTEXT = ToolContext(workdir=Path("."))

EXPECTED_STATE = {
    RunStatus.COMPLETED: TaskState.COMPLETED,
    RunStatus.CANCELLED: TaskState.CANCELLED,
}


def expected_state(status: RunStatus) -> TaskState:
    return EXPECTED_STATE.get(status, TaskState.FAILED)


class FakeControls:
    """Records every control call. With ``finish_on_cancel``, a cancel ends the task at
    once (re-entering the tracker from inside the call), as a run that was still waiting
    for a process might."""

    def __init__(self, machine: TrackerMachine, task_id: str, finish_on_cancel: bool) -> None:
        self.machine = machine
        self.task_id = task_id
        self.finish_on_cancel = finish_on_cancel
        self.calls: list[tuple[str, str]] = []

    def cancel(self, reason: str = "") -> None:
        self.calls.append(("cancel", ""))
        if self.finish_on_cancel:
            self.machine.finish_in_model(self.task_id, RunStatus.CANCELLED, expect_first=True)

    def pause(self) -> None:
        self.calls.append(("pause", ""))

    def resume(self) -> None:
        self.calls.append(("resume", ""))

    def steer(self, text: str) -> None:
        self.calls.append(("steer", text))


@dataclasses.dataclass
class ModelTask:
    agent_type: str
    description: str
    controls: FakeControls | None
    state: TaskState = TaskState.RUNNING
    result: SubAgentResult | None = None
    ended_at: float | None = None
    delivered: bool = False
    calls_at_end: int | None = None  # how many control calls had reached it when it ended


statuses = st.sampled_from(list(RunStatus))
texts = st.text(alphabet="abc xyz", min_size=0, max_size=8)


class TrackerMachine(RuleBasedStateMachine):
    tasks = Bundle("tasks")

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.tracker = TaskTracker()
        self.wait_tool = TaskWaitTool(self.tracker)
        self.control_tool = TaskControlTool(self.tracker)
        self.model: dict[str, ModelTask] = {}
        self.deliveries: collections.Counter[str] = collections.Counter()
        self.finishes = 0

    def teardown(self) -> None:
        try:
            # Whatever is still running ends now; one last drain must hand out exactly
            # the results not delivered yet, and then every task was delivered once.
            for task_id, task in self.model.items():
                if task.state is TaskState.RUNNING:
                    self.finish_in_model(task_id, RunStatus.CANCELLED, expect_first=True)
            self.drain()
            assert not self.tracker.running()
            assert not self.tracker.undelivered()
            for task_id in self.model:
                assert self.deliveries[task_id] == 1, (task_id, self.deliveries[task_id])
        finally:
            self.loop.close()

    # -- helpers ---------------------------------------------------------------------------
    def run(self, coro: object) -> object:
        return self.loop.run_until_complete(coro)  # type: ignore[arg-type]

    def finish_in_model(self, task_id: str, status: RunStatus, *, expect_first: bool) -> bool:
        """Finish ``task_id`` in the tracker and check the outcome against the model."""
        task = self.model[task_id]
        record = self.tracker.get(task_id)
        assert record is not None
        before = (record.state, record.result, record.ended_at, record.agent_id, record.delivered)
        self.finishes += 1
        result = SubAgentResult(
            agent_id=f"a{self.finishes}", agent_type=task.agent_type, status=status
        )
        first = task.state is TaskState.RUNNING
        if expect_first:
            assert first
        accepted = self.tracker.finish(task_id, result)
        assert accepted is first
        if first:
            task.state = expected_state(status)
            task.result = result
            task.ended_at = record.ended_at
            task.calls_at_end = len(task.controls.calls) if task.controls else None
            assert record.state is task.state
            assert record.result is result
            assert record.agent_id == result.agent_id
            assert record.ended_at is not None
            assert record.controls is None
            assert record.delivered is False
        else:
            after = (
                record.state,
                record.result,
                record.ended_at,
                record.agent_id,
                record.delivered,
            )
            assert after == before, "a terminal state was overwritten"
        return accepted

    def record_of(self, task_id: str) -> TaskRecord:
        record = self.tracker.get(task_id)
        assert record is not None
        return record

    def deliver(self, records: list[TaskRecord]) -> None:
        for record in records:
            task = self.model[record.task_id]
            assert task.state is not TaskState.RUNNING, "an unfinished task was delivered"
            assert not task.delivered, f"{record.task_id} delivered twice"
            task.delivered = True
            self.deliveries[record.task_id] += 1

    # -- rules -----------------------------------------------------------------------------
    @rule(
        target=tasks,
        agent_type=st.sampled_from(["Explore", "Plan", "worker"]),
        description=texts,
        with_controls=st.booleans(),
        finish_on_cancel=st.booleans(),
    )
    def start(
        self, agent_type: str, description: str, with_controls: bool, finish_on_cancel: bool
    ) -> str:
        task_id = f"t{len(self.model) + 1}"
        controls = FakeControls(self, task_id, finish_on_cancel) if with_controls else None
        record = self.tracker.start(agent_type, description, controls)
        assert record.task_id == task_id
        assert record.state is TaskState.RUNNING and not record.delivered
        assert record.controls is controls
        self.model[task_id] = ModelTask(agent_type, description, controls)
        return task_id

    @rule(task_id=tasks, status=statuses)
    def finish(self, task_id: str, status: RunStatus) -> None:
        self.finish_in_model(task_id, status, expect_first=False)

    @rule(task_id=tasks)
    def cancel_through_controls(self, task_id: str) -> None:
        """What shutdown and budget exhaustion do: cancel whoever still has controls."""
        record = self.record_of(task_id)
        task = self.model[task_id]
        if task.state is not TaskState.RUNNING:
            assert record.controls is None
            return
        assert record.controls is task.controls
        if record.controls is not None:
            record.controls.cancel()
            assert task.controls is not None and task.controls.calls[-1] == ("cancel", "")

    @rule(
        task_id=tasks,
        action=st.sampled_from(["cancel", "pause", "resume", "steer"]),
        text=texts,
    )
    def task_control(self, task_id: str, action: str, text: str) -> None:
        task = self.model[task_id]
        calls_before = len(task.controls.calls) if task.controls else 0
        reachable = task.state is TaskState.RUNNING and task.controls is not None
        output = self.run(
            self.control_tool.execute(
                TaskControlArgs(task_id=task_id, action=action, text=text),  # type: ignore[arg-type]
                CONTEXT,
            )
        )
        assert isinstance(output, ToolOutput)
        if not reachable:
            assert output.is_error and "already ended" in output.content
        elif action == "steer" and not text.strip():
            assert output.is_error and "steer needs a text" in output.content
        else:
            assert not output.is_error, output.content
            assert task.controls is not None
            assert task.controls.calls[calls_before] == (
                action,
                text if action == "steer" else "",
            )
        if task.controls is not None and task.calls_at_end is None:
            expected = calls_before + (0 if output.is_error else 1)
            assert len(task.controls.calls) == expected

    @rule(task_id=tasks, text=texts.filter(lambda t: t.strip() != ""))
    def steer(self, task_id: str, text: str) -> None:
        record = self.record_of(task_id)
        task = self.model[task_id]
        if record.controls is None:
            assert task.state is not TaskState.RUNNING or task.controls is None
            return
        record.controls.steer(text)
        assert task.controls is not None and task.controls.calls[-1] == ("steer", text)

    @rule()
    def drain(self) -> None:
        expected = [t for t, m in self.model.items() if m.state.terminal and not m.delivered]
        drained = self.tracker.drain()
        assert [r.task_id for r in drained] == expected
        self.deliver(drained)
        assert self.tracker.drain() == []  # a second drain right after hands out nothing

    @rule(data=st.data())
    def wait_zero(self, data: st.DataObject) -> None:
        ids = self.pick_ids(data)
        done = self.run(self.tracker.wait(ids, 0))
        listed = self.model if ids is None else [t for t in ids if t in self.model]
        assert done is all(self.model[t].state.terminal for t in listed)
        # Waiting delivers nothing.
        assert [r.task_id for r in self.tracker.undelivered()] == self.model_undelivered()

    @rule(data=st.data())
    def task_wait_zero(self, data: st.DataObject) -> None:
        ids = self.pick_ids(data, allow_unknown=False)
        output = self.run(self.wait_tool.execute(TaskWaitArgs(task_ids=ids, timeout_s=0), CONTEXT))
        assert isinstance(output, ToolOutput) and not output.is_error
        listed = list(self.model) if ids is None else list(dict.fromkeys(ids))
        expected = [t for t in listed if self.model[t].state.terminal]
        expected = [t for t in expected if not self.model[t].delivered]
        self.deliver([self.record_of(t) for t in expected])
        for task_id in expected:
            assert f"task {task_id} [" in output.content
        still = [t for t in listed if not self.model[t].state.terminal]
        assert ("still running after 0 s" in output.content) is bool(still)

    @precondition(lambda self: any(m.state is TaskState.RUNNING for m in self.model.values()))
    @rule(data=st.data(), status=statuses)
    def wait_wakes_on_finish(self, data: st.DataObject, status: RunStatus) -> None:
        """A waiter blocked on a running task wakes when (and only when) it ends."""
        running = [t for t, m in self.model.items() if m.state is TaskState.RUNNING]
        task_id = data.draw(st.sampled_from(running))

        async def scenario() -> None:
            waiter = asyncio.ensure_future(self.tracker.wait([task_id], None))
            await asyncio.sleep(0)  # let it block (one loop turn, not a timed wait)
            assert not waiter.done()
            self.finish_in_model(task_id, status, expect_first=True)
            async with asyncio.timeout(5):
                assert await waiter is True

        self.run(scenario())

    @rule(data=st.data())
    def records(self, data: st.DataObject) -> None:
        ids = self.pick_ids(data)
        records = self.tracker.records(ids)
        expected = list(self.model) if ids is None else [t for t in ids if t in self.model]
        assert [r.task_id for r in records] == expected
        for record in records:
            task = self.model[record.task_id]
            assert record.state is task.state
            assert record.agent_type == task.agent_type
            assert record.description == task.description
            assert record.result is task.result
            assert record.delivered is task.delivered
            assert f"task {record.task_id} [{task.state.value}]" in record.summary()

    def pick_ids(self, data: st.DataObject, *, allow_unknown: bool = True) -> list[str] | None:
        known = list(self.model)
        pool = [*known, "t999"] if allow_unknown else known
        if not pool:
            return None
        return data.draw(st.none() | st.lists(st.sampled_from(pool), max_size=4))

    def model_undelivered(self) -> list[str]:
        return [t for t, m in self.model.items() if m.state.terminal and not m.delivered]

    # -- invariants ------------------------------------------------------------------------
    @invariant()
    def running_matches_model(self) -> None:
        expected = [t for t, m in self.model.items() if m.state is TaskState.RUNNING]
        assert [r.task_id for r in self.tracker.running()] == expected

    @invariant()
    def undelivered_matches_model(self) -> None:
        assert [r.task_id for r in self.tracker.undelivered()] == self.model_undelivered()

    @invariant()
    def delivered_at_most_once(self) -> None:
        for task_id, task in self.model.items():
            assert self.deliveries[task_id] == (1 if task.delivered else 0)
            assert self.record_of(task_id).delivered is task.delivered

    @invariant()
    def terminal_states_are_kept(self) -> None:
        for task_id, task in self.model.items():
            record = self.record_of(task_id)
            assert record.state is task.state
            if task.state.terminal:
                assert record.result is task.result
                assert record.ended_at == task.ended_at

    @invariant()
    def controls_dropped_once_ended(self) -> None:
        for task_id, task in self.model.items():
            record = self.record_of(task_id)
            if task.state.terminal:
                assert record.controls is None
                if task.controls is not None:
                    # Nothing reached the controls after the task ended.
                    assert len(task.controls.calls) == task.calls_at_end
            else:
                assert record.controls is task.controls


# On top of the profile conftest loaded (derandomised in CI): enough sequences to reach
# deep interleavings, few enough to stay a few seconds.
TrackerMachine.TestCase.settings = settings(max_examples=200, stateful_step_count=40)
TestTrackerStateMachine = TrackerMachine.TestCase


async def test_task_wait_hands_out_only_what_fits_and_keeps_the_rest() -> None:
    from pathlib import Path

    from agentcell.orchestrator import SubAgentResult
    from agentcell.orchestrator.task_tools._tools import TaskWaitArgs, TaskWaitTool
    from agentcell.orchestrator.task_tools._tracker import TaskTracker
    from agentcell.protocol import RunStatus
    from agentcell.worker.tools import ToolContext

    tracker = TaskTracker()
    for i in range(20):
        record = tracker.start("Explore", f"job {i}")
        tracker.finish(
            record.task_id,
            SubAgentResult(
                agent_id=f"a{i}", agent_type="Explore", status=RunStatus.COMPLETED, text="x" * 400
            ),
        )
    ctx = ToolContext(workdir=Path("."), max_output_chars=2000)
    output = await TaskWaitTool(tracker).execute(TaskWaitArgs(timeout_s=0), ctx)
    shown = output.content.count('[completed] Explore "job')
    assert 1 <= shown < 20 and len(output.content) <= 2000
    assert f"{20 - shown} more results are ready" in output.content
    rest = tracker.drain()  # the others come with the next turn, each exactly once
    assert len(rest) == 20 - shown
    assert tracker.drain() == []
