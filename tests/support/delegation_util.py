"""Helpers for end-to-end delegation tests: a TCP barrier and gate that child processes
can wait on (a real event crossing process boundaries, never a sleep)."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from agentcell.worker.tools import function_tool
from agentcell.worker.tools._base import FunctionTool


class Gate:
    """A TCP server on 127.0.0.1: each connection waits until the test opens the gate
    (or, with ``parties``, until that many connections have arrived)."""

    def __init__(self, parties: int | None = None) -> None:
        self.parties = parties
        self.arrived = 0
        self.arrivals = asyncio.Event()
        self._open = asyncio.Event()
        self._server: asyncio.Server | None = None
        self.port = 0

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.arrived += 1
        self.arrivals.set()
        if self.parties is not None and self.arrived >= self.parties:
            self._open.set()
        try:
            await self._open.wait()
            writer.write(b"go\n")
            await writer.drain()
        finally:
            writer.close()

    def open(self) -> None:
        self._open.set()

    async def wait_arrivals(self, n: int) -> None:
        while self.arrived < n:
            self.arrivals.clear()
            await self.arrivals.wait()

    def tool(self, name: str = "wait_at_gate") -> FunctionTool:
        """A tool (shipped to children by value) that blocks until the gate opens."""
        port = self.port

        def wait_at_gate() -> str:
            """Wait until the test lets this agent go on."""
            with socket.create_connection(("127.0.0.1", port), timeout=60) as conn:
                conn.settimeout(60)
                return conn.recv(16).decode().strip()

        tool: FunctionTool = function_tool(wait_at_gate, name=name, read_only=True)
        return tool


@asynccontextmanager
async def gate(parties: int | None = None) -> AsyncIterator[Gate]:
    g = Gate(parties)
    server = await asyncio.start_server(g._serve, "127.0.0.1", 0)
    g._server = server
    g.port = server.sockets[0].getsockname()[1]
    try:
        yield g
    finally:
        g.open()
        server.close()
        await server.wait_closed()
