"""MCP server configuration: ``[mcp_servers.NAME]`` in config, ``.mcp.json``, definitions.

One shape for all three, Claude Code's: ``{command, args, env}`` for a stdio server (the
default type) or ``{type: http, url, headers}`` for a streamable HTTP one. A project's
servers (its ``.mcp.json`` and its ``agentcell.toml`` table) run commands of the
project's choosing outside the sub-agents' sandboxes, so they are honoured only in a
trusted folder (see ``_trust``).

A ``.mcp.json`` may write ``${VAR}`` and ``${VAR:-default}`` in ``command``, ``args``,
``env``, ``url`` and ``headers`` (Claude Code's expansion). Expanding puts the user's
environment where the file says: into a URL or a header sent to any host. So only a
caller that has decided the file is trusted passes ``environ`` to ``read_mcp_json``;
without it nothing is expanded.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
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
    # Started once by the parent and shared by every agent that names it (false: each
    # agent starts its own, in its sandbox); see ``mcp_host/_shared.py``.
    shared: bool = True

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
    path: Path, *, root: Path | None = None, environ: Mapping[str, str] | None = None
) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """The server tables of a ``.mcp.json`` (``{"mcpServers": {NAME: {...}}}``) and one
    line per server skipped (bad JSON skips the file). Keys agentcell does not use
    (Claude Code's ``cwd``, ``oauth``, ...) are left out, and named.

    ``environ``: expand ``${VAR}`` references from it. Give it only for a file of a
    trusted folder (see the module's doc); None leaves every reference as written."""
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
        server = {k: v for k, v in entry.items() if k in known}
        if environ is not None:
            server = expand_server(server, environ, f"{path}: MCP server {name!r}", notes)
        servers[str(name)] = server
    return servers, notes


#: ``${VAR}`` or ``${VAR:-default}``: a shell-style name, and a default up to the first '}'.
_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
#: The keys Claude Code expands references in (mcp.md, "Environment variable expansion").
EXPANDED_KEYS = ("command", "args", "env", "url", "headers")


def expand_server(
    server: Mapping[str, Any], environ: Mapping[str, str], where: str, notes: list[str]
) -> dict[str, Any]:
    """``server`` with the references in ``EXPANDED_KEYS`` expanded from ``environ``.

    As in Claude Code, a variable that is not set and has no default stays as written
    (the server still loads) and is named, once per server and variable, in ``notes``.
    Values of other types are left for validation to judge."""
    missing: list[str] = []

    def expand(value: Any) -> Any:
        if isinstance(value, str):
            return _REFERENCE.sub(lambda m: _value_of(m, environ, missing), value)
        if isinstance(value, list):
            return [expand(item) for item in value]
        if isinstance(value, dict):
            return {key: expand(item) for key, item in value.items()}
        return value

    expanded = {
        key: expand(value) if key in EXPANDED_KEYS else value for key, value in server.items()
    }
    for variable in dict.fromkeys(missing):
        notes.append(
            f"{where}: ${{{variable}}} is not set and has no default, so it is passed as "
            f"written: set {variable}, or write ${{{variable}:-default}}"
        )
    return expanded


def _value_of(match: re.Match[str], environ: Mapping[str, str], missing: list[str]) -> str:
    variable, default = match.group(1), match.group(2)
    if variable in environ:
        return environ[variable]
    if default is not None:
        return default
    missing.append(variable)
    return match.group(0)
