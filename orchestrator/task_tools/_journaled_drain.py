"""Which background results reached the main agent, and when, in the run's journal; a
resume hands out the same ones at the same points.

The main agent's turn and finish hooks hand out finished background results (``Drain``).
Each time one does, the journal gets a ``delivered`` fact: the how-manyth hand-out it
was and the sub-agents whose results went. While a resumed main agent is replaying its
journaled answers, a hand-out gives exactly the results the killed run gave at that
point (each of those sub-agents ended there, so its journaled result is at hand) and
nothing else: the request that follows is the one journaled, so its journaled answer
still holds. Once the replay is over, hand-outs are the tracker's as always.
"""

from __future__ import annotations

from collections.abc import Callable

from agentcell.orchestrator.journal._journal import Journal
from agentcell.orchestrator.task_tools._tracker import TaskRecord, TaskTracker

#: How long a replayed hand-out waits for the results it must give (they were journaled
#: as ended, so each is delivered again at once; the bound is for a journal that lies).
REPLAY_WAIT_S = 60.0


class JournaledDrain:
    """The main agent's ``Drain`` in a journaled (or resumed) run."""

    def __init__(
        self,
        tracker: TaskTracker,
        journal: Journal | None,
        replaying: Callable[[], bool],
        past: dict[int, list[str]] | None = None,
    ) -> None:
        self._tracker = tracker
        self._journal = journal
        self._replaying = replaying
        self._past = dict(past or {})
        self._count = 0

    async def __call__(self) -> list[TaskRecord]:
        index, self._count = self._count, self._count + 1
        if self._replaying():
            due = self._past.pop(index, [])
            if due:
                await self._tracker.wait(due, REPLAY_WAIT_S)
            records = self._tracker.drain(due)
        else:
            records = self._tracker.drain()
        if records and self._journal is not None:
            self._journal.fact("delivered", index=index, agents=[r.task_id for r in records])
        return records
