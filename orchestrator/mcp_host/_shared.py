"""MCP servers the parent starts once and shares with every agent of the run.

A configured server (``[mcp_servers.NAME]``, a trusted project's ``.mcp.json``) is
shared unless its config says ``shared = false``, a definition names it inline, or the
agent runs in a worktree of its own (then the agent starts its own, in its sandbox, as
before: ``_servers.agent_mcp_servers``). A shared stdio server runs behind a walled host
(``worker/mcp/_host.py``: a process cap, a user namespace, no capability, the seccomp
filter, a private temp folder), and the parent holds its connection: a sub-agent is
offered the server's tools as parent-side tools (``RemoteTool``), and each call comes
as a signed ``DelegateRequest`` that ``answer`` checks against what that agent was
offered (its grant: server, tool, allow/deny patterns) before the server sees it. A
sub-agent so holds no server process, none of the server's credentials and no socket.

Servers start on first need, side by side; a listing cached from an earlier run
(``_tool_cache``) is offered at once, and the server starts meanwhile, in the
background. A server that stops while it runs (a crash) is started again once, and said
so; after a second stop its tools answer with an error naming the server and its log.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import msgspec
from agentcell.orchestrator.config._mcp import McpServerConfig
from agentcell.orchestrator.config._settings import Settings
from agentcell.orchestrator.definitions._model import AgentDefinition
from agentcell.orchestrator.definitions._tool_policy import mcp_patterns
from agentcell.orchestrator.journal._journal import Journal
from agentcell.orchestrator.mcp_host._servers import wire_server
from agentcell.orchestrator.mcp_host._tool_cache import ToolCache
from agentcell.protocol import (
    AgentSpec,
    DelegateReply,
    DelegateRequest,
    McpServer,
    RemoteTool,
    TaskNursery,
    gather_owned,
)
from agentcell.worker import MCP_PREFIX, McpServers, OutsideRoot, real_folder
from agentcell.worker.models import ToolSpec
from agentcell.worker.tools import Tool, ToolContext, ToolError, ToolOutput

log = logging.getLogger("agentcell")

#: How often a shared server is started in all: the first start and one restart.
MAX_STARTS = 2
#: Where a recorded orchestrator's shared servers log (``NAME.log``), in its workdir.
SHARED_LOGS = Path(".agentcell") / "mcp-logs"


def shared_tool_name(server: str, tool: str) -> str:
    return f"{MCP_PREFIX}{server}__{tool}"


class SharedServer:
    """One configured server, started at most ``MAX_STARTS`` times for the whole run."""

    def __init__(self, name: str, config: McpServerConfig, place: SharedMcp) -> None:
        self.name = name
        self.config = config
        self.place = place
        self.listing: list[RemoteTool] | None = None  # its tools (server's own names)
        self.starts = 0
        self.gave_up = ""  # why it is not started again ("" while it may be)
        self._servers: McpServers | None = None
        self._starting: asyncio.Task[str | None] | None = None

    async def listed(self) -> list[RemoteTool] | str:
        """Its tools, or the line saying why it has none. A cached listing is served at
        once; the server then starts in the background, for the first call."""
        if self.listing is None and not self.gave_up:
            cached = self.place.cache.get(self.config)
            if cached is None:
                problem = await self._ready()
                if problem:
                    return problem
            else:
                self.listing = cached
                self._start_soon()
        return self.listing if self.listing is not None else self.gave_up

    async def call(self, tool: str, fields: dict[str, Any]) -> ToolOutput:
        """Call ``tool`` (the server's own name) with ``fields``, starting the server
        first if it is not running."""
        problem = await self._ready()
        servers = self._servers
        if problem or servers is None:
            return ToolOutput(problem or f"MCP server {self.name!r} is not running", is_error=True)
        output = await servers.call(shared_tool_name(self.name, tool), fields)
        if servers.lost:
            return ToolOutput(await self._stopped(servers, servers.lost), is_error=True)
        if output.is_error and not any(t.name == tool for t in servers.listing()):
            names = ", ".join(sorted(t.name for t in servers.listing())) or "none"
            return ToolOutput(
                f"MCP server {self.name!r} has no tool {tool!r} (its tools: {names})",
                is_error=True,
            )
        return output

    async def _ready(self) -> str:
        """Started (once, whoever asks first); "" or why it is not."""
        if self._servers is not None:
            return ""
        if self.gave_up:
            return self.gave_up
        self._start_soon()
        assert self._starting is not None
        # Shielded: a caller cancelled while it waits (its sub-agent ended) leaves the
        # start to the others; the task belongs to the run's nursery.
        return await asyncio.shield(self._starting) or self.gave_up

    def _start_soon(self) -> None:
        idle = self._starting is None or (self._starting.done() and self._servers is None)
        if idle and not self.gave_up:
            self._starting = self.place.nursery.start(self._start(), name=f"mcp:{self.name}")

    async def _start(self) -> str:
        self.starts += 1
        place = self.place
        servers = McpServers(
            [wire_server(self.name, self.config, allow=None, deny=[])],
            workdir=str(place.workdir),
            log_prefix=place.log_prefix(),
            walled=True,
            max_processes=place.max_processes,
        )
        await servers.start()
        if servers.problems:
            await servers.stop()
            self.gave_up = servers.problems[0]
            return self.gave_up
        if servers.missing_walls:
            log.warning(
                "MCP server %r runs without: %s", self.name, ", ".join(servers.missing_walls)
            )
        listing = servers.listing()
        if listing != self.listing:
            place.cache.put(self.config, listing)
        self.listing = listing
        self._servers = servers
        return ""

    async def _stopped(self, servers: McpServers, reason: str) -> str:
        """A call found the server gone: it is stopped for good or started again (once)."""
        if servers is self._servers:  # the first call to see it
            self._servers = None
            await servers.stop()
            log_path = servers.logs.get(self.name)  # an empty one is gone with its server
            where = f" (its log: {log_path})" if log_path else ""
            if self.starts >= MAX_STARTS:
                self.gave_up = (
                    f"MCP server {self.name!r} stopped twice ({reason}) and is not started "
                    f"again: its tools are unavailable for the rest of the run{where}"
                )
                log.warning("%s", self.gave_up)
            else:
                log.warning(
                    "MCP server %r stopped (%s); starting it again once%s", self.name, reason, where
                )
                self._start_soon()
        if self.gave_up:
            return self.gave_up
        return (
            f"MCP server {self.name!r} stopped during this call ({reason}); it is started "
            "again for the next call (this call may or may not have taken effect)"
        )

    async def stop(self) -> None:
        servers, self._servers = self._servers, None
        if servers is not None:
            await servers.stop()


class SharedMcp:
    """The run's shared servers, by name; started as agents need them."""

    def __init__(
        self,
        configured: Mapping[str, McpServerConfig],
        *,
        workdir: str,
        log_dir: Path | None = None,  # beneath the workdir (None: temp files)
        max_processes: int | None = None,
        cache: ToolCache | None = None,
        inherited: Sequence[str] = (),
    ) -> None:
        self.workdir = Path(workdir)
        # The main agent's servers: an agent without ``tools`` inherits the shared ones.
        self.inherited = [name for name in inherited if name in configured]
        self.log_dir = log_dir
        self.max_processes = max_processes
        self.cache = cache or ToolCache()
        self.nursery = TaskNursery("shared MCP servers")
        self.servers = {
            name: SharedServer(name, config, self)
            for name, config in configured.items()
            if config.shared
        }

    @classmethod
    def for_settings(cls, settings: Settings, workdir: str) -> SharedMcp:
        """The configured servers, the main agent's (``main_mcp_servers``, by default
        all) inherited by an agent without ``tools``."""
        main = settings.main_mcp_servers
        return cls(
            settings.mcp_servers,
            workdir=workdir,
            max_processes=settings.max_processes,
            inherited=list(settings.mcp_servers) if main is None else main,
        )

    def log_prefix(self) -> str:
        """``<log folder>/`` (``NAME.log`` follows); "" for a temp file (no record, or a
        folder that cannot be made: a link out of the workdir included)."""
        if self.log_dir is None:
            return ""
        try:
            os.close(real_folder(self.workdir, self.workdir / self.log_dir, create=True))
        except (OSError, OutsideRoot) as exc:
            log.warning("MCP server logs cannot go to %s: %s", self.log_dir, exc)
            return ""
        return f"{self.workdir / self.log_dir}/"

    async def open(self) -> None:
        """Ready; the main agent's servers start now, in the background, as a session's
        do in Claude Code: by the first call they are up (a run does not wait for them)."""
        await self.nursery.open()
        for name in self.inherited:
            if name in self.servers:
                self.servers[name]._start_soon()

    async def started(self) -> None:
        """Until every start under way has ended (the bench's warm-up: a long-lived
        parent's servers are up, as its warm spares are)."""
        starting = [s._starting for s in self.servers.values() if s._starting is not None]
        if starting:
            await asyncio.wait(starting)

    async def aclose(self) -> None:
        for server in self.servers.values():
            await server.stop()
        await self.nursery.aclose()

    async def offer(
        self, spec: AgentSpec, definition: AgentDefinition, *, own_tree: bool
    ) -> list[str]:
        """The spec's shared servers turned into parent-side tools, those its grant
        allows; the problems (a server that cannot start), one line each. An agent in a
        worktree of its own (``own_tree``) keeps starting its servers itself, in it.

        An agent without ``tools`` inherits every tool, as in Claude Code: the main
        agent's shared servers too, less its ``disallowedTools`` (never by starting a
        server of its own: a worktree agent inherits none)."""
        if own_tree:
            return []
        inline = {
            name for entry in definition.mcp_servers if isinstance(entry, dict) for name in entry
        }
        shared = [
            server
            for server in spec.mcp_servers
            if server.name in self.servers and server.name not in inline
        ]
        shared += self.inherits(definition, named={s.name for s in spec.mcp_servers})
        if not shared:
            return []
        spec.mcp_servers = [server for server in spec.mcp_servers if server not in shared]
        listings = await gather_owned(*(self.servers[s.name].listed() for s in shared))
        problems: list[str] = []
        for server, listing in zip(shared, listings, strict=True):
            if isinstance(listing, str):
                problems.append(listing)
                continue
            for tool in listing:
                name = shared_tool_name(server.name, tool.name)
                if McpServers.granted(name, server.allow, server.deny):
                    spec.remote_tools.append(msgspec.structs.replace(tool, name=name))
        return problems

    def inherits(self, definition: AgentDefinition, named: set[str]) -> list[McpServer]:
        """The main agent's shared servers an agent without ``tools`` gets, besides
        ``named`` (the servers it names itself)."""
        if definition.tools is not None:
            return []
        deny = mcp_patterns(definition.disallowed_tools)
        return [
            wire_server(name, self.servers[name].config, allow=None, deny=deny)
            for name in self.inherited
            if name in self.servers and name not in named
        ]

    async def main_tools(self, servers: Sequence[McpServer]) -> tuple[list[Tool], list[str]]:
        """The main agent's tools of these shared servers (every tool of each: it runs in
        the parent, under the session's own rules), and the problems, one line each."""
        listings = await gather_owned(*(self.servers[s.name].listed() for s in servers))
        tools: list[Tool] = []
        problems: list[str] = []
        for server, listing in zip(servers, listings, strict=True):
            if isinstance(listing, str):
                problems.append(listing)
            else:
                tools += [SharedTool(self.servers[server.name], tool) for tool in listing]
        return tools, problems

    async def answer(
        self, frame: DelegateRequest, spec: AgentSpec, journal: Journal | None
    ) -> DelegateReply:
        """A sub-agent's call of a shared server's tool: refused unless that agent was
        offered this very tool (its grant, as the parent decided it), else run."""

        def reply(output: ToolOutput) -> DelegateReply:
            return DelegateReply(
                request_id=frame.request_id, content=output.content, is_error=output.is_error
            )

        server, tool = _split(frame.tool)
        # What the parent offered this agent is its grant: only shared servers' tools
        # its definition names and its patterns allow (``offer``) — and nothing else.
        if not any(remote.name == frame.tool for remote in spec.remote_tools):
            why = f"{spec.agent_type} ({spec.agent_id}) was not granted {frame.tool}"
            log.warning("refused a sub-agent's MCP call: %s", why)
            if journal is not None:
                journal.fact("refused", agent=spec.agent_id, tool=frame.tool, why="not granted")
            return reply(ToolOutput(f"permission denied: {why}", is_error=True))
        try:
            arguments = McpServers.arguments(frame.tool, frame.arguments)
        except ToolError as exc:
            return reply(ToolOutput(str(exc), is_error=True))
        return reply(await self.servers[server].call(tool, arguments.fields))


class SharedTool(Tool):
    """A shared server's tool for the main agent, which runs in the parent."""

    Args = msgspec.Struct  # unused: the server validates its own arguments

    def __init__(self, server: SharedServer, tool: RemoteTool) -> None:
        self.name = shared_tool_name(server.name, tool.name)  # type: ignore[misc]
        self.description = tool.description  # type: ignore[misc]
        self._parameters = tool.parameters
        self._server = server
        self._remote_name = tool.name

    def spec(self) -> ToolSpec:
        return ToolSpec(name=self.name, description=self.description, parameters=self._parameters)

    def parse_args(self, arguments: str) -> Any:
        return McpServers.arguments(self.name, arguments)

    async def execute(self, args: Any, ctx: ToolContext) -> ToolOutput:
        return await self._server.call(self._remote_name, args.fields)


def _split(name: str) -> tuple[str, str]:
    """``mcp__SERVER__TOOL`` as (SERVER, TOOL); ("", "") for any other name."""
    if not name.startswith(MCP_PREFIX):
        return "", ""
    server, separator, tool = name.removeprefix(MCP_PREFIX).partition("__")
    return (server, tool) if separator and server and tool else ("", "")
