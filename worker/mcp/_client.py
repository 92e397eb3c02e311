"""MCP servers of one agent: started in this process's tree, their tools as ``Tool``s.

Each server lives in an asyncio task of its own that holds the SDK's ``Client`` open (the
SDK's transports are anyio task groups: entered and left in one task) until ``stop``.
A stdio server runs under a warden (``_warden.py``), a child process of this one: the
subreaper of everything the server starts, it ends the server's whole tree — helpers that
left with ``setsid`` included — when the server exits, when it is stopped, and when this
process is gone however it ended. A server that exits before it answers is said at once,
with its exit status, not after ``start_timeout_s``. Servers are started before the
sandbox goes up (see ``run_agent``): a process that already runs keeps the view of the
machine it started with, so the server's command, the files named in its arguments and
its runtime stay reachable whatever the agent's own walls are (docs/security.md).

A server that cannot start within its timeout is one line in ``problems``; the agent runs
with its other tools. Which of a server's tools the agent gets was decided by the parent
(``McpServer.allow``/``deny``): the child applies it, and starts no server it was not sent.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import fnmatch
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

import msgspec
from agentcell.protocol import McpServer, RemoteTool, TaskNursery, gather_owned
from agentcell.worker.mcp._host import WalledHost, walled_host
from agentcell.worker.mcp._host import release as release_host
from agentcell.worker.models import ToolSpec
from agentcell.worker.tools import Tool, ToolContext, ToolError, ToolOutput

#: Every MCP tool's name starts so: ``mcp__<server>__<tool>``, Claude Code's spelling.
MCP_PREFIX = "mcp__"
#: How long ``stop`` waits for one server to wind down before it is cancelled.
STOP_TIMEOUT_S = 5.0


#: Runs a stdio server's command and ends its whole tree with it (see the module's text).
#: Run by path: it imports nothing of agentcell. argv: this process's pid (if it is already
#: gone, do not start), a status file for the reason the server stopped, the sub-agent's
#: seccomp filter as ``<seccomp syscall number>:<program hex>`` or ``-`` (none; the server
#: would not otherwise have it: it starts before the sub-agent's walls go up), command, args.
WARDEN = str(Path(__file__).with_name("_warden.py"))


def mcp_tool_name(server: str, tool: str) -> str:
    return f"{MCP_PREFIX}{server}__{tool}"


def tool_granted(name: str, allow: Sequence[str] | None, deny: Sequence[str]) -> bool:
    """Whether a tool named ``name`` passes the patterns (``mcp__s__t``, ``mcp__s__*``)."""
    if any(fnmatch.fnmatchcase(name, pattern) for pattern in deny):
        return False
    return allow is None or any(fnmatch.fnmatchcase(name, pattern) for pattern in allow)


class McpTool(Tool):
    """One tool of a running MCP server, offered with the server's own JSON schema."""

    Args = msgspec.Struct  # unused: the server validates its own arguments

    def __init__(self, server: str, tool: Any, client: Any) -> None:
        self.name = mcp_tool_name(server, tool.name)  # type: ignore[misc]
        self.description = tool.description or f"{tool.name} (MCP server {server})"  # type: ignore[misc]
        self.server = server
        self.remote_name = tool.name
        self._schema = dict(tool.input_schema or {"type": "object"})
        self._schema.setdefault("properties", {})
        self._client = client

    def spec(self) -> ToolSpec:
        return ToolSpec(name=self.name, description=self.description, parameters=self._schema)

    def parse_args(self, arguments: str) -> Any:
        return mcp_arguments(self.name, arguments)

    async def execute(self, args: Any, ctx: ToolContext) -> ToolOutput:
        try:
            return await self.call(args.fields)
        except ServerGone as exc:
            return ToolOutput(f"MCP server {self.server!r}: {exc}", is_error=True)

    async def call(self, fields: dict[str, Any]) -> ToolOutput:
        """The server's answer (its own errors as an error result); raises ``ServerGone``
        when the connection to the server is gone: it exited, or crashed."""
        try:
            result = await self._client.call_tool(self.remote_name, fields)
        except Exception as exc:  # the server died, or answered with a protocol error
            if connection_lost(exc):
                raise ServerGone(_reason(exc)) from None
            reason = str(exc) or type(exc).__name__
            return ToolOutput(f"MCP server {self.server!r}: {reason}", is_error=True)
        return ToolOutput(render_result(result), is_error=bool(result.is_error))


class ServerGone(ConnectionError):
    """The connection to an MCP server is gone (it exited or crashed)."""


