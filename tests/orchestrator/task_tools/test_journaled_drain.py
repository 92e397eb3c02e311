"""The main agent's hand-outs of background results in a journaled run, and a resume's:
while it replays, exactly the results the killed run handed out at that point."""

from __future__ import annotations

import asyncio
from typing import Any

from agentcell.orchestrator.delegation._results import SubAgentResult
from agentcell.orchestrator.task_tools._journaled_drain import JournaledDrain
from agentcell.orchestrator.task_tools._tracker import TaskTracker
from agentcell.protocol import RunStatus


class _Facts:
    def __init__(self) -> None:
        self.facts: list[tuple[str, dict[str, Any]]] = []

    def fact(self, what: str, **fields: Any) -> None:
        self.facts.append((what, fields))


def _ended(tracker: TaskTracker, task_id: str) -> None:
    tracker.finish(
        task_id,
        SubAgentResult(agent_id=task_id, agent_type="x", status=RunStatus.COMPLETED, text="r"),
    )


async def test_a_live_run_hands_out_what_is_done_and_journals_when() -> None:
    tracker, journal = TaskTracker(), _Facts()
    for task_id in ("a1", "a2"):
        tracker.start("x", "", task_id=task_id)
    drain = JournaledDrain(tracker, journal, lambda: False)  # type: ignore[arg-type]
    assert await drain() == []
    _ended(tracker, "a2")
    assert [r.task_id for r in await drain()] == ["a2"]
    assert journal.facts == [("delivered", {"index": 1, "agents": ["a2"]})]


async def test_a_replay_hands_out_the_journaled_results_at_their_point_and_no_other() -> None:
    tracker, journal = TaskTracker(), _Facts()
    for task_id in ("a1", "a2"):
        tracker.start("x", "", task_id=task_id)
    _ended(tracker, "a1")  # done at once, but the killed run handed it out later
    replaying = [True]
    drain = JournaledDrain(tracker, journal, lambda: replaying[0], {1: ["a1"], 2: ["a2"]})  # type: ignore[arg-type]
    assert await drain() == []  # the killed run handed out nothing here
    assert [r.task_id for r in await drain()] == ["a1"]
    waiting = asyncio.ensure_future(drain())  # a2 not done yet: its hand-out waits for it
    await asyncio.sleep(0)
    assert not waiting.done()
    _ended(tracker, "a2")
    assert [r.task_id for r in await waiting] == ["a2"]
    replaying[0] = False
    assert await drain() == []
    assert [f["index"] for _, f in journal.facts] == [1, 2]
