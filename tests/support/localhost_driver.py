"""An orchestrator whose sub-agent, under ``network: ["localhost:PORT"]``, fetches
``localhost:PORT`` and ``localhost:OTHER`` from its bash (test_net_egress), run as its own
process so that it can run as user nobody (through setpriv).

argv: the workdir, PORT, OTHER. Prints one JSON object: the run's status, sandbox report,
the outputs of the two fetches and the proxy's log.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

from agentcell.orchestrator import AgentDefinition, Orchestrator, Settings
from model_servers import ModelServer
from network_runs import SEP, call_script

_FETCH = (
    "python3 -c 'import urllib.request,sys; "
    "print(urllib.request.urlopen(sys.argv[1], timeout=20).read().decode())' "
)


async def main(workdir: Path, port: int, other: int) -> None:
    commands = [f"{_FETCH}http://localhost:{port}/local", f"{_FETCH}http://localhost:{other}/"]
    calls = [("bash", {"command": command, "timeout_s": 30}) for command in commands]
    worker = AgentDefinition(
        name="fetcher",
        description="fetcher",
        tools=["bash"],
        model="openai:test",
        source="test",
        network=[f"localhost:{port}"],
    )
    with ModelServer(responder=call_script(calls)) as served:
        os.environ["OPENAI_BASE_URL"] = served.openai_base_url
        os.environ["OPENAI_API_KEY"] = "sk-localhost-test-key"
        settings = Settings(model="openai:test", approval="allow", max_workers=1, warm_spares=0)
        orch = Orchestrator(
            settings=settings, workdir=workdir, agents=[worker], load_agent_files=False,
            record=False,
        )  # fmt: skip
        async with orch:
            result = await asyncio.wait_for(orch.delegate("fetcher", "go"), 120)
    print(
        json.dumps(
            {
                "uid": os.geteuid(),
                "status": result.status.value,
                "error": result.error,
                "sandbox": result.sandbox,
                "out": result.text.split(SEP),
                "log": result.network_log,
            }
        )
    )


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])))
