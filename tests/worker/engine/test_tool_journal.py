"""What a resumed agent's engine does with a tool call its run's journal already has:
served, never run twice; an unfinished one interrupted unless read-only; anything else
(another tool or arguments under the id, a coordination tool) runs."""

from __future__ import annotations

from typing import Any

import pytest
from agentcell.protocol import ReplayedTool, ToolCall
from agentcell.worker.engine._tool_journal import INTERRUPTED, ToolJournal
from agentcell.worker.tools import Tool, ToolOutput

CALL = ToolCall(id="c1", name="bash", arguments='{"command":"echo hi"}')


class _Tool:
    def __init__(self, read_only: bool) -> None:
        self.read_only = read_only


def _journal(replayed: dict[str, ReplayedTool]) -> ToolJournal:
    async def started(call: ToolCall, wait: bool) -> None:
        return None

    def finished(call: ToolCall, output: ToolOutput) -> None:
        return None

    return ToolJournal(started, finished, replayed=replayed, live={"task"})


def _as(finished: bool, **fields: Any) -> ReplayedTool:
    base = {"name": CALL.name, "arguments": CALL.arguments, "finished": finished}
    return ReplayedTool(**{**base, **fields})


def _served(journal: ToolJournal, call: ToolCall = CALL, read_only: bool = False) -> Any:
    tool: Tool = _Tool(read_only)  # type: ignore[assignment]
    return journal.journaled(call, tool)


def test_a_finished_call_gets_its_journaled_result_once() -> None:
    journal = _journal({"c1": _as(True, content="hi\n", is_error=True)})
    assert _served(journal) == ToolOutput("hi\n", True)
    assert journal.served == 1
    assert _served(journal) is None  # the id again: a call of its own, it runs


def test_a_call_only_started_is_interrupted_unless_read_only() -> None:
    assert _served(_journal({"c1": _as(False)})) == ToolOutput(INTERRUPTED, True)
    assert _served(_journal({"c1": _as(False)}), read_only=True) is None


@pytest.mark.parametrize(
    "call",
    [
        ToolCall(id="c1", name="write_file", arguments=CALL.arguments),
        ToolCall(id="c1", name="apply", arguments=CALL.arguments),  # sorts before it
        ToolCall(id="c1", name="bash", arguments='{"command":"rm -rf /"}'),
        ToolCall(id="c1", name="bash", arguments='{"command":"a"}'),  # sorts before it
        ToolCall(id="c2", name="bash", arguments=CALL.arguments),
    ],
    ids=["another tool", "a tool before it", "other arguments", "arguments before", "id"],
)
def test_only_the_very_call_journaled_is_served(call: ToolCall) -> None:
    journal = _journal({"c1": _as(True, content="hi\n")})
    assert _served(journal, call) is None
    assert journal.served == 0


def test_a_coordination_tool_always_runs() -> None:
    call = ToolCall(id="c1", name="task", arguments="{}")
    journal = _journal({"c1": ReplayedTool(name="task", arguments="{}", finished=True)})
    assert _served(journal, call) is None