def connection_lost(exc: BaseException) -> bool:
    """Whether ``exc`` says the server's connection is gone, not that the server refused
    a request: the SDK's "Connection closed" error, or the transport's own end."""
    import anyio
    from mcp.shared.exceptions import MCPError
    from mcp_types import CONNECTION_CLOSED

    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, MCPError):
        return exc.code == CONNECTION_CLOSED
    gone = (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream, OSError)
    return isinstance(exc, gone)


def mcp_arguments(name: str, arguments: str) -> McpArgs:
    """An MCP tool's arguments as the model gave them (a JSON object); ``ToolError``
    naming the tool for anything else."""
    try:
        decoded = msgspec.json.decode(arguments or "{}")
    except msgspec.DecodeError as exc:
        raise ToolError(f"arguments for {name} are not valid JSON: {exc}") from None
    if not isinstance(decoded, dict):
        raise ToolError(f"arguments for {name} must be a JSON object")
    return McpArgs(decoded)


class McpArgs:
    """Arguments as the model gave them; string fields exposed for permission rules."""

    def __init__(self, fields: dict[str, Any]) -> None:
        self.fields = fields
        for key, value in fields.items():
            if isinstance(value, str) and key.isidentifier() and key != "fields":
                setattr(self, key, value)


def render_result(result: Any) -> str:
    """A ``CallToolResult`` as the text a model reads: text blocks as they are, other
    blocks described (an image is named with its type and size, never dropped silently),
    and the structured value as JSON when there is no text (the SDK also sends a
    structured copy of a text result: it is not said twice)."""
    parts: list[str] = []
    for block in result.content or []:
        kind = getattr(block, "type", "")
        if kind == "text":
            parts.append(block.text)
        elif kind in ("image", "audio"):
            size = _decoded_size(getattr(block, "data", ""))
            parts.append(f"[{kind} {getattr(block, 'mime_type', '?')}, {size} bytes: not shown]")
        elif kind == "resource_link":
            parts.append(f"[resource link {block.uri}{_named(block)}]")
        elif kind == "resource":
            resource = block.resource
            text = getattr(resource, "text", None)
            parts.append(text if text is not None else f"[binary resource {resource.uri}]")
        else:
            parts.append(f"[{kind or 'unknown'} content: not shown]")
    structured = getattr(result, "structured_content", None)
    has_text = any(getattr(block, "type", "") == "text" for block in result.content or [])
    if structured is not None and not has_text:
        parts.append(msgspec.json.encode(structured).decode())
    return "\n".join(parts) if parts else "(no output)"


def _named(block: Any) -> str:
    name = getattr(block, "name", "")
    return f" ({name})" if name else ""


def _decoded_size(data: str) -> int:
    try:
        return len(base64.b64decode(data, validate=False))
    except (ValueError, TypeError):
        return len(data)


