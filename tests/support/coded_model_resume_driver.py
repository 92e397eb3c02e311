"""A recorded run whose sub-agent's model is an object given in code (its calls never
pass through the parent, so none are journaled), or the resume of one
(test_orchestrator_killed). The sub-agent runs bash, then, while the workdir holds a
file ``hang``, hangs on its next call. Run as its own process so that it can be killed.

argv: run WORKDIR | resume WORKDIR RUN_ID. Prints the report as JSON.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from agentcell.orchestrator import AgentDefinition, Orchestrator, Settings
from agentcell.orchestrator._main_run import report_json
from agentcell.protocol import ToolMessage
from agentcell.worker.models._doubles import FunctionModel, reply, tool_call


async def coded(messages: list[Any], tools: list[Any]) -> Any:
    if not any(isinstance(m, ToolMessage) for m in messages):
        return reply("", tool_call("bash", command="echo c >> counter.txt"))
    while Path("hang").exists():  # noqa: ASYNC110 - a file another process removes
        await asyncio.sleep(0.05)
    return "coded done"


async def main(mode: str, workdir: Path, run_id: str = "") -> None:
    agent = AgentDefinition(
        name="coded", description="c", tools=["bash"], model="function:coded", source="t"
    )
    orch = Orchestrator(
        settings=Settings(model="openai:m", approval="allow"),
        workdir=workdir,
        agents=[agent],
        models={"function:coded": FunctionModel(coded, name="function:coded")},
        load_agent_files=False,
    )
    async with orch:
        report = await (orch.resume(run_id) if mode == "resume" else orch.run("go"))
    print(json.dumps(report_json(report)))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], Path(sys.argv[2]), *sys.argv[3:]))
