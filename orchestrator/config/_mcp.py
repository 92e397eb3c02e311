"""MCP server configuration: ``[mcp_servers.NAME]`` in config, ``.mcp.json``, definitions.

One shape for all three, Claude Code's: ``{command, args, env}`` for a stdio server (the
default type) or ``{type: http, url, headers}`` for a streamable HTTP one. A project's
servers (its ``.mcp.json`` and its ``agentcell.toml`` table) run commands of the
project's choosing outside the sub-agents' sandboxes, so they are honoured only in a
trusted folder (see ``_trust``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from agentcell.worker import OutsideRoot, read_beneath
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

#: How long a server may take to start and list its tools, unless it says otherwise.
DEFAULT_START_TIMEOUT_S = 30.0


class McpServerConfig(BaseModel):
    """One MCP server, as configured."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: Literal["stdio", "http"] = "stdio"
    command: str = ""
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    url: str = ""
    headers: dict[str, str] = Field(default_factory=dict)
    start_timeout_s: float = Field(default=DEFAULT_START_TIMEOUT_S, gt=0, le=600)

    @field_validator("type", mode="before")
    @classmethod
    def _type(cls, value: object) -> object:
        if not isinstance(value, str):
            return value
        kind = value.strip().lower()
        # Claude Code spells the HTTP transport "http" or "streamable-http".
        if kind in ("streamable-http", "streamable_http"):
            return "http"
        if kind == "sse":  # Claude Code's older HTTP transport, which MCP has replaced
            raise ValueError(
                'the "sse" transport is not supported: use "http" (streamable HTTP) '
                "with the server's streamable endpoint, if it has one"
            )
        return kind

    @model_validator(mode="after")
    def _complete(self) -> McpServerConfig:
        if self.type == "stdio" and not self.command.strip():
            raise ValueError('a stdio server needs a command (e.g. command = "npx")')
        if self.type == "http" and not self.url.strip():
            raise ValueError('an http server needs a url (e.g. url = "http://127.0.0.1:8000/mcp")')
        return self


def config_problems(exc: ValidationError) -> str:
    """A pydantic error on one server as one line."""
    parts = []
    for error in exc.errors():
        where = ".".join(str(p) for p in error["loc"])
        cause = error.get("ctx", {}).get("error")
        message = str(cause) if cause is not None else error["msg"]
        parts.append(f"{where}: {message}" if where else message)
    return "; ".join(parts)


def read_mcp_json(
    path: Path, *, root: Path | None = None
) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """The server tables of a ``.mcp.json`` (``{"mcpServers": {NAME: {...}}}``) and one
    line per server skipped (bad JSON skips the file). Keys agentcell does not use
    (Claude Code's ``cwd``, ``oauth``, ...) are left out, and named."""
    try:
        # Opened beneath its project (``root``, by default its folder): no link out.
        data = json.loads(read_beneath(path.parent if root is None else root, path))
    except OutsideRoot as exc:
        return {}, [f"{exc}: its MCP servers are not used"]
    except (OSError, ValueError) as exc:
        return {}, [f"{path}: cannot read it ({exc}): its MCP servers are not used"]
    table = data.get("mcpServers") if isinstance(data, dict) else None
    if not isinstance(table, dict):
        return {}, [f'{path}: no "mcpServers" object: its MCP servers are not used']
    servers: dict[str, dict[str, Any]] = {}
    notes: list[str] = []
    known = set(McpServerConfig.model_fields)
    for name, entry in table.items():
        if not isinstance(entry, dict):
            notes.append(f"{path}: MCP server {name!r} is not an object: skipped")
            continue
        unused = sorted(set(entry) - known)
        if unused:
            notes.append(f"{path}: MCP server {name!r}: {', '.join(unused)} not used by agentcell")
        servers[str(name)] = {k: v for k, v in entry.items() if k in known}
    return servers, notes
