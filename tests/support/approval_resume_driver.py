"""A recorded run of the main agent behind a terminal-style approval channel, or the
resume of one (test_approvals_on_resume), as a process of its own so that it can be
SIGKILLed (``AGENTCELL_TEST_KILL_AT``). Every question asked is appended to
``asked.txt`` in the workdir: "always" to a bash question, "yes" to any other.

argv: run WORKDIR | resume WORKDIR RUN_ID. Prints the run's final text.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from agentcell.orchestrator import Orchestrator, Settings
from agentcell.orchestrator.approvals._channel import TerminalPrompt


async def main(mode: str, workdir: Path, run_id: str = "") -> None:
    async def answer(question: str) -> str:
        tool = "bash" if "wants to run bash" in question else "other"
        with (workdir / "asked.txt").open("a") as asked:
            asked.write(tool + "\n")
        return "a" if tool == "bash" else "y"

    orch = Orchestrator(
        settings=Settings(model="openai:m", sandbox="off"),
        workdir=workdir,
        load_agent_files=False,
        approval=TerminalPrompt(read_line=answer),
    )
    async with orch:
        report = await (orch.resume(run_id) if mode == "resume" else orch.run("go"))
    print(report.final_text or report.error)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], Path(sys.argv[2]), *sys.argv[3:]))
