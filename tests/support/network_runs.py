"""A real sub-agent behind the default sandbox making scripted tool calls, for the network
tests (egress by name, web_fetch)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from agentcell.orchestrator import AgentDefinition, Orchestrator, Settings
from model_servers import Call, ModelServer, Reply

SEP = "\n=====\n"


PAGE = "HELLO-FROM-THE-ALLOWED-HOST"


def call_script(calls: list[tuple[str, dict[str, Any]]]) -> Any:
    """A model-server responder that makes ``calls`` one by one, then answers with every
    tool output, in order, joined by ``SEP``."""

    def respond(body: dict[str, Any], api: str) -> Reply:
        outputs = [m["content"] for m in body["messages"] if m["role"] == "tool"]
        if len(outputs) < len(calls):
            name, arguments = calls[len(outputs)]
            return Reply(tool_calls=[Call(name, arguments)])
        return Reply(text=SEP.join(outputs))

    return respond


def run_calls(
    tmp_path: Path,
    calls: list[tuple[str, dict[str, Any]]],
    served: ModelServer,
    *,
    tools: list[str] | None = None,
    approval: str = "allow",
    record: bool = False,
    settings_extra: dict[str, Any] | None = None,
    **fields: Any,
) -> Any:
    served.responder = call_script(calls)
    definition = AgentDefinition(
        name="fetcher",
        description="fetcher",
        tools=tools or ["bash"],
        model="openai:test",
        **fields,
    )
    settings = Settings(
        model="openai:test",
        approval=approval,
        max_workers=1,
        warm_spares=0,
        **(settings_extra or {}),
    )
    orch = Orchestrator(
        settings=settings,
        workdir=tmp_path,
        agents=[definition],
        load_agent_files=False,
        record=record,
    )

    async def go() -> Any:
        async with orch:
            return await asyncio.wait_for(orch.delegate("fetcher", "go"), 90)

    return go()


@pytest.fixture
def served(model_server: ModelServer, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModelServer]:
    monkeypatch.setenv("OPENAI_BASE_URL", model_server.openai_base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-net-test-key")
    yield model_server
