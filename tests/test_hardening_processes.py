"""Hardening II (issue 16) over real child processes: caps, frames, process trees, limits.

Every test here failed on the code before its fix.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from agentcell.orchestrator import AgentDefinition, Orchestrator, Settings
from agentcell.protocol import RunStatus
from agentcell.worker.testing import FunctionModel, reply, tool_call
from conftest import SpawnRecorder


def agent(name: str, model: str, tools: list[str] | None, **fields: Any) -> AgentDefinition:
    return AgentDefinition(
        name=name,
        description=f"{name} agent",
        system_prompt=f"You are {name}.",
        tools=tools,
        model=model,
        source="test",
        **fields,
    )


def orchestrator(
    workdir: Path, agents: list[AgentDefinition], models: dict[str, Any], **settings: Any
) -> Orchestrator:
    return Orchestrator(
        settings=Settings(
            model="scripted:echo", approval="allow", max_workers=6, warm_spares=1, **settings
        ),
        workdir=workdir,
        agents=agents,
        models=models,
        load_agent_files=False,
        record=False,
    )


# --- 10. the operator's subagent_* settings cap what a definition asks for ------------


async def test_a_definition_cannot_exceed_the_operators_turn_and_time_caps(
    spawned: SpawnRecorder, tmp_path: Path
) -> None:
    looper = FunctionModel(
        lambda messages, tools: reply("again", tool_call("glob", pattern="*")),
        name="function:looper",
    )
    orch = orchestrator(
        tmp_path,
        [agent("looper", "function:looper", ["glob"], max_turns=10_000, timeout_s=86_400)],
        {"function:looper": looper},
        subagent_max_turns=3,
        subagent_timeout_s=600,
    )
    async with orch:
        result = await asyncio.wait_for(orch.delegate("looper", "loop"), 60)
    assert result.status is RunStatus.MAX_TURNS, result
    assert result.turns == 3
