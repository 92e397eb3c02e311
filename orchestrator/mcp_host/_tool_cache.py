"""The tools a configured MCP server listed last time, kept in the user's state folder
(``$XDG_STATE_HOME/agentcell/mcp-tools/``), so that a server listed before is offered at
once and starts on its first call instead of before the first sub-agent.

A listing is keyed by what makes the server: its type, command (and the executable's
path, size and change time, so that an upgraded program lists again), arguments,
environment, URL and headers — hashed, so that no value of the environment or the
headers (a token) is ever written. The file holds the tools' names, descriptions and
schemas, 0600 in a 0700 folder. A listing that cannot be read, or that is not a list of
well-formed tools, is not used; the server then starts and lists them. The live server
has the last word: it replaces the cached listing once it runs, and a call of a tool it
no longer has is refused with the tools it has.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import secrets
import shutil
from pathlib import Path

import msgspec
from agentcell.orchestrator.config._mcp import McpServerConfig
from agentcell.orchestrator.journal._place import journal_root
from agentcell.protocol import RemoteTool

#: A tool name a model may be offered: what the SDK's servers produce, and no more.
TOOL_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")
#: A cached listing larger than this is not read (a server with thousands of tools).
MAX_CACHE_BYTES = 4 * 1024 * 1024

_decoder = msgspec.json.Decoder(list[RemoteTool])


def cache_dir() -> Path:
    return journal_root().parent / "mcp-tools"


def server_key(config: McpServerConfig) -> str:
    """What makes this server, hashed (see the module's doc)."""
    executable = shutil.which(config.command) if config.command else None
    identity: list[object] = [executable or ""]
    if executable:
        with contextlib.suppress(OSError):
            status = os.stat(executable)
            identity += [status.st_size, status.st_mtime_ns, status.st_ino]
    made = [config.type, config.command, identity, config.args, sorted(config.env.items())]
    made += [config.url, sorted(config.headers.items())]
    return hashlib.sha256(msgspec.json.encode(made)).hexdigest()


class ToolCache:
    """Read and write cached listings under ``folder`` (default: ``cache_dir()``)."""

    def __init__(self, folder: Path | None = None) -> None:
        self.folder = folder or cache_dir()

    def get(self, config: McpServerConfig) -> list[RemoteTool] | None:
        path = self.folder / f"{server_key(config)}.json"
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            return None
        try:
            with os.fdopen(fd, "rb") as handle:
                if os.fstat(handle.fileno()).st_uid != os.getuid():
                    return None  # not written by this user: not ours to trust
                data = handle.read(MAX_CACHE_BYTES + 1)
        except OSError:
            return None
        if len(data) > MAX_CACHE_BYTES:
            return None
        try:
            tools = _decoder.decode(data)
        except msgspec.DecodeError:
            return None
        if not all(TOOL_NAME.fullmatch(tool.name) for tool in tools):
            return None
        return tools

    def put(self, config: McpServerConfig, tools: list[RemoteTool]) -> None:
        """Write the listing (best effort: a state folder that cannot be written only
        means the next run lists the server again)."""
        with contextlib.suppress(OSError):
            self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            path = self.folder / f"{server_key(config)}.json"
            draft = path.with_name(f".{path.name}.{secrets.token_hex(4)}")
            fd = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "wb") as handle:
                handle.write(msgspec.json.encode(tools))
            os.replace(draft, path)
