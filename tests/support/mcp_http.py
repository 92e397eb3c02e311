"""The test MCP server (mcp_server.py) over streamable HTTP on 127.0.0.1, in a thread of
the test's process, and the MCP sessions its clients opened.

The socket is bound and listening before the server starts, so no wait is needed: a
client's connection waits in the backlog until uvicorn accepts it. Its tools run in the
test's process: ``write_here`` writes in the test's working folder (chdir first)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import sys
import threading
from collections.abc import Iterator
from typing import Any

from places import SUPPORT


class HttpMcp:
    """Where the server answers, and what each request it got asked for: its
    ``mcp-method`` header and, for a tool call, the tool's name (``tools/call echo``).
    The protocol is stateless: each client starts with ``server/discover``."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.asked: list[str] = []


@contextlib.contextmanager
def serve_mcp_http() -> Iterator[HttpMcp]:
    import uvicorn

    sys.path.insert(0, str(SUPPORT))
    try:
        import mcp_server
    finally:
        sys.path.pop(0)
    sock = socket.create_server(("127.0.0.1", 0))
    served = HttpMcp(f"http://127.0.0.1:{sock.getsockname()[1]}/mcp")
    app = mcp_server.server.streamable_http_app(host="127.0.0.1")

    async def recording(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            headers = dict(scope["headers"])
            asked = [headers.get(b"mcp-method", b"?"), headers.get(b"mcp-name", b"")]
            served.asked.append(b" ".join(a for a in asked if a).decode(errors="replace"))
        await app(scope, receive, send)

    web = uvicorn.Server(uvicorn.Config(recording, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=lambda: asyncio.run(web.serve(sockets=[sock])), daemon=True)
    thread.start()
    try:
        yield served
    finally:
        web.should_exit = True
        thread.join(timeout=30)
        sock.close()
