"""Each tool call of a journaled run, as the engine tells its journal, and the calls a
resumed run finds there (``Attachments.tool_journal``).

A journaled call is never run a second time: one the journal has as finished gets its
journaled result; one it has as started only gets ``INTERRUPTED`` (it may or may not
have run), unless its tool is read-only and so safe to run again. Tools named in
``live`` (the coordination tools: they start or wait on sub-agents, which the
orchestrator itself resumes) always run.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection, Mapping

from agentcell.protocol import ReplayedTool, ToolCall
from agentcell.worker.tools import Tool, ToolOutput

INTERRUPTED = (
    "[interrupted: agentcell stopped before this call's result was recorded; "
    "it may or may not have run]"
)

#: Told a call starts; returns once the journal has it (the call runs after that), or at
#: once when told not to ``wait`` (a call that may run twice: a read-only one).
OnStart = Callable[[ToolCall, bool], Awaitable[None]]
#: Told a call's whole result.
OnFinish = Callable[[ToolCall, ToolOutput], None]


class ToolJournal:
    """What the engine tells the run's journal of each tool call, and what it finds there."""

    def __init__(
        self,
        on_start: OnStart,
        on_finish: OnFinish,
        *,
        replayed: Mapping[str, ReplayedTool] | None = None,
        live: Collection[str] = (),
    ) -> None:
        self._on_start = on_start
        self._on_finish = on_finish
        self._replayed = dict(replayed or {})
        self._live = frozenset(live)
        self.served = 0  # calls answered from the journal, not run

    def journaled(self, call: ToolCall, tool: Tool | None) -> ToolOutput | None:
        """The output of a call the journal already has, or None: it runs."""
        if call.name in self._live:
            return None
        replayed = self._replayed.get(call.id)
        if replayed is None or (replayed.name, replayed.arguments) != (call.name, call.arguments):
            return None  # not journaled, or another call under a repeated id
        del self._replayed[call.id]
        if replayed.finished:
            output = ToolOutput(replayed.content, replayed.is_error)
        elif tool is not None and tool.read_only:
            return None  # nothing it did can be done twice
        else:
            output = ToolOutput(INTERRUPTED, True)
        self.served += 1
        return output

    async def started(self, call: ToolCall, *, wait: bool = True) -> None:
        await self._on_start(call, wait)

    def finished(self, call: ToolCall, output: ToolOutput) -> None:
        self._on_finish(call, output)
