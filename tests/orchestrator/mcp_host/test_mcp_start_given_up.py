"""A server start given up (the run ended while a shared server was still starting: the
main agent's servers start in the background) ends the server with it. It left the
server's task running until the event loop's own end, and asyncio printed "Future
exception was never retrieved ... ConnectionError" on the person's terminal."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from places import SUPPORT

GIVEN_UP = textwrap.dedent(
    """
    import asyncio, sys
    import psutil
    from agentcell.protocol import McpServer
    from agentcell.worker import McpServers

    async def main():
        server = McpServer(name="slow", command=sys.executable, args=sys.argv[1:])
        servers = McpServers([server])
        starting = asyncio.create_task(servers.start())
        while not psutil.Process().children():  # its process is up, not answering yet
            await asyncio.sleep(0.05)
        starting.cancel()  # the run that started it has ended
        await asyncio.gather(starting, return_exceptions=True)
        left = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        print(len(left), len(psutil.Process().children(recursive=True)), flush=True)

    asyncio.run(main())
    """
)


def test_a_start_given_up_ends_its_server_without_a_word() -> None:
    slow = [str(SUPPORT / "mcp_server.py"), "--start-delay", "60"]
    done = subprocess.run(
        [sys.executable, "-c", GIVEN_UP, *slow], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["0", "0"]  # no task of the server's left, no process
    assert done.stderr == ""  # nothing printed at the loop's end or at exit
