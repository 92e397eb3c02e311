"""Which MCP servers a sub-agent starts, and which of their tools it may use.

Decided here, in the parent; the child starts exactly the servers in its ``AgentSpec``
and keeps only the tools that pass ``allow``/``deny`` (see worker ``McpServers``). A
server comes from the definition's ``mcpServers``: a name looked up in the configured
servers (``[mcp_servers.NAME]``, a trusted project's ``.mcp.json``), or an inline entry.
An inline entry in an agent file of an untrusted project is not started: it would run a
command of the project's choosing outside the sandbox, without asking.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path

from agentcell.orchestrator.config._load import user_config_path
from agentcell.orchestrator.config._mcp import McpServerConfig
from agentcell.orchestrator.config._trust import is_trusted
from agentcell.orchestrator.definitions._model import AgentDefinition
from agentcell.orchestrator.definitions._tool_policy import mcp_patterns
from agentcell.protocol import McpServer


def wire_server(
    name: str, config: McpServerConfig, *, allow: list[str] | None, deny: list[str]
) -> McpServer:
    return McpServer(
        name=name,
        type=config.type,
        command=config.command,
        args=list(config.args),
        env=dict(config.env),
        url=config.url,
        headers=dict(config.headers),
        allow=allow,
        deny=deny,
        start_timeout_s=config.start_timeout_s,
    )


def project_trusted(project_dir: str) -> bool:
    """Whether the user trusts ``project_dir`` (their own trust list)."""
    try:
        return is_trusted(Path(project_dir), user_config_path())
    except ValueError:
        return False


def from_project(definition: AgentDefinition, project_dir: str) -> bool:
    """Whether the definition was read from a file inside the project folder."""
    if definition.source in ("builtin", "programmatic"):
        return False
    source = os.path.realpath(definition.source)
    root = os.path.realpath(project_dir)
    return source == root or source.startswith(root.rstrip("/") + "/")


def agent_mcp_servers(
    definition: AgentDefinition,
    configured: Mapping[str, McpServerConfig],
    *,
    project_dir: str,
    trusted: Callable[[str], bool] = project_trusted,
) -> tuple[list[McpServer], list[str]]:
    """The servers this sub-agent starts, and one line for each it names but cannot have.

    As in Claude Code, a ``mcp__server__tool`` name in ``tools`` is enough: a configured
    server of that name is started for the agent even when ``mcpServers`` does not name it.
    """
    # A server named only by a tool name and not configured: the agent has no such tool,
    # as in Claude Code (the loader said so once), and no run repeats it.
    by_tools = [name for name in _named_by_tools(definition) if name in configured]
    entries = [*definition.mcp_servers, *by_tools]
    if not entries:
        return [], []
    allow = None if definition.tools is None else mcp_patterns(definition.tools)
    deny = mcp_patterns(definition.disallowed_tools)
    servers: dict[str, McpServer] = {}
    problems: list[str] = []
    inline_ok: bool | None = None
    for entry in entries:
        if isinstance(entry, str):
            config = configured.get(entry)
            if config is None:
                known = ", ".join(sorted(configured)) or "none"
                problems.append(
                    f"MCP server {entry!r} is not configured (configured: {known}): add "
                    f"[mcp_servers.{entry}] to your config or .mcp.json; it is not started"
                )
                continue
            servers[entry] = wire_server(entry, config, allow=allow, deny=deny)
            continue
        if inline_ok is None:
            inline_ok = not from_project(definition, project_dir) or trusted(project_dir)
        for name, config in entry.items():
            if not inline_ok:
                problems.append(
                    f"MCP server {name!r} (inline in {definition.source}) is not started: "
                    "this folder is not trusted (run 'agentcell trust' in it to allow it)"
                )
                continue
            servers[name] = wire_server(name, config, allow=allow, deny=deny)
    return list(servers.values()), problems


def _named_by_tools(definition: AgentDefinition) -> list[str]:
    """Servers the allowlist names (``mcp__NAME__tool``) that ``mcpServers`` does not."""
    named: set[str] = set()
    for entry in definition.mcp_servers:
        named.update([entry] if isinstance(entry, str) else entry)
    found: dict[str, None] = {}
    for pattern in mcp_patterns(definition.tools or []):
        server = pattern.split("__")[1]
        if server not in named and server != "*" and server:
            found[server] = None
    return list(found)
