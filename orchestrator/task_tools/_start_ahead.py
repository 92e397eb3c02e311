"""Starting sub-agent processes while the main model is still writing its ``task`` calls.

Without it a fan-out of N task calls waits, after the model's whole answer has streamed,
for up to N − warm process starts. A provider names each tool call before it streams the
call's arguments (``ToolCallStart``); ``StartAhead`` watches the main agent's model calls
(the engine's ``StreamWatcher``), counts the task calls as their names arrive and tells
the backend to have that many processes starting (``Backend.expect``). When the model
call ends, however it ends, the expectation is withdrawn: processes already starting go
on and wait as spares, the task calls take them as they run, and the pool retires the
ones no call took (``WorkerPool.surplus_idle_s``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from agentcell.orchestrator.backends._interface import Backend
from agentcell.orchestrator.task_tools._tools import TaskTool
from agentcell.worker.models import ToolCallStart

#: The tools whose calls each start a sub-agent process (foreground and background).
TASK_TOOLS = frozenset({TaskTool.name})


class StartAhead:
    """A ``StreamWatcher`` for one agent's engine: one process expected per task call.

    ``room`` says how many more sub-agents may start (the run's ``max_subagents``
    budget, None for no limit): no process is started ahead for a call the budget will
    refuse. The backend's own limit (``max_workers``) caps the rest.
    """

    def __init__(
        self,
        backend: Backend,
        *,
        tools: Iterable[str] = TASK_TOOLS,
        room: Callable[[], int | None] = lambda: None,
    ) -> None:
        self.backend = backend
        self.tools = frozenset(tools)
        self.room = room
        self.expected = 0  # what this watcher has asked of the backend, not withdrawn yet
        self._seen: set[int] = set()  # indexes of this model call's task calls

    def tool_call_started(self, start: ToolCallStart) -> None:
        # A retried request names the same calls again: an index counts once.
        if start.name not in self.tools or start.index in self._seen:
            return
        self._seen.add(start.index)
        room = self.room()
        if room is not None and self.expected >= room:
            return
        self.expected += 1
        self.backend.expect(1)

    def model_call_ended(self) -> None:
        self._seen.clear()
        if self.expected:
            self.backend.expect(-self.expected)
            self.expected = 0
