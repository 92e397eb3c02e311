"""The MCP server of tests/mcp_server.py, launched the way npx- and uv-launched servers are:
it first forks a helper that leaves with ``setsid`` and a second fork (nobody's child but
a subreaper's), ignores the polite signals and sleeps forever.

Run as ``python tests/mcp_helper_server.py HELPER_PID_FILE``. The helper's pid is written
to the file (atomically) before the server answers anything, so a test knows exactly which
process is its own. Environment: ``MCP_TEST_EXIT_AT_ONCE=CODE``: exit with CODE right after
forking the helper, which keeps the server's stdout open (the SDK then never sees its end
of file); ``MCP_TEST_LINGER``: stay alive after stdin closes, ignoring SIGTERM, as a badly
behaved server does.
"""

from __future__ import annotations

import os
import signal
import sys
import threading

from mcp_server import server  # the same directory: sys.path[0] when run by path

_POLITE = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT, signal.SIGPIPE)


def _helper(report: int, keep_stdio: bool) -> None:
    os.setsid()
    if os.fork() != 0:
        os._exit(0)  # the middle process: its child is orphaned at once
    for number in _POLITE:
        signal.signal(number, signal.SIG_IGN)
    if not keep_stdio:
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1):
            os.dup2(null, fd)
    os.write(report, str(os.getpid()).encode())
    os.close(report)
    while True:
        signal.pause()


def spawn_helper(pid_file: str, *, keep_stdio: bool) -> int:
    read_end, write_end = os.pipe()
    middle = os.fork()
    if middle == 0:
        os.close(read_end)
        _helper(write_end, keep_stdio)
    os.close(write_end)
    os.waitpid(middle, 0)
    pid = int(os.read(read_end, 32))
    os.close(read_end)
    with open(pid_file + ".tmp", "w") as handle:
        handle.write(str(pid))
    os.replace(pid_file + ".tmp", pid_file)
    return pid


if __name__ == "__main__":
    exit_code = os.environ.get("MCP_TEST_EXIT_AT_ONCE")
    spawn_helper(sys.argv[1], keep_stdio=exit_code is not None)
    if exit_code is not None:
        sys.exit(int(exit_code))
    if os.environ.get("MCP_TEST_LINGER"):
        for number in _POLITE:
            signal.signal(number, signal.SIG_IGN)
    try:
        server.run()
    finally:
        if os.environ.get("MCP_TEST_LINGER"):
            threading.Event().wait()
