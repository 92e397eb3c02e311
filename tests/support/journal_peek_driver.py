"""A recorded run whose sub-agent tries to read the run's journal with bash and with its
file tools (test_orchestrator_killed), run as its own process so that it can run as root
or, through setpriv, as user nobody.

argv: the workdir. Prints one JSON object: the sub-agent's status, what each attempt got,
and the journal file the attempts aimed at (which the parent did write).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

from agentcell.orchestrator import AgentDefinition, Orchestrator, Settings
from agentcell.orchestrator.journal._place import JOURNAL_FILE, journal_root
from model_servers import Call, ModelServer, Reply


def _target() -> str:
    """The journal of the run going now: the only one under this user's journal root."""
    folders = sorted(journal_root().iterdir())
    return str(folders[-1] / JOURNAL_FILE) if folders else str(journal_root())


def _respond(body: dict[str, Any], api: str) -> Reply:
    outputs = [m["content"] for m in body["messages"] if m["role"] == "tool"]
    target = _target()
    descriptors = "ls -l /proc/self/fd /proc/$PPID/fd 2>&1 | grep -c journal; true"
    attempts = [
        Call("bash", {"command": descriptors}),
        Call("bash", {"command": f"cat {target} 2>&1 | head -c 300"}),
        Call("read_file", {"path": target}),
        Call("glob", {"pattern": "*", "path": str(Path(target).parent)}),
    ]
    if len(outputs) < len(attempts):
        return Reply(tool_calls=[attempts[len(outputs)]])
    return Reply(text=json.dumps({"outputs": outputs, "target": target}))


async def main(workdir: Path) -> None:
    worker = AgentDefinition(
        name="worker",
        description="worker",
        tools=["bash", "read_file", "glob"],
        model="openai:test",
        source="test",
    )
    with ModelServer(responder=_respond) as served:
        os.environ["OPENAI_BASE_URL"] = served.openai_base_url
        os.environ["OPENAI_API_KEY"] = "sk-journal-peek-key"
        settings = Settings(model="openai:test", approval="allow", max_workers=1, warm_spares=0)
        orch = Orchestrator(
            settings=settings, workdir=workdir, agents=[worker], load_agent_files=False
        )
        async with orch:
            result = await asyncio.wait_for(orch.delegate("worker", "go"), 120)
    found = json.loads(result.text) if result.text.startswith("{") else {}
    target = found.get("target", "")
    print(
        json.dumps(
            {
                "status": result.status.value,
                "error": result.error,
                "outputs": found.get("outputs", []),
                "target": target,
                "written": bool(target) and Path(target).is_file(),
            }
        )
    )


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1])))
