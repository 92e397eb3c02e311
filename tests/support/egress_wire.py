"""The egress proxy on a real socket: its setup, a connection through it, and TLS
ClientHellos built by hand."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest
from agentcell.orchestrator.network import _egress
from agentcell.orchestrator.network._egress import EgressProxy


@dataclass
class Setup:
    upstream: Upstream
    proxy: EgressProxy


@pytest.fixture
async def setup(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Setup]:
    """The upstream, and a proxy that allows it by its address and by ``NAME``."""
    upstream = Upstream()
    server = await asyncio.start_server(upstream.serve, "127.0.0.1", 0)
    upstream.port = server.sockets[0].getsockname()[1]

    async def to_loopback(host: str, port: int) -> list[str]:
        return ["127.0.0.1"]

    # NAME resolves to loopback here, which the proxy refuses for a name: not in this test.
    monkeypatch.setattr(_egress, "_special", lambda address: False)
    proxy = EgressProxy(
        [f"127.0.0.1:{upstream.port}", f"{NAME}:{upstream.port}"],
        agent_id="a1",
        agent_type="tester",
        resolver=to_loopback,
    )
    proxy.port = await proxy.start()
    try:
        yield Setup(upstream, proxy)
    finally:
        await proxy.close()
        server.close()
        await server.wait_closed()


async def exchange(port: int, data: bytes, *, end: bool = True) -> bytes:
    """Send ``data`` to the proxy (then our end of the stream, if ``end``) and read its
    answer until it closes."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        async with asyncio.timeout(GUARD_S):
            writer.write(data)
            if end:
                writer.write_eof()
            return await reader.read()
    finally:
        writer.close()
        await writer.wait_closed()


def connect(host: str, port: int) -> bytes:
    return f"CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode()


ESTABLISHED = b"HTTP/1.1 200 Connection established\r\n\r\n"


def server_name_extension(*names: str) -> bytes:
    entries = b"".join(b"\x00" + len(n).to_bytes(2, "big") + n.encode() for n in names)
    body = len(entries).to_bytes(2, "big") + entries
    return b"\x00\x00" + len(body).to_bytes(2, "big") + body


def built_client_hello(*extensions: bytes) -> bytes:
    """A minimal TLS 1.2 ClientHello record with these (already framed) extensions."""
    joined = b"".join(extensions)
    body = (
        b"\x03\x03"  # client_version
        + bytes(32)  # random
        + b"\x00"  # session id
        + b"\x00\x02\x13\x01"  # one cipher suite
        + b"\x01\x00"  # one compression method: none
        + len(joined).to_bytes(2, "big")
        + joined
    )
    message = b"\x01" + len(body).to_bytes(3, "big") + body
    return b"\x16\x03\x01" + len(message).to_bytes(2, "big") + message


NAME = "allowed.test"  # resolved (by the test's resolver) to 127.0.0.1


GUARD_S = 30  # a hung exchange fails the test instead of waiting for pytest's timeout


@dataclass
class Upstream:
    """A server that reads each connection to its end, keeps what came, then answers."""

    port: int = 0
    received: list[bytes] = field(default_factory=list)

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.received.append(await reader.read())
        writer.write(ANSWER)
        await writer.drain()
        writer.close()
        await writer.wait_closed()


ANSWER = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"
