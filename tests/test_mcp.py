"""MCP servers per agent: a real stdio server (tests/mcp_server.py, written with the
``mcp`` package's server API) used by a real child through the local model server."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from agentcell.orchestrator import AgentDefinition, Orchestrator, Settings
from agentcell.orchestrator.config import McpServerConfig, load_settings, trust
from agentcell.orchestrator.delegation import agent_mcp_servers
from agentcell.protocol import McpServer, RunStatus
from agentcell.worker import McpServers, tool_granted
from agentcell.worker.testing import FunctionModel, reply, tool_call, tool_results
from conftest import SpawnRecorder
from model_servers import Call, ModelServer, Reply

SERVER = str(Path(__file__).with_name("mcp_server.py"))
SEP = "\n=====\n"


def stdio(*args: str, **fields: Any) -> dict[str, Any]:
    return {"command": sys.executable, "args": [SERVER, *args], **fields}


def calls_then_report(calls: list[tuple[str, dict[str, Any]]]) -> Any:
    """A responder that makes ``calls`` one by one, then answers with every tool output,
    in order, joined by SEP (and records the tool names it was offered)."""

    def respond(body: dict[str, Any], api: str) -> Reply:
        outputs = [m["content"] for m in body["messages"] if m["role"] == "tool"]
        if len(outputs) < len(calls):
            name, arguments = calls[len(outputs)]
            return Reply(tool_calls=[Call(name, arguments)])
        return Reply(text=SEP.join(outputs))

    return respond


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def offered(request: Any) -> dict[str, dict[str, Any]]:
    return {t["function"]["name"]: t["function"] for t in request.body.get("tools", [])}


@pytest.fixture
def served(model_server: ModelServer, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModelServer]:
    monkeypatch.setenv("OPENAI_BASE_URL", model_server.openai_base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-mcp-test-key")
    yield model_server


def orchestrator(tmp_path: Path, agents: list[AgentDefinition], **settings: Any) -> Orchestrator:
    return Orchestrator(
        settings=Settings(
            model="openai:test", approval="allow", max_workers=2, warm_spares=0, **settings
        ),
        workdir=tmp_path,
        agents=agents,
        load_agent_files=False,
        record=False,
    )


async def test_a_sub_agent_calls_a_real_mcp_server_started_in_its_own_process_tree(
    spawned: SpawnRecorder, tmp_path: Path, served: ModelServer
) -> None:
    marker = tmp_path / "server.pid"
    outside = tmp_path.parent / f"{tmp_path.name}-outside.txt"
    outside.write_text("the server's own view")
    served.responder = calls_then_report(
        [
            ("mcp__local__echo", {"text": "hi"}),
            ("mcp__local__add", {"a": 2, "b": 3}),
            ("mcp__local__fail", {"reason": "no way"}),
            ("mcp__local__picture", {}),
            ("mcp__local__read_outside", {"path": str(outside)}),
        ]
    )
    agent = AgentDefinition(
        name="helper",
        description="uses MCP",
        tools=["read_file", "mcp__local__*"],
        disallowed_tools=["mcp__local__whoami"],
        mcp_servers=[{"local": stdio(str(marker))}],
        model="openai:test",
        source="programmatic",
    )
    try:
        async with orchestrator(tmp_path, [agent]) as orch:
            result = await asyncio.wait_for(orch.delegate("helper", "go"), 60)
        assert result.status is RunStatus.COMPLETED, result
        tools = offered(served.requests[0])
        # Named as Claude Code names them, with the server's own JSON schema.
        assert {"mcp__local__echo", "mcp__local__add", "read_file"} <= set(tools)
        assert tools["mcp__local__add"]["parameters"]["required"] == ["a", "b"]
        assert tools["mcp__local__add"]["parameters"]["properties"]["a"]["type"] == "integer"
        echo, added, failed, picture, read = result.text.split(SEP)
        assert echo == "echo from MCP: hi"
        assert json.loads(added) == {"sum": 5}
        assert "refused: no way" in failed
        assert picture == "[image image/png, 66 bytes: not shown]"  # described, not dropped
        # Started before the sandbox went up, the server keeps its own view of the disk.
        assert read == "the server's own view"
        assert result.sandbox.startswith("workspace"), result.sandbox
        assert "mcp__local__whoami" not in tools  # disallowedTools holds for MCP tools
        # The server was a process of the sub-agent's tree, and ended with it.
        assert not _alive(int(marker.read_text()))
    finally:
        outside.unlink(missing_ok=True)
