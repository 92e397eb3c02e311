"""Agent files as people write them (issue 22 item 6): example lines in a description,
``sandbox: off`` unquoted, docs in an agents folder, MCP tools named without
``mcpServers``, and an MCP server's stderr kept off the user's terminal."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import pytest
from agentcell.orchestrator import Orchestrator, Settings
from agentcell.orchestrator.definitions._loader import load_agent_file, load_agents_dir
from agentcell.protocol import RunStatus
from conftest import SpawnRecorder
from model_servers import Call, ModelServer, Reply
from places import SUPPORT

SERVER = str(SUPPORT / "mcp_server.py")

# The shape of a widely copied collection: examples after the description, unindented.
EXAMPLES = """---
name: growth-reviewer
description: Use this agent when the user asks for a review of a growth plan. Examples:

<example>
Context: The user has drafted a plan.
user: "Review my growth loop"
assistant: "I'll use the growth-reviewer agent to review it."
<commentary>
A review was asked for, so the agent is used.
</commentary>
</example>
tools: Read, Grep
model: inherit
---
You review growth plans.
"""


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_example_lines_after_a_description_are_kept_in_it(tmp_path: Path) -> None:
    result = load_agent_file(_write(tmp_path / "growth-reviewer.md", EXAMPLES))
    [definition] = result.definitions
    description = definition.description
    assert description.startswith("Use this agent when the user asks for a review")
    # Every line of the example is in it, in order, up to the last one.
    for part in (
        "Context: The user has drafted a plan.",
        'user: "Review my growth loop"',
        'assistant: "I\'ll use the growth-reviewer agent to review it."',
        "</commentary> </example>",
    ):
        assert part in description, (part, description)
    assert description.endswith("</example>")
    assert definition.tools == ["read_file", "grep"] and definition.model == "inherit"
    assert "user" not in definition.extra and "assistant" not in definition.extra
    assert not [d for d in result.diagnostics if d.level != "info"], result.diagnostics


def test_sandbox_off_unquoted_loads_as_off(tmp_path: Path) -> None:
    text = "---\nname: free\ndescription: x\nsandbox: off\n---\nBody\n"
    result = load_agent_file(_write(tmp_path / "free.md", text))
    [definition] = result.definitions
    assert definition.sandbox == "off"
    assert not [d for d in result.diagnostics if d.level == "error"]


@pytest.mark.parametrize(
    "name", ["README_zh.md", "README-ja.md", "readme.en.md", "CLAUDE.md", "AGENTS.md", "GUIDE.md"]
)
def test_docs_in_an_agents_folder_are_skipped_without_a_word(tmp_path: Path, name: str) -> None:
    agents = tmp_path / "agents"
    _write(agents / name, "# Our agents\n\nHow to use them.\n")
    _write(agents / "ok.md", "---\nname: ok\ndescription: fine\n---\nBody\n")
    result = load_agents_dir(agents)
    assert [d.name for d in result.definitions] == ["ok"]
    assert result.diagnostics == []
    assert result.no_frontmatter == [str(agents / name)]


def _responder(calls: list[tuple[str, dict[str, Any]]]) -> Any:
    def respond(body: dict[str, Any], api: str) -> Reply:
        outputs = [m["content"] for m in body["messages"] if m["role"] == "tool"]
        if len(outputs) < len(calls):
            return Reply(tool_calls=[Call(*calls[len(outputs)])])
        return Reply(text="\n=====\n".join(outputs))

    return respond


@pytest.fixture
def served(model_server: ModelServer, monkeypatch: pytest.MonkeyPatch) -> ModelServer:
    monkeypatch.setenv("OPENAI_BASE_URL", model_server.openai_base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-tolerant-test-key")
    return model_server


def _orchestrator(tmp_path: Path, **settings: Any) -> Orchestrator:
    return Orchestrator(
        settings=Settings(
            model="openai:test", approval="allow", max_workers=1, warm_spares=0, **settings
        ),
        workdir=tmp_path,
        load_agent_files=True,
        record=False,
    )


async def test_mcp_tools_without_mcp_servers_come_from_the_configured_server(
    spawned: SpawnRecorder, tmp_path: Path, served: ModelServer
) -> None:
    # 10 of 701 real files do this; Claude Code starts the configured server for them.
    agent_file = _write(
        tmp_path / ".claude" / "agents" / "echoer.md",
        "---\nname: echoer\ndescription: echoes\ntools: Read, mcp__local__echo\n"
        "model: openai:test\n---\nEcho things.\n",
    )
    loaded = load_agent_file(agent_file)
    assert not [d for d in loaded.diagnostics if d.level != "info"], loaded.diagnostics
    served.responder = _responder([("mcp__local__echo", {"text": "found"})])
    orch = _orchestrator(
        tmp_path,
        mcp_servers={"local": {"command": sys.executable, "args": [SERVER]}},
        main_mcp_servers=[],
    )
    async with orch:
        result = await asyncio.wait_for(orch.delegate("echoer", "go"), 60)
    assert result.status is RunStatus.COMPLETED, result
    offered = {t["function"]["name"] for t in served.requests[0].body["tools"]}
    assert "mcp__local__echo" in offered and "mcp__local__add" not in offered
    assert result.text == "echo from MCP: found"
    assert result.warnings == []


async def test_mcp_server_stderr_goes_to_its_log_never_to_the_terminal(
    spawned: SpawnRecorder,
    tmp_path: Path,
    served: ModelServer,
    capfd: pytest.CaptureFixture[str],
) -> None:
    noisy = (
        "import sys\n"
        "for i in range(78): print(f'Traceback line {i} NOISY-SERVER', file=sys.stderr)\n"
        "sys.exit(1)\n"
    )
    _write(
        tmp_path / ".claude" / "agents" / "user.md",
        "---\nname: user\ndescription: uses a broken server\ntools: Read, mcp__noisy__*\n"
        "mcpServers: [noisy]\nmodel: openai:test\n---\nBody\n",
    )
    served.responder = _responder([])
    orch = _orchestrator(
        tmp_path,
        mcp_servers={"noisy": {"command": sys.executable, "args": ["-c", noisy]}},
        main_mcp_servers=[],
    )
    async with orch:
        result = await asyncio.wait_for(orch.delegate("user", "go"), 60)
    assert result.status is RunStatus.COMPLETED, result
    [line] = result.warnings
    assert "MCP server 'noisy' failed to start" in line and "its output is in " in line, line
    log = Path(line.split("its output is in ")[1].strip())
    try:
        assert log.read_text().count("NOISY-SERVER") == 78
        captured = capfd.readouterr()
        assert "NOISY-SERVER" not in captured.err + captured.out
    finally:
        log.unlink(missing_ok=True)


def test_an_unconfigured_server_named_only_by_tools_is_silent_at_run_time(
    tmp_path: Path,
) -> None:
    from agentcell.orchestrator import AgentDefinition
    from agentcell.orchestrator.config._mcp import McpServerConfig
    from agentcell.orchestrator.mcp_host._servers import agent_mcp_servers

    definition = AgentDefinition(
        name="x", tools=["Read", "mcp__context7__resolve", "mcp__local__echo"], source="p"
    )
    servers, problems = agent_mcp_servers(
        definition, {"local": McpServerConfig(command="srv")}, project_dir=str(tmp_path)
    )
    assert [s.name for s in servers] == ["local"] and problems == []
    assert servers[0].allow == ["mcp__context7__resolve", "mcp__local__echo"]
