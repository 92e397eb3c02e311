"""The pinned transport web_fetch sends through (``network/_pinned_http.py``), piece by
piece: it reaches the pinned address and nothing else, keeps the name for Host and TLS,
and reports every failure as httpx's error of the same kind (web_fetch's words come
from those). ``make mutants`` runs these against each mutant of the module."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator

import httpcore
import httpx
import pytest
from agentcell.orchestrator.network._pinned_http import (
    PinnedBackend,
    PinnedTransport,
    _as_httpx,
)

NAME = "pinned.test"  # resolves nowhere: only a pin can reach it


class Page:
    """A loopback HTTP/1.1 server; ``cut`` sends half the declared body, then closes."""

    def __init__(self, body: bytes = b"the page", *, cut: bool = False) -> None:
        self.body, self.cut = body, cut
        self.seen: list[bytes] = []
        self.port = 0
        self._server: asyncio.Server | None = None

    async def __aenter__(self) -> Page:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.seen.append(await reader.readuntil(b"\r\n\r\n"))
        length = len(self.body) * (2 if self.cut else 1)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % length + self.body)
        await writer.drain()
        writer.close()


def pinned_client(port: int, address: str = "127.0.0.1") -> httpx.AsyncClient:
    backend = PinnedBackend()
    backend.pins[(NAME, port)] = address
    return httpx.AsyncClient(transport=PinnedTransport(backend))


async def test_the_request_reaches_the_pinned_address_with_its_name_path_and_query() -> None:
    async with Page() as page, pinned_client(page.port) as client:
        response = await client.get(f"http://{NAME}:{page.port}/doc/a.txt?x=1&y=2")
        assert response.status_code == 200
        assert response.content == b"the page"
    (head,) = page.seen
    assert head.startswith(b"GET /doc/a.txt?x=1&y=2 HTTP/1.1\r\n")
    assert f"host: {NAME}:{page.port}".encode() in head.lower()


async def test_a_host_or_port_that_was_not_pinned_is_never_connected() -> None:
    async with Page() as page, pinned_client(page.port) as client:
        with pytest.raises(httpx.ConnectError, match="was not checked before connecting"):
            await client.get(f"http://{NAME}:{page.port + 1}/")
        with pytest.raises(httpx.ConnectError, match="was not checked"):
            await client.get(f"http://127.0.0.1:{page.port}/")  # the address, by itself
    assert page.seen == []


async def test_the_backend_refuses_unix_sockets_and_connects_only_by_its_pins() -> None:
    backend = PinnedBackend()
    with pytest.raises(httpcore.ConnectError, match="no UNIX socket"):
        await backend.connect_unix_socket("/run/docker.sock")
    async with Page() as page:
        backend.pins[(NAME, page.port)] = "127.0.0.1"
        stream = await backend.connect_tcp(NAME, page.port, timeout=5)
        try:
            peer = stream.get_extra_info("socket").getpeername()
            assert peer == ("127.0.0.1", page.port)
        finally:
            await stream.aclose()
    await backend.sleep(0)


async def test_a_refused_connection_is_httpxs_connect_error() -> None:
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    async with pinned_client(port) as client:
        with pytest.raises(httpx.ConnectError):
            await client.get(f"http://{NAME}:{port}/")


async def test_a_body_cut_short_is_httpxs_error_not_httpcores() -> None:
    async with Page(b"half", cut=True) as page, pinned_client(page.port) as client:
        with pytest.raises(httpx.RemoteProtocolError):
            await client.get(f"http://{NAME}:{page.port}/")


async def test_a_body_left_unread_gives_its_connection_back_when_closed() -> None:
    backend = PinnedBackend()
    transport = PinnedTransport(backend)
    async with Page(b"x" * 100_000) as page, httpx.AsyncClient(transport=transport) as client:
        backend.pins[(NAME, page.port)] = "127.0.0.1"
        async with client.stream("GET", f"http://{NAME}:{page.port}/") as response:
            chunks: AsyncIterator[bytes] = response.aiter_raw()
            assert await chunks.__anext__()
            busy = [c for c in transport._pool.connections if not c.is_idle()]
            assert busy  # the response holds its connection while it is read
        # Closed early: httpcore's own stream is closed too, so the pool no longer
        # counts its connection as in use (else every early close would leak one).
        assert all(c.is_idle() or c.is_closed() for c in transport._pool.connections)


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (httpcore.ConnectError("no"), httpx.ConnectError),
        (httpcore.ConnectTimeout("slow"), httpx.ConnectTimeout),
        (httpcore.ReadTimeout("slow"), httpx.ReadTimeout),
        (httpcore.ReadError("reset"), httpx.ReadError),
        (httpcore.RemoteProtocolError("bad"), httpx.RemoteProtocolError),
        (httpcore.UnsupportedProtocol("ftp"), httpx.UnsupportedProtocol),
    ],
)
def test_httpcores_errors_become_httpxs_of_the_same_name(
    error: Exception, expected: type[Exception]
) -> None:
    got = _as_httpx(error)
    assert type(got) is expected
    assert str(got) == str(error)


def test_an_error_httpx_has_no_transport_error_of_becomes_its_transport_error() -> None:
    class PoolCrumbled(Exception):
        pass

    class HTTPError(Exception):  # httpx has one, but it is not a TransportError
        pass

    for error in (PoolCrumbled("x"), HTTPError("y")):
        got = _as_httpx(error)
        assert type(got) is httpx.TransportError
        assert str(got) == str(error)
