"""Which servers are shared and what an agent is offered of them, the listing cache, the
``shared = false`` key, and the shared server's log (``mcp_host/_shared.py``,
``_tool_cache.py``): the parent's decisions, without a sub-agent."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from agentcell.orchestrator import AgentDefinition
from agentcell.orchestrator.config._mcp import McpServerConfig, read_mcp_json
from agentcell.orchestrator.mcp_host._servers import agent_mcp_servers
from agentcell.orchestrator.mcp_host._shared import SharedMcp
from agentcell.orchestrator.mcp_host._tool_cache import ToolCache, server_key
from agentcell.protocol import AgentSpec, RemoteTool
from places import SUPPORT

SERVER = str(SUPPORT / "mcp_server.py")
NOWHERE = McpServerConfig(command="agentcell-no-such-server")  # fails at once if started


def _listing(*names: str) -> list[RemoteTool]:
    return [RemoteTool(name=n, description=f"{n} it", parameters={"type": "object"}) for n in names]


def _spec(definition: AgentDefinition, configured: dict[str, McpServerConfig]) -> AgentSpec:
    servers, _ = agent_mcp_servers(definition, configured, project_dir="/nowhere")
    return AgentSpec(agent_id="a1", agent_type=definition.name, prompt="go", mcp_servers=servers)


async def test_an_agent_is_offered_the_shared_tools_its_grant_allows_and_keeps_the_rest(
    tmp_path: Path,
) -> None:
    cache = ToolCache(tmp_path / "cache")
    configured = {
        "docs": NOWHERE,
        "db": McpServerConfig(command="agentcell-no-such-db"),
        "own": McpServerConfig(command="agentcell-no-such-own", shared=False),
        "inline": McpServerConfig(command="agentcell-no-such-configured"),
    }
    cache.put(configured["docs"], _listing("search", "fetch", "delete"))
    cache.put(configured["db"], _listing("query"))
    definition = AgentDefinition(
        name="reader",
        description="r",
        tools=["read_file", "mcp__docs__*", "mcp__own__*"],
        disallowed_tools=["mcp__docs__delete"],
        mcp_servers=["docs", "own", {"inline": {"command": "agentcell-no-such-inline"}}],
    )
    shared = SharedMcp(configured, workdir=str(tmp_path), cache=cache)
    async with shared.nursery:
        spec = _spec(definition, configured)
        problems = await shared.offer(spec, definition, own_tree=False)
        # A worktree agent starts every server it names itself, in its worktree.
        isolated = _spec(definition, configured)
        assert await shared.offer(isolated, definition, own_tree=True) == []
    assert problems == []
    assert [t.name for t in spec.remote_tools] == ["mcp__docs__search", "mcp__docs__fetch"]
    assert spec.remote_tools[0].description == "search it"
    # Not shared: "shared = false", inline in the definition; "db": not named at all.
    assert [s.name for s in spec.mcp_servers] == ["own", "inline"]
    assert [s.name for s in isolated.mcp_servers] == ["docs", "own", "inline"]
    assert isolated.remote_tools == []
    assert set(shared.servers) == {"docs", "db", "inline"}
    # "inline" is also configured (shared), but the definition's own entry wins: its own.
    assert spec.mcp_servers[1].command == "agentcell-no-such-inline"


async def test_a_listed_server_is_offered_from_the_cache_and_started_for_its_first_call(
    tmp_path: Path,
) -> None:
    starts = tmp_path / "starts"
    config = McpServerConfig(command=sys.executable, args=[SERVER, "--starts", str(starts)])
    cache = ToolCache(tmp_path / "cache")
    first = SharedMcp({"local": config}, workdir=str(tmp_path), cache=cache)
    async with first.nursery:
        listed = await first.servers["local"].listed()
        await first.aclose()
    assert "whoami" in [t.name for t in listed] and len(starts.read_text().split()) == 1
    again = SharedMcp({"local": config}, workdir=str(tmp_path), cache=cache)
    async with again.nursery:
        server = again.servers["local"]
        assert await server.listed() == listed  # at once: nothing awaited a server
        assert server.starts == 0 and server._servers is None  # its start is only queued
        assert server._starting is not None
        await again.started()  # what a warm-up waits for: the server is up
        assert server.starts == 1 and server._servers is not None
        output = await server.call("whoami", {})
        await again.aclose()
    first_pid, second_pid = starts.read_text().split()
    assert output.content == second_pid and second_pid != first_pid
    # Another command line is another server: not read from this listing.
    other = McpServerConfig(command=sys.executable, args=[SERVER, "--start-delay", "0"])
    assert cache.get(other) is None and server_key(other) != server_key(config)


def test_an_upgraded_program_is_another_cache_entry(tmp_path: Path) -> None:
    program = tmp_path / "server"
    program.write_text("#!/bin/sh\n")
    program.chmod(0o755)
    config = McpServerConfig(command=str(program))
    before = server_key(config)
    program.write_text("#!/bin/sh\n# version 2\n")
    assert server_key(config) != before


def test_a_cached_listing_that_is_not_well_formed_or_not_the_users_is_not_used(
    tmp_path: Path,
) -> None:
    cache = ToolCache(tmp_path)
    cache.put(NOWHERE, _listing("search"))
    path = tmp_path / f"{server_key(NOWHERE)}.json"
    assert cache.get(NOWHERE) == _listing("search") and path.stat().st_mode & 0o777 == 0o600
    for planted in (
        b"not json",
        json.dumps([{"name": "x y; rm -rf", "description": "", "parameters": {}}]).encode(),
        json.dumps({"name": "search"}).encode(),
    ):
        path.write_bytes(planted)
        assert cache.get(NOWHERE) is None, planted
    path.unlink()
    path.symlink_to(tmp_path / "elsewhere.json")
    (tmp_path / "elsewhere.json").write_bytes(json.dumps([]).encode())
    assert cache.get(NOWHERE) is None  # a link is not followed
    if os.geteuid() == 0:
        path.unlink()
        cache.put(NOWHERE, _listing("search"))
        os.chown(path, 65534, 65534)
        assert cache.get(NOWHERE) is None  # written by another user


def test_shared_false_is_read_from_the_config_and_from_mcp_json(tmp_path: Path) -> None:
    assert McpServerConfig(command="x").shared is True
    (tmp_path / ".mcp.json").write_text(
        json.dumps(
            {"mcpServers": {"own": {"command": "x", "shared": False}, "docs": {"command": "y"}}}
        )
    )
    servers, notes = read_mcp_json(tmp_path / ".mcp.json")
    assert notes == []
    configs = {name: McpServerConfig(**entry) for name, entry in servers.items()}
    assert not configs["own"].shared and configs["docs"].shared


async def test_a_servers_log_is_never_written_through_a_link(tmp_path: Path) -> None:
    target = tmp_path / "someone-elses-file"
    target.write_text("untouched\n")
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "local.log").symlink_to(target)
    config = McpServerConfig(command=sys.executable, args=[SERVER])
    shared = SharedMcp({"local": config}, workdir=str(tmp_path), log_dir=Path("logs"))
    shared.cache = ToolCache(tmp_path / "cache")
    async with shared.nursery:
        said = await shared.servers["local"].listed()
        await shared.aclose()
    assert isinstance(said, str) and "failed to start" in said, said
    assert target.read_text() == "untouched\n"


async def test_an_agent_without_tools_inherits_the_main_agents_shared_servers(
    tmp_path: Path,
) -> None:
    """As in Claude Code, where such an agent inherits every tool, MCP's included: here
    only through the shared servers, never a start of every server per agent."""
    cache = ToolCache(tmp_path / "cache")
    configured = {"docs": NOWHERE, "db": McpServerConfig(command="agentcell-no-such-db")}
    configured["mine"] = McpServerConfig(command="agentcell-no-such-mine", shared=False)
    cache.put(configured["docs"], _listing("search", "delete"))
    cache.put(configured["db"], _listing("query"))
    everything = AgentDefinition(
        name="all", description="a", disallowed_tools=["mcp__docs__delete"], mcp_servers=[]
    )
    narrowed = AgentDefinition(name="some", description="s", tools=["read_file"])
    main = ["docs", "mine"]  # the main agent's servers: "db" is not one
    shared = SharedMcp(configured, workdir=str(tmp_path), cache=cache, inherited=main)
    async with shared.nursery:
        specs = [_spec(everything, configured), _spec(narrowed, configured)]
        await shared.offer(specs[0], everything, own_tree=False)
        await shared.offer(specs[1], narrowed, own_tree=False)
        isolated = _spec(everything, configured)
        await shared.offer(isolated, everything, own_tree=True)
    assert [t.name for t in specs[0].remote_tools] == ["mcp__docs__search"]
    assert specs[0].mcp_servers == []  # "mine" is not shared: never started per agent
    assert specs[1].remote_tools == [] and isolated.remote_tools == []


async def test_a_log_folder_linked_out_of_the_workdir_is_not_used(tmp_path: Path) -> None:
    work, outside = tmp_path / "work", tmp_path / "outside"
    work.mkdir()
    outside.mkdir()
    (work / "logs").symlink_to(outside)
    shared = SharedMcp({}, workdir=str(work), log_dir=Path("logs"))
    assert shared.log_prefix() == ""  # a temp file instead, said once
    assert list(outside.iterdir()) == []


def test_agents_list_shows_the_shared_servers_an_agent_without_tools_inherits(
    tmp_path: Path,
) -> None:
    from agentcell.orchestrator.cli._agents_cmd import _Here, offered_tools

    here = _Here(tmp_path, ())
    here.settings = here.settings.model_copy(
        update={
            "mcp_servers": {"docs": NOWHERE, "mine": NOWHERE.model_copy(update={"shared": False})}
        }
    )
    bare = AgentDefinition(name="bare", description="b")
    named = AgentDefinition(name="named", description="n", tools=["read_file"])
    assert [t for t in offered_tools(bare, here, "openai:m") if t.startswith("mcp__")] == [
        "mcp__docs__*"
    ]
    assert not [t for t in offered_tools(named, here, "openai:m") if t.startswith("mcp__")]