class McpServers:
    """The MCP servers of one agent: ``start`` them, use ``tools``, ``stop`` them."""

    def __init__(
        self,
        servers: Sequence[McpServer],
        *,
        workdir: str = ".",
        seccomp: str = "-",
        log_prefix: str = "",
        walled: bool = False,
        max_processes: int | None = None,
    ) -> None:
        self.seccomp = seccomp  # the filter stdio servers start under (see WARDEN)
        # ``walled``: each stdio server behind a walled host of its own (``_host.py``),
        # for servers the parent shares; an agent's own are walled by the agent around them.
        self.walled = walled
        self.max_processes = max_processes
        self._hosts: dict[str, WalledHost] = {}
        self.missing_walls: list[str] = []  # what a walled host could not have here
        self.lost = ""  # why a call found its server gone ("" while none did)
        # A stdio server's stderr goes to ``<log_prefix><name>.log`` (a temp file when
        # empty), never to the user's terminal: some print pages of tracebacks.
        self.log_prefix = log_prefix
        self.logs: dict[str, str] = {}
        self._temporary_logs: set[str] = set()  # the servers whose log is a temp file
        self.servers = list(servers)
        self.workdir = workdir
        self.tools: list[Tool] = []
        self.problems: list[str] = []
        self.started: list[str] = []
        self._stopping = asyncio.Event()
        self._servers = TaskNursery("MCP servers")  # one task per server, holding its client
        # Each server's task, and the future its listing comes in.
        self._tasks: dict[asyncio.Task[Any], asyncio.Future[Any]] = {}
        self._status_dir = ""

    async def start(self) -> None:
        """Start every server side by side; each one that fails is a line in ``problems``
        (in the order the servers were given, however fast each one fails)."""
        # Where each warden says why its server stopped; only read while starting (in a
        # sub-agent, the walls go up right after), so removed then.
        self._status_dir = tempfile.mkdtemp(prefix="agentcell-mcp-")
        await self._servers.open()
        try:
            outcomes = await gather_owned(*(self._start_one(server) for server in self.servers))
        except BaseException:
            # A start given up (its run ended first): its servers end with it, no task
            # of theirs left for the loop to find at its end.
            await self.stop()
            raise
        finally:
            shutil.rmtree(self._status_dir, ignore_errors=True)
        for server, (tools, problem) in zip(self.servers, outcomes, strict=True):
            if problem:
                self.problems.append(problem)
            else:
                self.started.append(server.name)
                self.tools += tools
                self._drop_temporary_log(server.name)

    def _drop_temporary_log(self, name: str) -> None:
        """A started server's temp log is named nowhere: unlink it now, while it still can
        be (a sub-agent's walls, up next, leave it no right to remove a file in /tmp); the
        server writes on into the open file. A failed server's log stays: its line names it."""
        if name in self._temporary_logs:
            with contextlib.suppress(OSError):
                os.unlink(self.logs.pop(name))

    async def _start_one(self, server: McpServer) -> tuple[list[Tool], str]:
        ready: asyncio.Future[tuple[Any, list[Any]]] = asyncio.get_running_loop().create_future()
        task = self._servers.start(self._serve(server, ready), name=f"mcp:{server.name}")
        self._tasks[task] = ready
        try:
            client, listed = await asyncio.wait_for(
                asyncio.shield(ready), timeout=server.start_timeout_s
            )
        except TimeoutError:
            task.cancel()
            await asyncio.wait({task}, timeout=STOP_TIMEOUT_S)
            return [], (
                f"MCP server {server.name!r} did not start within {server.start_timeout_s:g} s: "
                "its tools are not available (check its command, or raise start_timeout_s)"
                + self._log_hint(server.name)
            )
        except Exception as exc:  # any failure to start is reported, not raised
            reason = self._stopped_because(server) or _reason(exc)
            return [], (
                f"MCP server {server.name!r} failed to start ({reason}): "
                "its tools are not available" + self._log_hint(server.name)
            )
        tools = [McpTool(server.name, tool, client) for tool in listed]
        return [t for t in tools if tool_granted(t.name, server.allow, server.deny)], ""

    def _status_path(self, server: McpServer) -> str:
        return os.path.join(self._status_dir, f"{self.servers.index(server)}.status")

    def _stopped_because(self, server: McpServer) -> str:
        """What the warden said of a server that stopped while starting ("" if nothing)."""
        try:
            with open(self._status_path(server), errors="replace") as handle:
                return " ".join(handle.read(500).split())
        except OSError:
            return ""

    def _log_hint(self, name: str) -> str:
        log = self.logs.get(name)
        if log and name in self._temporary_logs and _empty(log):
            # An empty temp log names nothing worth reading: gone now, while it can be.
            self._drop_temporary_log(name)
            return ""
        return f"; its output is in {log}" if log else ""

    def _open_log(self, server: McpServer, stack: contextlib.AsyncExitStack) -> TextIO | None:
        """The file a stdio server's stderr goes to (None for an http server)."""
        if server.type == "http":
            return None
        name = re.sub(r"[^A-Za-z0-9._-]", "_", server.name)[:64] or "server"
        if self.log_prefix:
            path = f"{self.log_prefix}{name}.log"
            # Never through a link: a folder others can write may hold one to any file.
            flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC | os.O_NOFOLLOW
            fd = os.open(path, flags, 0o600)
        else:
            fd, path = tempfile.mkstemp(prefix=f"agentcell-mcp-{name}-", suffix=".log")
            self._temporary_logs.add(server.name)
        log = stack.enter_context(os.fdopen(fd, "a", encoding="utf-8", errors="replace"))
        self.logs[server.name] = path
        return log

    async def _serve(self, server: McpServer, ready: asyncio.Future[Any]) -> None:
        try:
            async with contextlib.AsyncExitStack() as stack:
                log = self._open_log(server, stack)
                host = self._host_for(server)
                client = await stack.enter_async_context(
                    _client(
                        server,
                        stack,
                        self.workdir,
                        self._status_path(server),
                        seccomp=host.seccomp if host else self.seccomp,
                        log=log,
                        launcher=host.launcher if host else (),
                    )
                )
                tools: list[Any] = []
                cursor: str | None = None
                while True:  # every page of the listing
                    page = await client.list_tools(cursor=cursor)
                    tools += page.tools
                    cursor = page.next_cursor
                    if not cursor:
                        break
                ready.set_result((client, tools))
                await self._stopping.wait()
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(exc if isinstance(exc, Exception) else ConnectionError())
                # Heard by ``_start_one`` if it still waits; a start given up (the run
                # ended while the server was starting) has nobody to hear it, and asyncio
                # would print the loss on the person's terminal.
                ready.exception()
            if not isinstance(exc, Exception):
                raise

    def _host_for(self, server: McpServer) -> WalledHost | None:
        """A walled host for a stdio server of a walled set (None: it needs none)."""
        if not self.walled or server.type == "http":
            return None
        host = self._hosts[server.name] = walled_host(self.max_processes)
        self.missing_walls = host.missing
        return host

    def listing(self) -> list[RemoteTool]:
        """The started servers' tools, each under its server's own name."""
        return [
            RemoteTool(
                name=t.remote_name, description=t.description, parameters=t.spec().parameters
            )
            for t in self.tools
            if isinstance(t, McpTool)
        ]

    async def call(self, name: str, fields: dict[str, Any]) -> ToolOutput:
        """Call the tool ``name`` (``mcp__server__tool``) with ``fields``; a call that finds
        its server gone says so, and sets ``lost``."""
        tool = next((t for t in self.tools if t.name == name and isinstance(t, McpTool)), None)
        if tool is None:
            return ToolOutput(f"no MCP tool {name!r} here", is_error=True)
        try:
            return await tool.call(fields)
        except ServerGone as exc:
            self.lost = str(exc) or "its connection closed"
            return ToolOutput(f"MCP server {tool.server!r}: {self.lost}", is_error=True)

    #: Whether a tool name passes a grant's patterns (the parent checks calls with it).
    granted = staticmethod(tool_granted)
    #: A tool call's JSON arguments, parsed as an MCP tool's are.
    arguments = staticmethod(mcp_arguments)

    async def stop(self) -> None:
        """Close every connection (a stdio server's process is ended by the SDK)."""
        self._stopping.set()
        for task, ready in self._tasks.items():
            if not ready.done():  # still starting: nothing to close gracefully, end it now
                task.cancel()
        if self._tasks:
            _, pending = await asyncio.wait(self._tasks, timeout=STOP_TIMEOUT_S)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.wait(pending, timeout=STOP_TIMEOUT_S)
        if all(task.done() for task in self._tasks):  # else one ignored its cancel: left be
            await self._servers.aclose()
        for host in self._hosts.values():  # its cap and temp folder, once it is gone
            release_host(host)
        self._hosts.clear()
        for name, path in list(self.logs.items()):  # an empty log tells nobody anything
            with contextlib.suppress(OSError):
                if _empty(path):
                    os.unlink(path)
                    del self.logs[name]  # named nowhere from here on

    def report(self) -> str:
        """One line for the result: which servers run, and what went wrong."""
        parts = []
        if self.started:
            parts.append(f"started {', '.join(self.started)} ({len(self.tools)} tools)")
        parts += self.problems
        return "; ".join(parts)


