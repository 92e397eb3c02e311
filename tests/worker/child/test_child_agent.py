"""A model defined as a closure inside a test drives an engine in a real child process,
with an approval round trip through the parent (the reason multiprocess/dill is here)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agentcell.orchestrator import (
    AgentDefinition,
    ApprovalQuery,
    CallbackChannel,
    Orchestrator,
    Settings,
)
from agentcell.protocol import RunStatus
from conftest import SpawnRecorder

from agentcell.testing import FunctionModel, reply, tool_call, tool_results


async def test_a_closure_model_runs_in_a_child_with_an_approval_round_trip(
    spawned: SpawnRecorder, tmp_path: Path
) -> None:
    word = "pelican"  # captured by the closure below: it must travel by value

    def fn(messages: list[Any], tools: list[Any]) -> Any:
        results = tool_results(messages)
        if not results:
            return reply("", tool_call("write_file", path="note.txt", content=word))
        return f"{word}: {results[0].content}"

    model = FunctionModel(fn, name="function:closure")
    asked: list[ApprovalQuery] = []

    def approve(query: ApprovalQuery) -> bool:
        asked.append(query)
        return True

    writer = AgentDefinition(
        name="writer", description="writes", tools=["write_file"], model="function:closure"
    )
    orch = Orchestrator(
        settings=Settings(model="scripted:echo", approval="ask", max_workers=2, warm_spares=1),
        workdir=tmp_path,
        agents=[writer],
        models={"function:closure": model},
        approval=CallbackChannel(approve),
        load_agent_files=False,
        record=False,
    )
    async with orch:
        result = await orch.delegate("writer", "write a note")

    assert result.status is RunStatus.COMPLETED, result.error
    assert result.pid is not None and result.pid != __import__("os").getpid()
    assert (tmp_path / "note.txt").read_text() == "pelican"
    assert result.text.startswith("pelican: ")
    (query,) = asked  # the child's request crossed its pipe and reached our channel once
    assert (query.tool, query.agent_type, query.agent_id) == (
        "write_file",
        "writer",
        result.agent_id,
    )
    assert len(model.calls) == 2  # recorded in the child, handed back to this object
