"""A sub-agent behind the default sandbox, driven by bash lines: the orchestrator, the
model server and the script shared by the wall tests."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from agentcell.orchestrator import AgentDefinition, Orchestrator, Settings
from agentcell.orchestrator.backends._forkserver import WorkerPool
from agentcell.worker import probe_sandbox
from agents import agent
from model_servers import Call, ModelServer, Reply

SEP = "\n=====\n"


def bash_script(commands: list[str], *, timeout_s: float = 20) -> Any:
    """A model-server responder that runs ``commands`` one by one in bash, then answers
    with every output, in order, joined by ``SEP``."""

    def respond(body: dict[str, Any], api: str) -> Reply:
        outputs = [m["content"] for m in body["messages"] if m["role"] == "tool"]
        if len(outputs) < len(commands):
            command = commands[len(outputs)]
            return Reply(tool_calls=[Call("bash", {"command": command, "timeout_s": timeout_s})])
        return Reply(text=SEP.join(outputs))

    return respond


def orchestrator(workdir: Path, *agents: AgentDefinition, **settings: Any) -> Orchestrator:
    """Default settings (the ``workspace`` sandbox), the local model server, no records."""
    defaults: dict[str, Any] = {"model": "openai:test", "approval": "allow", "max_workers": 2}
    return Orchestrator(
        settings=Settings(**(defaults | {"warm_spares": 0} | settings)),
        workdir=workdir,
        agents=list(agents),
        load_agent_files=False,
        record=False,
    )


@pytest.fixture
def served(model_server: ModelServer, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModelServer]:
    monkeypatch.setenv("OPENAI_BASE_URL", model_server.openai_base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-sandbox-test-key")
    yield model_server


CAPS = probe_sandbox()


async def delegate_bash_on(work: Path, target: Any) -> Any:
    """One bash sub-agent's run in ``work`` on a pool whose children run ``target``."""
    settings = Settings(model="openai:test", approval="allow", warm_spares=0, max_workers=2)
    async with WorkerPool(max_workers=2, warm=0, target=target) as pool:
        orch = Orchestrator(
            settings=settings,
            workdir=work,
            agents=[agent("worker", ["bash"])],
            load_agent_files=False,
            record=False,
            pool=pool,
        )
        async with orch:
            return await asyncio.wait_for(orch.delegate("worker", "go"), 60)
