"""A raw HTTP/1.1 server and client for the transport and relay tests: what crosses the
wire, byte for byte."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

from agentcell.worker.models import (
    Endpoint,
    H11Pool,
)


async def read_request(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    """One request's head and body (by its content-length)."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    return head, await reader.readexactly(length)


class RawServer:
    """A loopback server running ``handler`` for each connection it accepts."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.accepted = 0
        self.closed_by_client = asyncio.Event()
        self._server: asyncio.Server | None = None
        self.base_url = ""

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        try:
            await self.handler(reader, writer)
            if await reader.read() == b"":
                self.closed_by_client.set()
        except (ConnectionError, asyncio.IncompleteReadError):
            self.closed_by_client.set()
        finally:
            writer.close()

    async def __aenter__(self) -> RawServer:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.base_url = f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}/v1"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._server.wait_closed(), 5)


def pool_for(base_url: str, *, timeout: float = 5.0, connections: int = 2) -> H11Pool:
    where = Endpoint("openai", base_url, "OPENAI_BASE_URL", "OPENAI_API_KEY", timeout, 4)
    return H11Pool(where, max_connections=connections)


async def post(pool: H11Pool, body: bytes = b"{}", headers: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    transport = pool.transport(f"{pool.endpoint.base_url}/chat/completions", headers or {})
    return await transport.open(body)


Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