def _client(
    server: McpServer,
    stack: contextlib.AsyncExitStack,
    workdir: str,
    status_file: str = "-",
    *,
    seccomp: str = "-",
    log: TextIO | None = None,
    launcher: Sequence[str] = (),
) -> Any:
    """The SDK client for one server (imported here: only runs with servers pay for it)."""
    from mcp import Client, StdioServerParameters
    from mcp.client.stdio import stdio_client

    if server.type == "http":
        from mcp.client.streamable_http import streamable_http_client
        from mcp.shared._httpx_utils import create_mcp_http_client

        http = create_mcp_http_client(headers=dict(server.headers) or None)
        stack.push_async_callback(http.aclose)
        return Client(streamable_http_client(server.url, http_client=http))
    if shutil.which(server.command) is None:  # said here: behind the warden it is one step on
        raise FileNotFoundError(f"no such command: {server.command}")
    params = StdioServerParameters(
        command=sys.executable,
        args=[
            *launcher,
            WARDEN,
            str(os.getpid()),
            status_file,
            seccomp,
            server.command,
            *server.args,
        ],
        env=dict(server.env) or None,
        cwd=os.path.realpath(workdir),
    )
    return Client(params if log is None else stdio_client(params, errlog=log))


def _reason(exc: BaseException) -> str:
    """The innermost useful message (anyio wraps failures in exception groups)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def _empty(path: str) -> bool:
    try:
        return os.stat(path).st_size == 0
    except OSError:
        return False
