"""Which chat turn each background sub-agent belongs to.

A background sub-agent outlives the turn that started it; its result reaches the main
agent in whichever turn next calls the model (or ``task_wait``) after it ended, which may
be the turn running when it ended, or the next one. So a turn's table lists every
sub-agent whose result the main agent got in that turn, background ones included, and
names the background ones it started that run on; a background result that ended too
late for the turn is said to come with the next message only once the turn is over (while
a turn runs nobody can tell which turn will get it).
"""

from __future__ import annotations

from agentcell.orchestrator.delegation._results import SubAgentResult
from agentcell.orchestrator.task_tools._tracker import TaskRecord, TaskTracker


class TurnBackground:
    """One main turn's view of the background tasks: call ``begin`` before the turn runs
    and read the rest once it has ended (before the next turn begins)."""

    def __init__(self, tracker: TaskTracker) -> None:
        self.tracker = tracker
        self._before: set[str] = set()

    def begin(self) -> None:
        self._before = {record.task_id for record in self.tracker.records()}

    def delivered(self) -> list[SubAgentResult]:
        """Background results the main agent got in this turn (the tracker forgets those
        of earlier turns when a turn starts)."""
        return [r.result for r in self.tracker.records() if r.delivered and r.result is not None]

    def started(self) -> list[TaskRecord]:
        """The background tasks this turn started (still running or not)."""
        return [r for r in self.tracker.records() if r.task_id not in self._before]

    def waiting(self) -> list[TaskRecord]:
        """Ended, and not yet handed to the main agent: it gets them with the next message."""
        return self.tracker.undelivered()


def turn_results(
    foreground: list[SubAgentResult], background: list[SubAgentResult]
) -> list[SubAgentResult]:
    """The turn's table: its foreground sub-agents, then the background results it got."""
    seen = {result.agent_id for result in foreground}
    return [*foreground, *(r for r in background if r.agent_id not in seen)]


def running_line(record: TaskRecord) -> str:
    description = f' "{record.description}"' if record.description else ""
    return (
        f"{record.task_id} {record.agent_type}{description} runs on in the background "
        f"(/tasks; /cancel {record.task_id})"
    )


def waiting_line(record: TaskRecord) -> str:
    return (
        f"background {record.task_id} {record.agent_type} ended too late for this turn; "
        "the main agent gets its result with your next message"
    )
