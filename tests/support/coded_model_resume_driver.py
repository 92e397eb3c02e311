"""A recorded run whose sub-agent's model is an object given in code (its calls never
pass through the parent, so none are journaled), or the resume of one
(test_orchestrator_killed). The sub-agent runs bash, then, while the workdir holds a
file ``hang``, hangs on its next call. Run as its own process so that it can be killed.

argv: run WORKDIR | resume WORKDIR RUN_ID | bare WORKDIR RUN_ID (a resume not given the
model object). Prints the report as JSON, or the resume's refusal.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from agentcell.orchestrator import AgentDefinition, ConfigError, Orchestrator, Settings
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
    # "bare": a resume by an orchestrator not given the model object the run had.
    models = {} if mode == "bare" else {"function:coded": FunctionModel(coded, name="coded")}
    orch = Orchestrator(
        settings=Settings(model="openai:m", approval="allow"),
        workdir=workdir,
        agents=[agent],
        models=models,
        load_agent_files=False,
    )
    async with orch:
        try:
            report = await (orch.run("go") if mode == "run" else orch.resume(run_id))
        except ConfigError as refused:
            print(refused)
            return
    print(json.dumps(report_json(report)))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], Path(sys.argv[2]), *sys.argv[3:]))
