"""Who owns the main agent's background sub-agents.

Every task tool starts its background runs in one ``TaskNursery``, entered when the
orchestrator is and closed when it closes, so no run outlives it and one run's failure
is that run's result alone. A run's own task tool waits for its runs when the run ends
(``TaskTool.shutdown``); a conversation (``keep_background``) keeps one task tool per
session, whose runs go on across runs until the session changes or the orchestrator
closes.
"""

from __future__ import annotations

from collections.abc import Callable

from agentcell.orchestrator.delegation._request import Scope
from agentcell.orchestrator.task_tools._tools import TaskTool
from agentcell.protocol import TaskNursery
from agentcell.worker import Session


class BackgroundRuns:
    def __init__(self, make_tool: Callable[[Callable[[], Scope], TaskNursery], TaskTool]) -> None:
        self.nursery = TaskNursery("background sub-agents")
        self._make_tool = make_tool
        # One task tool per session, kept with it: an id alone may be reused.
        self._kept: dict[int, tuple[Session, TaskTool]] = {}

    async def open(self) -> None:
        await self.nursery.open()

    async def task_tool(
        self, session: Session, scope: Callable[[], Scope], *, keep_background: bool
    ) -> TaskTool:
        """This run's ``task`` tool: a conversation's kept one, else a new one; either way
        this run's sub-agents count to this run (``scope``)."""
        kept = self._kept.get(id(session)) if keep_background else None
        task_tool = kept[1] if kept is not None and kept[0] is session else None
        if kept is not None and task_tool is None:  # a session gone, its id reused
            await kept[1].shutdown()
        if task_tool is not None:
            task_tool.scope = scope
        else:
            task_tool = self._make_tool(scope, self.nursery)
        if keep_background:
            self._kept[id(session)] = (session, task_tool)
        account = scope().account
        if account is not None and account.team is not None:  # a message may continue an
            account.team.starter = task_tool.continue_by_message  # ended sub-agent: as a task
        return task_tool

    async def close(self) -> None:
        """Cancel every background run, kept or still in a run, and wait for each."""
        for _, kept_tool in list(self._kept.values()):
            await kept_tool.shutdown()
        self._kept.clear()
        await self.nursery.aclose()
