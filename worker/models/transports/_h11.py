"""The parent relay's route to a plain-HTTP model server: HTTP/1.1 keep-alive
connections on asyncio streams, the protocol spoken by h11.

Why not httpx on this route: the relay sends every sub-agent's every model request from
the one parent process, where its CPU queues behind the rest of the parent's work (on 2
cores the parent is the serial part of a fan-out). Per relayed request of 30 KB with a
streamed answer (``bench`` micro-benchmark, 32 concurrent senders), httpx's client took
~0.9 ms of CPU, httpcore's pool alone ~0.5–0.7 ms (its anyio cancel scopes and timeouts
around every read and write, and the pool rescans), and h11 over asyncio's streams
~0.2 ms: one write for the head and body, one read per burst of the answer. h11 is the
parser httpcore itself uses; what is written here is the connection pool, the timeouts
and the error words (the same as ``HttpxTransport``'s, so a child cannot tell the routes
apart).

Only for ``http://`` base URLs with no proxy from the environment (``h11_route``):
HTTPS stays on httpx, which offers HTTP/2 in TLS's ALPN and multiplexes a provider's
requests over one connection; a proxy stays on httpx, which speaks to it.
"""

from __future__ import annotations

import asyncio
import collections
import urllib.parse
from collections.abc import AsyncIterator, Mapping

import h11
import httpx
from agentcell.worker.models._base import ModelError
from agentcell.worker.models.transports._base import (
    Endpoint,
    Retry,
    cannot_connect,
    connect_timed_out,
    connection_failed,
    illegal_header,
    no_answer,
    pool_busy,
    relayed_headers,
)
from agentcell.worker.models.transports._client import _connect_cause, _env_proxy, check_not_blocked

#: The most bytes one read takes from a connection (an answer's burst is one read).
READ_BYTES = 64 * 1024
#: The stream buffer past which asyncio stops reading the socket (the relay's own pace).
BUFFER_LIMIT = 256 * 1024


def h11_route(base_url: str) -> bool:
    """Whether requests to ``base_url`` take this route (plain HTTP, no proxy, and no
    ``user:password@``: httpx turns that into Basic auth; this route does not)."""
    url = httpx.URL(base_url)
    plain = url.scheme == "http" and bool(url.host) and not url.userinfo
    return plain and _env_proxy(url) is None


class _Connection:
    __slots__ = ("protocol", "reader", "writer")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.protocol = h11.Connection(h11.CLIENT)

    def reusable(self) -> bool:
        """Idle and still open (a server that closed it while idle sent its FIN)."""
        return (
            self.protocol.our_state is h11.IDLE
            and not self.reader.at_eof()
            and not self.writer.is_closing()
        )

    async def next_event(self, wait_s: float) -> object:
        while True:
            event = self.protocol.next_event()
            if event is not h11.NEED_DATA:
                return event
            async with asyncio.timeout(wait_s):
                data = await self.reader.read(READ_BYTES)
            self.protocol.receive_data(data)  # b"": the server closed its side

    def close(self) -> None:
        self.writer.close()


