"""Run by test_walls_kernel on a pseudo-terminal the test opened (its controlling terminal):
one bash sub-agent with the default sandbox and no run folder; the result goes to a file
(stdout is the terminal under test)."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path


async def main(workdir: Path, out: Path) -> None:
    from agentcell.orchestrator import AgentDefinition, Orchestrator, Settings

    worker = AgentDefinition(
        name="worker", description="worker", tools=["bash"], model="openai:test", source="test"
    )
    settings = Settings(model="openai:test", approval="allow", max_workers=1, warm_spares=0)
    orch = Orchestrator(
        settings=settings,
        workdir=workdir,
        agents=[worker],
        load_agent_files=False,
        record=False,  # no run folder: the child's output is not captured to a log
    )
    async with orch:
        result = await asyncio.wait_for(orch.delegate("worker", "go"), 120)
    report = {"status": result.status.value, "text": result.text, "sandbox": result.sandbox}
    out.write_text(json.dumps(report))


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1]), Path(sys.argv[2])))
