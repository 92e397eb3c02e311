"""MCP servers per agent: a real stdio server (tests/support/mcp_server.py, written with the
``mcp`` package's server API) used by a real child through the local model server."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import thread_attack_tools
from agentcell.orchestrator import AgentDefinition, Orchestrator, Settings
from agentcell.orchestrator.config._load import load_settings
from agentcell.orchestrator.config._mcp import McpServerConfig
from agentcell.orchestrator.config._trust import trust
from agentcell.orchestrator.mcp_host._servers import agent_mcp_servers
from agentcell.protocol import McpServer, RunStatus
from agentcell.worker.mcp._client import tool_granted
from conftest import SpawnRecorder
from mcp_http import serve_mcp_http
from model_servers import Call, ModelServer, Reply
from places import SUPPORT

from agentcell.testing import FunctionModel, reply, tool_call, tool_results

SERVER = str(SUPPORT / "mcp_server.py")
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
        assert result.status is RunStatus.COMPLETED, result.error
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
        pid, parent = map(int, marker.read_text().split())
        assert parent == result.pid != os.getpid()
        assert not _alive(pid)
    finally:
        outside.unlink(missing_ok=True)


async def test_a_server_that_fails_to_start_is_one_line_and_the_agent_runs_on(
    spawned: SpawnRecorder, tmp_path: Path, served: ModelServer
) -> None:
    served.responder = calls_then_report([("mcp__good__echo", {"text": "still here"})])
    never_answers = {"command": sys.executable, "args": ["-c", "import sys; sys.stdin.read()"]}
    agent = AgentDefinition(
        name="helper",
        description="uses MCP",
        mcp_servers=[
            {"good": stdio()},
            {"missing": {"command": str(tmp_path / "no-such-server")}},
            {"quits": {"command": sys.executable, "args": ["-c", "pass"]}},
            {"silent": {**never_answers, "start_timeout_s": 1}},
        ],
        model="openai:test",
        source="programmatic",
    )
    async with orchestrator(tmp_path, [agent]) as orch:
        result = await asyncio.wait_for(orch.delegate("helper", "go"), 60)
    assert result.status is RunStatus.COMPLETED, result
    assert result.text == "echo from MCP: still here"
    assert [line.split("'")[1] for line in result.warnings] == ["missing", "quits", "silent"]
    assert (
        f"failed to start (no such command: {tmp_path / 'no-such-server'})" in (result.warnings[0])
    )
    assert "did not start within 1 s" in result.warnings[2]
    assert all(line.count("\n") == 0 for line in result.warnings)
    # The model that asked for the sub-agent reads each line with the result.
    assert "\nwarning: MCP server 'missing' failed to start" in result.render()
    assert [n for n in offered(served.requests[0]) if n.startswith("mcp__")] == [
        f"mcp__good__{tool}"
        for tool in ("echo", "add", "fail", "picture", "read_outside", "write_here", "crash")
        + ("whoami", "hold")
    ]


SAYS_WHY_AND_QUITS = "import sys; print('no config found', file=sys.stderr); sys.exit(3)"


async def test_without_a_run_folder_only_a_failed_servers_temp_log_is_kept(
    spawned: SpawnRecorder, tmp_path: Path, served: ModelServer
) -> None:
    tag = uuid.uuid4().hex[:8]  # this test's servers' logs, whatever else runs beside it
    good, quits, mute = f"good{tag}", f"quits{tag}", f"mute{tag}"
    served.responder = calls_then_report([(f"mcp__{good}__echo", {"text": "tidy"})])
    agent = AgentDefinition(
        name="helper",
        description="uses MCP",
        mcp_servers=[
            {good: stdio()},
            {quits: {"command": sys.executable, "args": ["-c", SAYS_WHY_AND_QUITS]}},
            {mute: {"command": sys.executable, "args": ["-c", "import sys; sys.exit(3)"]}},
        ],
        model="openai:test",
        source="programmatic",
    )
    async with orchestrator(tmp_path, [agent]) as orch:
        result = await asyncio.wait_for(orch.delegate("helper", "go"), 60)
    temp = Path(tempfile.gettempdir())
    kept = list(temp.glob(f"agentcell-mcp-{quits}-*.log"))
    try:
        assert result.status is RunStatus.COMPLETED, result
        assert result.text == "echo from MCP: tidy"
        # The started server's log went while the sub-agent could still remove it (its
        # walls leave it no right to, later); the failed one's is named in its line.
        assert list(temp.glob(f"agentcell-mcp-{good}-*.log")) == []
        said, silent = result.warnings
        assert len(kept) == 1 and f"its output is in {kept[0]}" in said, (kept, said)
        assert "no config found" in kept[0].read_text()
        # A failed server that wrote nothing: its empty log is neither named nor left.
        assert "its output is in" not in silent, silent
        assert list(temp.glob(f"agentcell-mcp-{mute}-*.log")) == []
    finally:
        for log in kept:
            log.unlink()


async def test_a_child_gets_only_the_servers_and_tools_its_definition_names(
    spawned: SpawnRecorder, tmp_path: Path, served: ModelServer
) -> None:
    served.responder = calls_then_report(
        [("mcp__local__echo", {"text": "ok"}), ("mcp__local__add", {"a": 1, "b": 1})]
    )
    plain = AgentDefinition(
        name="plain", description="names no server", model="openai:test", tools=["read_file"]
    )
    narrowed = AgentDefinition(
        name="narrowed",
        description="one server, some tools",
        tools=["read_file", "mcp__local__echo", "mcp__local__add"],
        mcp_servers=["local", "unconfigured"],
        model="openai:test",
    )
    orch = orchestrator(
        tmp_path,
        [plain, narrowed],
        mcp_servers={"local": stdio()},
        main_mcp_servers=[],
        deny_rules=["mcp__local__a*"],  # a rule pattern over MCP tool names
    )
    async with orch:
        first = await asyncio.wait_for(orch.delegate("plain", "go"), 60)
        second = await asyncio.wait_for(orch.delegate("narrowed", "go"), 60)
    assert first.status is RunStatus.COMPLETED and second.status is RunStatus.COMPLETED
    assert sorted(offered(served.requests[0])) == ["read_file"]
    assert sorted(offered(served.requests[-1])) == [
        "mcp__local__add",
        "mcp__local__echo",
        "read_file",
    ]
    echo, added = second.text.split(SEP)
    assert echo == "echo from MCP: ok"
    assert "denied by the rule mcp__local__a*" in added
    assert second.warnings == [
        "MCP server 'unconfigured' is not configured (configured: local): add "
        "[mcp_servers.unconfigured] to your config or .mcp.json; it is not started"
    ]


async def test_the_main_agent_has_the_configured_servers_in_the_parent(tmp_path: Path) -> None:
    def main(messages: list[Any], tools: list[Any]) -> Any:
        results = tool_results(messages)
        if not results:
            assert "mcp__local__echo" in [t.name for t in tools]
            return reply("", tool_call("mcp__local__echo", text="main"))
        return results[0].content

    marker = tmp_path / "main-server.pid"
    orch = Orchestrator(
        model=FunctionModel(main, name="function:main"),
        settings=Settings(
            approval="allow",
            max_workers=1,
            warm_spares=0,
            mcp_servers={"local": McpServerConfig.model_validate(stdio(str(marker)))},
        ),
        workdir=tmp_path,
        load_agent_files=False,
        record=False,
    )
    async with orch:
        report = await asyncio.wait_for(orch.run("go"), 60)
    assert report.final_text == "echo from MCP: main", report
    pid, parent = map(int, marker.read_text().split())
    assert parent == os.getpid()  # the main agent's servers run in the parent's tree
    assert not _alive(pid)  # stopped at the end of the run


def test_allow_and_deny_patterns_over_mcp_tool_names() -> None:
    assert tool_granted("mcp__gh__list", None, [])
    assert tool_granted("mcp__gh__list", ["mcp__gh__*"], [])
    assert not tool_granted("mcp__gh__list", ["mcp__gh__list"], ["mcp__gh__*"])
    assert not tool_granted("mcp__other__list", ["mcp__gh__*"], [])


def test_which_servers_a_definition_gets(tmp_path: Path) -> None:
    configured = {"gh": McpServerConfig(command="gh-mcp")}
    project_file = str(tmp_path / ".claude" / "agents" / "x.md")
    inline = {"mine": McpServerConfig(command="my-mcp", args=["--x"])}

    def definition(source: str, **fields: Any) -> AgentDefinition:
        return AgentDefinition(name="x", mcp_servers=["gh", inline], source=source, **fields)

    servers, problems = agent_mcp_servers(
        definition(project_file, tools=["mcp__gh"]),
        configured,
        project_dir=str(tmp_path),
        trusted=lambda _: False,
    )
    # An untrusted project's agent file may name configured servers, not bring its own.
    assert [s.name for s in servers] == ["gh"] and servers[0].allow == ["mcp__gh__*"]
    assert "'mine' (inline in" in problems[0] and "not trusted" in problems[0]
    servers, problems = agent_mcp_servers(
        definition(project_file), configured, project_dir=str(tmp_path), trusted=lambda _: True
    )
    assert problems == [] and servers[1] == McpServer(name="mine", command="my-mcp", args=["--x"])
    assert servers[1].allow is None  # no allowlist: every tool of the server
    servers, _ = agent_mcp_servers(
        definition("programmatic"), {}, project_dir=str(tmp_path), trusted=lambda _: False
    )
    assert [s.name for s in servers] == ["mine"]


def test_project_servers_are_used_only_in_a_trusted_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    project = tmp_path / "project"
    project.mkdir()
    env = {"XDG_CONFIG_HOME": str(home / ".config")}
    (project / ".mcp.json").write_text(
        json.dumps(
            {
                "mcpServers": {
                    "files": {"command": "npx", "args": ["-y", "files-mcp"], "cwd": "x"},
                    "web": {"type": "http", "url": "http://127.0.0.1:9/mcp"},
                    "broken": {"type": "http"},
                }
            }
        )
    )
    (project / "agentcell.toml").write_text('[mcp_servers.tool]\ncommand = "tool-mcp"\n')
    notices: list[str] = []
    settings, _ = load_settings(workdir=project, home=home, env=env, notices=notices)
    assert settings.mcp_servers == {}
    assert any(".mcp.json: MCP servers ignored" in n and "not trusted" in n for n in notices)
    assert any("mcp_servers ignored" in n for n in notices)
    trust(project, home / ".config" / "agentcell" / "config.toml")
    notices.clear()
    settings, _ = load_settings(workdir=project, home=home, env=env, notices=notices)
    assert sorted(settings.mcp_servers) == ["files", "tool", "web"]
    assert settings.mcp_servers["web"].type == "http"
    assert any("'broken' skipped" in n and "needs a url" in n for n in notices)
    assert any("'files': cwd not used" in n for n in notices)


@pytest.fixture
def http_mcp() -> Iterator[str]:
    """The test server over streamable HTTP on 127.0.0.1 (``mcp_http``): its URL."""
    with serve_mcp_http() as served:
        yield served.url


async def test_a_sub_agent_reaches_an_http_server_through_its_sandbox(
    spawned: SpawnRecorder, tmp_path: Path, served: ModelServer, http_mcp: str
) -> None:
    served.responder = calls_then_report(
        [("mcp__web__echo", {"text": "over http"}), ("mcp__web__add", {"a": 4, "b": 5})]
    )
    agent = AgentDefinition(
        name="helper",
        description="uses MCP over HTTP",
        mcp_servers=[{"web": {"type": "http", "url": http_mcp, "headers": {"X-Test": "1"}}}],
        model="openai:test",
    )
    async with orchestrator(tmp_path, [agent]) as orch:
        result = await asyncio.wait_for(orch.delegate("helper", "go"), 60)
    assert result.status is RunStatus.COMPLETED, result.error
    assert result.warnings == []
    echo, added = result.text.split(SEP)
    assert echo == "echo from MCP: over http"
    assert json.loads(added) == {"sum": 9}
    # The sandboxed child may connect to the server's port, and to no other: not even the
    # model's (the parent sends its model requests). A new connection after the walls went
    # up: the SDK reconnects when one drops.
    port = http_mcp.split(":")[2].split("/", maxsplit=1)[0]
    assert result.sandbox.startswith("workspace"), result.sandbox
    own = result.sandbox.split("own tcp: ")[1].split(", ")[0].split(",")
    assert own == [port], result.sandbox


async def test_a_tool_after_an_http_servers_start_runs_behind_the_walls(
    spawned: SpawnRecorder, tmp_path: Path, served: ModelServer, http_mcp: str
) -> None:
    # Connecting to an http server before the walls looks its name up on the event
    # loop's executor, which starts a thread there; Landlock would not cover that thread,
    # and a plain tool run later on the same executor would read past the walls.
    work, secret = thread_attack_tools.workdir_and_outside_secret(tmp_path)
    served.responder = calls_then_report([("pool_read", {"path": str(secret)})])
    agent = AgentDefinition(
        name="helper",
        description="uses MCP over HTTP and a plain tool",
        tools=["pool_read"],
        # By name: an address alone is connected to without a look-up.
        mcp_servers=[{"web": {"type": "http", "url": http_mcp.replace("127.0.0.1", "localhost")}}],
        model="openai:test",
    )
    orch = thread_attack_tools.one_worker(work, agent, thread_attack_tools.pool_read)
    async with orch:
        result = await asyncio.wait_for(orch.delegate("helper", "go"), 60)
    assert result.status is RunStatus.COMPLETED, result.error
    seen = json.loads(result.text)
    assert seen["refused"] == "Permission denied", seen
    assert seen["thread"].startswith("asyncio-walled"), seen  # the fresh executor's


async def test_a_server_ends_with_a_sub_agent_that_was_killed(
    spawned: SpawnRecorder, tmp_path: Path, served: ModelServer
) -> None:
    # The SDK puts a server in a session of its own; a server that ignores the end of its
    # stdin must still go when its sub-agent is SIGKILLed (the parent-death signal).
    marker = tmp_path / "server.pid"
    served.responder = calls_then_report([("bash", {"command": "kill -9 $PPID"})])
    agent = AgentDefinition(
        name="doomed",
        description="dies",
        tools=["bash"],
        mcp_servers=[{"lingering": stdio(str(marker), env={"MCP_TEST_LINGER": "1"})}],
        model="openai:test",
    )
    async with orchestrator(tmp_path, [agent]) as orch:
        result = await asyncio.wait_for(orch.delegate("doomed", "go"), 60)
    assert result.status is RunStatus.CRASHED, result.error
    pid, parent = map(int, marker.read_text().split())
    assert parent == result.pid
    process = psutil.Process(pid) if psutil.pid_exists(pid) else None
    if process is not None:  # the kill is sent at the sub-agent's death: wait, bounded
        with contextlib.suppress(psutil.NoSuchProcess):
            process.wait(timeout=10)
    assert not _alive(pid)