class H11Pool:
    """Up to ``max_connections`` keep-alive connections to the endpoint's origin, and the
    requests waiting for one (for at most its timeout, as httpx's pool timeout)."""

    def __init__(self, endpoint: Endpoint, *, max_connections: int) -> None:
        url = httpx.URL(endpoint.base_url)
        self._url = url
        self._host = url.host
        self._port = url.port or 80
        self.endpoint = endpoint
        self._max = max_connections
        self._idle: list[_Connection] = []
        self._open = 0  # idle, in use, or connecting
        self._waiters: collections.deque[asyncio.Future[None]] = collections.deque()
        self.connections_made = 0

    @property
    def connections_open(self) -> int:
        """Connections idle, in use or being made: never more than ``max_connections``."""
        return self._open

    def transport(self, url: str, headers: Mapping[str, str]) -> H11Transport:
        return H11Transport(self, url, headers)

    async def acquire(self) -> _Connection:
        timeout = self.endpoint.timeout
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            while self._idle:
                connection = self._idle.pop()
                if connection.reusable():
                    return connection
                self._drop(connection)
            if self._open < self._max:
                self._open += 1
                try:
                    return await self._connect()
                except BaseException:
                    self._open -= 1
                    self._wake()
                    raise
            waiter = loop.create_future()
            self._waiters.append(waiter)
            try:
                async with asyncio.timeout_at(deadline):
                    await waiter
            except BaseException as exc:
                if waiter.done() and not waiter.cancelled():
                    self._wake()  # woken as it was cancelled: the turn goes on to the next
                elif waiter in self._waiters:
                    self._waiters.remove(waiter)
                if isinstance(exc, TimeoutError):
                    raise pool_busy(self._max, timeout) from None
                raise

    def release(self, connection: _Connection, reusable: bool) -> None:
        if reusable:
            self._idle.append(connection)
        else:
            self._drop(connection)
        self._wake()

    def _drop(self, connection: _Connection) -> None:
        connection.close()
        self._open -= 1

    def _wake(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    async def _connect(self) -> _Connection:
        connect_timeout = min(self.endpoint.timeout, 30.0)
        try:
            async with asyncio.timeout(connect_timeout):
                reader, writer = await asyncio.open_connection(
                    self._host, self._port, limit=BUFFER_LIMIT
                )
        except TimeoutError:
            raise connect_timed_out(self.endpoint, connect_timeout) from None
        except OSError as exc:
            raise cannot_connect(self.endpoint, _connect_cause(exc)) from exc
        self.connections_made += 1
        return _Connection(reader, writer)

    async def aclose(self) -> None:
        idle, self._idle = self._idle, []
        for connection in idle:
            self._drop(connection)


class H11Transport:
    """An attempt as one POST over a connection of ``pool``."""

    def __init__(self, pool: H11Pool, url: str, headers: Mapping[str, str]) -> None:
        parts = urllib.parse.urlsplit(url)
        self._pool = pool
        self._target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        self._headers = [
            ("host", parts.netloc),
            ("user-agent", "agentcell"),
            ("accept-encoding", "identity"),
            *((name, value) for name, value in headers.items() if name.lower() != "host"),
        ]
        self.endpoint = pool.endpoint

    async def open(self, body: bytes) -> _H11Response:
        pool = self._pool
        check_not_blocked(pool._url)  # as the httpx route's guard, on every request
        try:
            request = h11.Request(
                method="POST",
                target=self._target,
                headers=[*self._headers, ("content-length", str(len(body)))],
            )
        except h11.LocalProtocolError as exc:  # before any connection is taken
            raise self._failure(exc) from exc
        connection = await pool.acquire()
        try:
            head = await self._exchange(connection, request, body)
        except BaseException as exc:
            pool.release(connection, reusable=False)
            if isinstance(exc, Exception) and not isinstance(exc, Retry | ModelError):
                raise self._failure(exc) from exc
            raise
        return _H11Response(pool, connection, head)

    async def _exchange(
        self, connection: _Connection, request: h11.Request, body: bytes
    ) -> h11.Response:
        protocol = connection.protocol
        # Head and body in one write: one system call, one segment for a small body.
        connection.writer.write(
            protocol.send(request)
            + protocol.send(h11.Data(data=body))
            + protocol.send(h11.EndOfMessage())
        )
        timeout = self.endpoint.timeout
        if connection.writer.transport.get_write_buffer_size():
            async with asyncio.timeout(timeout):
                await connection.writer.drain()
        while True:
            event = await connection.next_event(timeout)
            if isinstance(event, h11.Response):
                return event
            if not isinstance(event, h11.InformationalResponse):
                raise h11.RemoteProtocolError(
                    f"unexpected {type(event).__name__} before a response"
                )

    def _failure(self, exc: Exception) -> Exception:
        if isinstance(exc, h11.LocalProtocolError):
            return illegal_header(self.endpoint)
        return _read_failure(exc, self.endpoint)

    async def aclose(self) -> None:
        """The pool belongs to whoever made it: nothing to close here."""


def _read_failure(exc: Exception, where: Endpoint) -> Exception:
    return no_answer(where) if isinstance(exc, TimeoutError) else connection_failed(where, exc)


class _H11Response:
    __slots__ = ("_connection", "_done", "_pool", "headers", "status")

    def __init__(self, pool: H11Pool, connection: _Connection, head: h11.Response) -> None:
        self._pool = pool
        self._connection: _Connection | None = connection
        self._done = False
        self.status = head.status_code
        self.headers = relayed_headers(
            {name.decode("latin-1"): value.decode("latin-1") for name, value in head.headers}
        )

    async def chunks(self) -> AsyncIterator[bytes]:
        connection = self._connection
        if connection is None:
            return
        timeout = self._pool.endpoint.timeout
        try:
            while True:
                event = await connection.next_event(timeout)
                if type(event) is h11.Data:
                    yield bytes(event.data)
                elif type(event) is h11.EndOfMessage:
                    self._done = True
                    return
                else:
                    raise h11.RemoteProtocolError(f"unexpected {type(event).__name__} in a body")
        except (h11.ProtocolError, OSError, TimeoutError) as exc:
            raise _read_failure(exc, self._pool.endpoint) from exc

    async def aclose(self) -> None:
        """Back to the pool if the answer was read to its end; else the connection is
        closed (which is how an unfinished request is cancelled)."""
        connection, self._connection = self._connection, None
        if connection is None:
            return
        reusable = False
        protocol = connection.protocol
        if self._done and protocol.our_state is h11.DONE and protocol.their_state is h11.DONE:
            protocol.start_next_cycle()
            reusable = True
        self._pool.release(connection, reusable)
