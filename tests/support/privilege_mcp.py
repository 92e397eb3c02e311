"""A real MCP stdio server for test_walls_privilege: one tool that probes, from inside the
server process, what it holds (and what its parent, the warden, holds)."""

from __future__ import annotations

import json

from mcp.server.mcpserver import MCPServer
from privilege_probe import probe

server = MCPServer("privilege")


@server.tool()
def held() -> str:
    """This process's capabilities, securebits, filter and privileged calls, as JSON."""
    return json.dumps(probe())


if __name__ == "__main__":
    server.run()
