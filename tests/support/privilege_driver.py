"""An orchestrator whose sub-agent probes what it holds (test_walls_privilege), run as
its own process so that it can run as root or, through setpriv, as user nobody.

argv: the workdir, "network" or "walled". Prints one JSON object: the sub-agent's
sandbox report and warnings, and the probes of its bash, of its own MCP server and of the
server the parent shares with it (``mcp_host/_shared.py``).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

from agentcell.orchestrator import AgentDefinition, Orchestrator, Settings
from model_servers import Call, ModelServer, Reply

HERE = Path(__file__).resolve().parent


def _respond(body: dict[str, Any], api: str) -> Reply:
    outputs = [m["content"] for m in body["messages"] if m["role"] == "tool"]
    if not outputs:
        command = f"{sys.executable} privilege_probe.py locked"
        return Reply(tool_calls=[Call("bash", {"command": command, "timeout_s": 60})])
    if len(outputs) == 1:
        return Reply(tool_calls=[Call("mcp__privilege__held", {})])
    if len(outputs) == 2:  # the same probe, from the server the parent shares
        return Reply(tool_calls=[Call("mcp__shared__held", {})])
    return Reply(text=json.dumps(outputs))


async def main(workdir: Path, network: bool) -> None:
    (workdir / "privilege_probe.py").write_text((HERE / "privilege_probe.py").read_text())
    locked = workdir / "locked"
    locked.write_text("only a capability reads this\n")
    locked.chmod(0)
    # The SDK gives a server a small default environment: a copied runtime (user nobody's)
    # needs its library and package paths named.
    env = {k: os.environ[k] for k in ("LD_LIBRARY_PATH", "PYTHONPATH") if k in os.environ}
    server = {"command": sys.executable, "args": [str(HERE / "privilege_mcp.py")], "env": env}
    worker = AgentDefinition(
        name="worker",
        description="worker",
        tools=["bash", "mcp__privilege__*", "mcp__shared__*"],
        model="openai:test",
        source="test",
        mcp_servers=[{"privilege": server}, "shared"],  # its own, and the parent's
    )
    with ModelServer(responder=_respond) as served:
        os.environ["OPENAI_BASE_URL"] = served.openai_base_url
        os.environ["OPENAI_API_KEY"] = "sk-privilege-test-key"
        settings = Settings(
            model="openai:test",
            approval="allow",
            max_workers=1,
            warm_spares=0,
            network=network,
            mcp_servers={"shared": server},
            main_mcp_servers=[],
        )
        orch = Orchestrator(
            settings=settings, workdir=workdir, agents=[worker], load_agent_files=False,
            record=False,
        )  # fmt: skip
        async with orch:
            result = await asyncio.wait_for(orch.delegate("worker", "go"), 120)
    bash, mcp, shared = json.loads(result.text) if result.text.startswith("[") else ("",) * 3
    print(
        json.dumps(
            {
                "status": result.status.value,
                "error": result.error,
                "sandbox": result.sandbox,
                "warnings": result.warnings,
                "bash": bash,
                "mcp": mcp,
                "shared": shared,
            }
        )
    )


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1]), sys.argv[2] == "network"))
