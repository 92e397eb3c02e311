"""Background sub-agents: their states, their results, and delivering each result once.

Everything runs on the parent's event loop: no locks are needed and none are taken.
A terminal state is never overwritten, and ``drain`` hands each finished result out
exactly once.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import itertools
import time
from collections.abc import Iterable
from typing import Protocol

from agentcell.orchestrator.delegation._results import SubAgentResult
from agentcell.protocol import RunStatus


class TaskState(enum.StrEnum):
    RUNNING = "running"  # started (possibly still waiting for a process); not yet ended
    COMPLETED = "completed"  # the sub-agent gave its final answer
    FAILED = "failed"  # it ended in any other state (error, crash, timeout, limits)
    CANCELLED = "cancelled"  # cancelled by task_control, Ctrl-C, or the end of the run

    @property
    def terminal(self) -> bool:
        return self is not TaskState.RUNNING


class TaskControls(Protocol):
    def cancel(self, reason: str = "") -> None: ...
    def pause(self) -> None: ...
    def resume(self) -> None: ...
    def steer(self, text: str) -> None: ...


@dataclasses.dataclass(slots=True)
class TaskRecord:
    task_id: str
    agent_type: str
    description: str
    agent_id: str = ""
    state: TaskState = TaskState.RUNNING
    result: SubAgentResult | None = None
    delivered: bool = False
    started_at: float = dataclasses.field(default_factory=time.monotonic)
    ended_at: float | None = None
    controls: TaskControls | None = None

    def summary(self) -> str:
        elapsed = (self.ended_at or time.monotonic()) - self.started_at
        if self.result is not None:  # its own account: a resume hands out the same words
            elapsed = self.result.duration_ms / 1000
        line = f"task {self.task_id} [{self.state.value}] {self.agent_type}"
        if self.description:
            line += f' "{self.description}"'
        return f"{line} ({elapsed:.1f} s)"


class TaskTracker:
    def __init__(self) -> None:
        self._tasks: dict[str, TaskRecord] = {}
        self._ids = itertools.count(1)
        self._changed = asyncio.Event()

    def start(
        self,
        agent_type: str,
        description: str,
        controls: TaskControls | None = None,
        *,
        task_id: str = "",
    ) -> TaskRecord:
        """Track a background run. ``task_id`` is the sub-agent's agent id (one id per
        sub-agent everywhere: tables, /tasks, /cancel, records and the task_* tools);
        without one the tracker numbers the task itself."""
        task_id = task_id or f"t{next(self._ids)}"
        if task_id in self._tasks:
            raise ValueError(f"task id {task_id!r} is already tracked")
        record = TaskRecord(
            task_id=task_id,
            agent_id=task_id,
            agent_type=agent_type,
            description=description,
            controls=controls,
        )
        self._tasks[record.task_id] = record
        return record

    def finish(self, task_id: str, result: SubAgentResult) -> bool:
        """Record the result; False (and nothing changed) if the task had already ended."""
        record = self._tasks[task_id]
        if record.state.terminal:
            return False
        record.result = result
        record.agent_id = result.agent_id
        record.state = _state_of(result.status)
        record.ended_at = time.monotonic()
        record.controls = None
        self._notify()
        return True

    def get(self, task_id: str) -> TaskRecord | None:
        return self._tasks.get(task_id)

    def records(self, task_ids: Iterable[str] | None = None) -> list[TaskRecord]:
        if task_ids is None:
            return list(self._tasks.values())
        return [self._tasks[t] for t in task_ids if t in self._tasks]

    def running(self) -> list[TaskRecord]:
        return [r for r in self._tasks.values() if not r.state.terminal]

    def undelivered(self) -> list[TaskRecord]:
        return [r for r in self._tasks.values() if r.state.terminal and not r.delivered]

    def drain(self, only: Iterable[str] | None = None) -> list[TaskRecord]:
        """Finished results not handed out yet (of the tasks ``only`` names, if given);
        each one is handed out exactly once."""
        ready = self.undelivered()
        if only is not None:
            wanted = set(only)
            ready = [r for r in ready if r.task_id in wanted]
        for record in ready:
            record.delivered = True
        return ready

    def release_delivered(self) -> int:
        """Forget finished tasks whose results were handed out (a long-lived orchestrator
        must not keep every task it ever ran); returns how many were forgotten."""
        done = [t for t, r in self._tasks.items() if r.state.terminal and r.delivered]
        for task_id in done:
            del self._tasks[task_id]
        return len(done)

    async def wait(
        self, task_ids: Iterable[str] | None = None, wait_s: float | None = None
    ) -> bool:
        """Wait until the tasks (default: all) have ended. False on timeout — not an error."""
        ids = list(task_ids) if task_ids is not None else None
        try:
            async with asyncio.timeout(wait_s):
                while any(not r.state.terminal for r in self.records(ids)):
                    self._changed.clear()
                    await self._changed.wait()
        except TimeoutError:
            return False
        return True

    def _notify(self) -> None:
        self._changed.set()


def _state_of(status: RunStatus) -> TaskState:
    if status is RunStatus.COMPLETED:
        return TaskState.COMPLETED
    if status is RunStatus.CANCELLED:
        return TaskState.CANCELLED
    return TaskState.FAILED
