"""A small real MCP stdio server, written with the ``mcp`` package's server API.

Run as ``python tests/mcp_server.py [MARKER_FILE] [--start-delay S] [--starts FILE]``: it
answers over stdin/stdout. With a marker file it writes its pid and its agent's there once
started (its parent's, or, under agentcell's MCP warden, the warden's parent's), so a test
can see whose process tree it ran in and that it ended with its agent. ``--start-delay``:
it sleeps that long before it answers (a slow server, for the bench); ``--starts``: it
appends its pid to that file at each start. Tools: ``echo`` (text),
``add`` (structured), ``fail`` (a tool error), ``picture`` (an image block),
``read_outside`` (a file read with the server's rights), ``whoami`` (its pid),
``write_here`` (a file in its working folder), ``crash`` (it exits without answering),
``hold`` (a call held mid-answer until the test lets it go). With
``MCP_TEST_LINGER`` set it stays alive after its stdin closes, as a badly behaved one.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.utilities.types import Image

server = MCPServer("testing")

#: 1x1 transparent PNG.
PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c489"
    "0000000d49444154789c6360000002000154a24f5d0000000049454e44ae426082"
)


@server.tool()
def echo(text: str) -> str:
    """Repeat the text back."""
    return f"echo from MCP: {text}"


@server.tool()
def add(a: int, b: int) -> dict[str, int]:
    """Add two numbers (a structured result)."""
    return {"sum": a + b}


@server.tool()
def fail(reason: str) -> str:
    """Always fails with the reason given."""
    raise ToolError(f"refused: {reason}")


@server.tool()
def picture() -> Image:
    """A tiny picture."""
    return Image(data=PNG, format="png")


@server.tool()
def read_outside(path: str) -> str:
    """Read a file with the server's own rights (outside any agent's sandbox)."""
    with open(path) as handle:
        return handle.read()


def owner() -> int:
    """The agent process whose tree this server runs in (past agentcell's warden)."""
    parent = os.getppid()
    try:
        with open(f"/proc/{parent}/cmdline", "rb") as handle:
            launched_by_warden = b"mcp/_warden.py" in handle.read()
        with open(f"/proc/{parent}/stat", "rb") as handle:
            stat = handle.read()
    except OSError:
        return parent
    return int(stat[stat.rfind(b")") + 2 :].split()[1]) if launched_by_warden else parent


@server.tool()
def write_here(name: str, text: str) -> str:
    """Write a file in the server's working folder."""
    with open(os.path.basename(name), "w") as handle:
        handle.write(text)
    return f"wrote {os.path.join(os.getcwd(), os.path.basename(name))}"


@server.tool()
def crash() -> str:
    """Exit at once, answering nothing (a server that crashes mid-call), with its last
    words on stderr, as a crashing server has."""
    print("crash: exiting on purpose", file=sys.stderr, flush=True)
    os._exit(1)


@server.tool()
def whoami() -> str:
    """The server's process id."""
    return str(os.getpid())


@server.tool()
async def hold(marker: str) -> str:
    """Write MARKER, then answer once MARKER.open exists: a call the server is in the
    middle of. One its client cancels meanwhile writes MARKER.cancelled (never answered)."""
    import anyio

    with open(marker, "w"):
        pass
    try:
        while not os.path.exists(f"{marker}.open"):  # noqa: ASYNC110 - a file the test makes
            await anyio.sleep(0.02)
    except anyio.get_cancelled_exc_class():
        with open(f"{marker}.cancelled", "w"):
            pass
        raise
    return f"held call {os.path.basename(marker)} answered"


if __name__ == "__main__":
    if os.environ.get("MCP_TEST_LINGER"):
        for number in (signal.SIGTERM, signal.SIGHUP, signal.SIGPIPE, signal.SIGINT):
            signal.signal(number, signal.SIG_IGN)
    options = sys.argv[1:]
    for flag in ("--start-delay", "--starts"):
        if flag in options:
            at = options.index(flag)
            value = options[at + 1]
            del options[at : at + 2]
            if flag == "--starts":
                with open(value, "a") as starts:
                    starts.write(f"{os.getpid()}\n")
            else:
                time.sleep(float(value))
    if options:
        with open(options[0], "w") as marker:
            marker.write(f"{os.getpid()} {owner()}")
    try:
        server.run()
    finally:
        if os.environ.get("MCP_TEST_LINGER"):  # a server that outlives its stdin
            threading.Event().wait()
