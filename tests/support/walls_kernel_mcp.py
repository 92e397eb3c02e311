"""A real MCP stdio server for test_walls_kernel: one tool that reports, from inside the
server process, whether a seccomp filter holds it (it starts before the sub-agent's walls)."""

from __future__ import annotations

import errno
import fcntl
import termios

from mcp.server.mcpserver import MCPServer

server = MCPServer("walls")


@server.tool()
def walls() -> str:
    """This process's seccomp mode and what TIOCSTI on its stdin returns."""
    with open("/proc/self/status") as status:
        mode = next(line.split(":")[1].strip() for line in status if line.startswith("Seccomp:"))
    try:
        fcntl.ioctl(0, termios.TIOCSTI, b"x")
        pushed = "ok"
    except OSError as exc:
        pushed = errno.errorcode.get(exc.errno, str(exc.errno))
    return f"seccomp {mode} tiocsti {pushed}"


if __name__ == "__main__":
    server.run()
