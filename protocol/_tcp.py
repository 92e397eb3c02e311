"""Frames over TCP, for sub-agents that run on another machine (a Ray cluster).

The same length-prefixed msgspec frames as the pipe, over an authenticated connection:

* the parent runs a ``TcpListener``, and for each sub-agent it expects registers a one-time
  token (``listener.expect(agent_id)``) that travels to the sub-agent with its start
  arguments;
* the sub-agent dials back with ``tcp_connect``; before any frame both sides prove they
  hold the token — a mutual HMAC-SHA256 challenge–response over fresh nonces, bound to the
  agent id — so a stranger who can reach the port can neither pose as the sub-agent nor
  as the parent, and a token cannot be replayed for another agent or connection;
* each step has a deadline, and Nagle's algorithm is off (``TCP_NODELAY``): frames are
  small and latency-bound;
* connections that have not proved themselves yet are few and short-lived: at most
  ``max_pending`` at a time (the oldest goes when another arrives) and each has
  ``handshake_timeout`` seconds, the TLS handshake included — a flood of idle connections
  from anyone who can reach the port holds a bounded number of the parent's descriptors
  for a bounded time, and cannot lock out a real sub-agent, which answers in one round trip.

Without TLS the peers are authenticated when they connect but the bytes that follow are
not encrypted: give both ends an ``ssl.SSLContext`` on a network you do not control.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import hashlib
import hmac
import secrets
import socket
import ssl
import struct

from agentcell.protocol._channel import ChannelClosed, _Inbox
from agentcell.protocol._codec import MAX_FRAME_BYTES, encode_frame
from agentcell.protocol._frames import Frame
from agentcell.protocol._tasks import TaskNursery

#: Opens the client's first message: a version tag for the handshake itself.
HANDSHAKE_MAGIC = b"AGC1"
#: Connections the listener holds before they authenticate (each is a descriptor of ours).
MAX_PENDING = 64
#: Seconds a connection has to authenticate (TLS included): a real peer needs a round trip.
HANDSHAKE_TIMEOUT_S = 5.0
NONCE_BYTES = 32
TOKEN_BYTES = 32
_MAC_BYTES = hashlib.sha256().digest_size
_MAX_AGENT_ID = 200
_READ_CHUNK = 1 << 16


class HandshakeError(ConnectionError):
    """The peer did not prove it holds the token (or did not answer in time)."""


def _mac(token: bytes, role: bytes, agent_id: bytes, first: bytes, second: bytes) -> bytes:
    # The role tag keeps the server's proof from being replayed as the client's.
    message = b"agentcell-" + role + b"\0" + agent_id + b"\0" + first + second
    return hmac.new(token, message, hashlib.sha256).digest()


class StreamChannel:
    """A channel over an asyncio stream pair (TCP, with or without TLS).

    Incoming bytes are parsed by a reader task with the same ``FrameParser`` as the pipe
    channel, so the frame limit and errors behave identically; writes wait for the
    transport to drain.
    """

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        max_frame_bytes: int = MAX_FRAME_BYTES,
    ) -> None:
        self.max_frame_bytes = max_frame_bytes
        self._reader = reader
        self._writer = writer
        self._inbox = _Inbox(max_frame_bytes)
        self._closed = False
        self._reading = TaskNursery("a TCP channel's reader")
        self._pump: asyncio.Task[None] | None = None

    async def open(self) -> StreamChannel:
        """Start reading frames (the channel's one task, owned by the channel)."""
        await self._reading.open()
        self._pump = self._reading.start(self._read(), name="agentcell-tcp-reader")
        return self

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def peer(self) -> tuple[str, int]:
        address = self._writer.get_extra_info("peername")
        return (str(address[0]), int(address[1])) if address else ("", 0)

    async def _read(self) -> None:
        try:
            while data := await self._reader.read(_READ_CHUNK):
                if not self._inbox.feed(data):
                    self._writer.transport.abort()  # a broken stream: stop listening
                    return
            self._inbox.finish(ChannelClosed("peer closed the channel"))
        except (ConnectionError, OSError, ssl.SSLError) as exc:
            self._inbox.finish(ChannelClosed(f"channel lost: {exc}"))
        except asyncio.CancelledError:
            self._inbox.finish(ChannelClosed("channel closed locally"))
            raise

    async def send(self, frame: Frame) -> None:
        self.send_nowait(frame)
        try:
            await self._writer.drain()
        except (ConnectionError, OSError) as exc:
            raise ChannelClosed(f"cannot send: {exc}") from None

    async def writable(self) -> None:
        """Wait while the peer is not keeping up with what we sent (TCP's window)."""
        with contextlib.suppress(ConnectionError, OSError):
            await self._writer.drain()

    def send_nowait(self, frame: Frame) -> None:
        """Queue a frame without waiting for the peer to catch up (no backpressure)."""
        if self._closed or self._writer.is_closing():
            raise ChannelClosed("cannot send: channel is closed")
        self._writer.write(encode_frame(frame, self.max_frame_bytes))

    async def recv(self) -> Frame:
        if self._closed:
            raise ChannelClosed("channel is closed")
        return await self._inbox.take()

    def poll(self) -> Frame | None:
        """A received frame if one is ready, else None. Raises when the stream has ended."""
        return self._inbox.poll()

    def set_frame_callback(self, callback: collections.abc.Callable[[], None] | None) -> None:
        """Call ``callback`` (from the event loop) whenever frames arrive or the stream ends."""
        self._inbox.on_frame = callback

    async def aclose(self) -> None:
        """Close after everything sent so far has been written."""
        if not self._closed and not self._writer.is_closing():
            with contextlib.suppress(ConnectionError, OSError):
                await self._writer.drain()
        self.close()
        await self._reading.aclose()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._inbox.finish(ChannelClosed("channel closed locally"))
        if self._pump is not None:
            self._pump.cancel()
        self._writer.close()

    def abort(self) -> None:
        """Close at once, dropping anything not yet written."""
        self._closed = True
        self._inbox.finish(ChannelClosed("channel aborted locally"))
        if self._pump is not None:
            self._pump.cancel()
        self._writer.transport.abort()


def _no_delay(writer: asyncio.StreamWriter) -> None:
    sock = writer.get_extra_info("socket")
    if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


async def tcp_connect(
    host: str,
    port: int,
    *,
    agent_id: str,
    token: bytes,
    ssl_context: ssl.SSLContext | None = None,
    handshake_timeout_s: float = 10.0,
    max_frame_bytes: int = MAX_FRAME_BYTES,
) -> StreamChannel:
    """Dial the parent's listener and prove who we are; raises ``HandshakeError`` if the
    listener cannot prove it holds ``token`` too, ``TimeoutError`` if connecting and the
    handshake take longer than ``handshake_timeout_s``."""
    name = agent_id.encode()
    if not 0 < len(name) <= _MAX_AGENT_ID:
        raise ValueError(f"agent id must be 1-{_MAX_AGENT_ID} bytes, got {len(name)}")
    async with asyncio.timeout(handshake_timeout_s):
        reader, writer = await asyncio.open_connection(host, port, ssl=ssl_context)
        try:
            _no_delay(writer)
            client_nonce = secrets.token_bytes(NONCE_BYTES)
            writer.write(HANDSHAKE_MAGIC + struct.pack(">H", len(name)) + name + client_nonce)
            try:
                answer = await reader.readexactly(NONCE_BYTES + _MAC_BYTES)
            except asyncio.IncompleteReadError:
                raise HandshakeError(
                    f"the listener at {host}:{port} refused agent {agent_id!r}"
                ) from None
            server_nonce, server_mac = answer[:NONCE_BYTES], answer[NONCE_BYTES:]
            expected = _mac(token, b"server", name, client_nonce, server_nonce)
            if not hmac.compare_digest(server_mac, expected):
                raise HandshakeError(
                    f"the listener at {host}:{port} could not prove it holds this agent's "
                    "token: not our parent"
                )
            writer.write(_mac(token, b"client", name, server_nonce, client_nonce))
            await writer.drain()
        except BaseException:
            writer.transport.abort()
            raise
    return await StreamChannel(reader, writer, max_frame_bytes=max_frame_bytes).open()


class TcpListener:
    """The parent's end: accepts authenticated sub-agent connections, one per token.

    ``expect(agent_id)`` returns the one-time token to hand to that sub-agent;
    ``await accept(agent_id)`` returns its channel once it has connected and proved it
    holds the token. Connections that fail the handshake are dropped without a word.

    At most ``max_pending`` connections are held unauthenticated: one more closes the
    oldest of them at once (so a flood shortens each stranger's window rather than
    shutting out the next real peer), and each must finish within ``handshake_timeout``.
    TLS, when configured, is negotiated inside that window too (not by the server before
    the connection is counted).
    """

    def __init__(
        self,
        *,
        ssl_context: ssl.SSLContext | None = None,
        handshake_timeout: float = HANDSHAKE_TIMEOUT_S,
        max_pending: int = MAX_PENDING,
        max_frame_bytes: int = MAX_FRAME_BYTES,
    ) -> None:
        if max_pending < 1:
            raise ValueError(f"max_pending must be at least 1, got {max_pending}")
        self.ssl_context = ssl_context
        self.handshake_timeout = handshake_timeout
        self.max_pending = max_pending
        self.max_frame_bytes = max_frame_bytes
        self._tokens: dict[bytes, bytes] = {}
        self._arrivals: dict[bytes, asyncio.Future[StreamChannel]] = {}
        self._server: asyncio.Server | None = None
        # Unauthenticated connections, oldest first (a dict keeps insertion order).
        self._handshakes: dict[asyncio.Task[None], asyncio.StreamWriter] = {}
        self._handshaking = TaskNursery("TCP handshakes")  # each one's task, owned here
        self.accepted = 0  # connections accepted in all (for tests and logs)
        self.refused = 0  # connections that failed the handshake or ran out of time
        self.evicted = 0  # connections closed unauthenticated to stay within max_pending
        self._refusal = asyncio.Event()
        self._changed = asyncio.Event()

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> TcpListener:
        await self._handshaking.open()
        self._server = await asyncio.start_server(self._on_connection, host, port)
        return self

    @property
    def pending(self) -> int:
        """Connections accepted that have not authenticated (nor been dropped) yet."""
        return len(self._handshakes)

    async def wait_for(self, condition: collections.abc.Callable[[], bool]) -> None:
        """Wait until ``condition()`` holds; it is checked whenever a connection is
        accepted, authenticated, dropped or evicted (bound the wait with a timeout)."""
        while not condition():
            self._changed.clear()
            await self._changed.wait()

    @property
    def address(self) -> tuple[str, int]:
        if self._server is None:
            raise RuntimeError("the listener is not started")
        host, port = self._server.sockets[0].getsockname()[:2]
        return str(host), int(port)

    async def wait_refused(self, count: int) -> None:
        """Wait until ``count`` connections in all have failed the handshake."""
        while self.refused < count:
            self._refusal.clear()
            await self._refusal.wait()

    def expect(self, agent_id: str) -> bytes:
        """Register ``agent_id`` and return its one-time token."""
        name = agent_id.encode()
        if not 0 < len(name) <= _MAX_AGENT_ID:
            raise ValueError(f"agent id must be 1-{_MAX_AGENT_ID} bytes, got {len(name)}")
        if name in self._tokens or name in self._arrivals:
            raise ValueError(f"agent {agent_id!r} is already expected")
        token = secrets.token_bytes(TOKEN_BYTES)
        self._tokens[name] = token
        self._arrivals[name] = asyncio.get_running_loop().create_future()
        return token

    def forget(self, agent_id: str) -> None:
        """Stop expecting ``agent_id`` (its run ended or gave up): its token is void."""
        name = agent_id.encode()
        self._tokens.pop(name, None)
        arrival = self._arrivals.pop(name, None)
        if arrival is not None and not arrival.done():
            arrival.cancel()
        elif arrival is not None and not arrival.cancelled():
            arrival.result().close()

    async def accept(self, agent_id: str) -> StreamChannel:
        """The authenticated channel of ``agent_id``, once it has connected (bound the wait
        with ``asyncio.timeout``: a sub-agent that never comes up never connects)."""
        name = agent_id.encode()
        arrival = self._arrivals.get(name)
        if arrival is None:
            raise KeyError(f"agent {agent_id!r} is not expected")
        channel = await asyncio.shield(arrival)
        del self._arrivals[name]
        return channel

    def _on_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        if not self._handshaking.is_open:  # arrived as the listener closed
            writer.transport.abort()
            return
        while len(self._handshakes) >= self.max_pending:
            self._evict_oldest()
        task = self._handshaking.start(self._handshake(reader, writer))
        self._handshakes[task] = writer
        task.add_done_callback(self._handshake_done)
        self._changed.set()

    def _evict_oldest(self) -> None:
        # Closed now, not when its task next runs: the descriptor is what a flood costs us.
        task, writer = next(iter(self._handshakes.items()))
        del self._handshakes[task]
        writer.transport.abort()
        task.cancel()
        self.evicted += 1

    def _handshake_done(self, task: asyncio.Task[None]) -> None:
        self._handshakes.pop(task, None)
        self._changed.set()

    async def _handshake(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(self.handshake_timeout):
                if self.ssl_context is not None:
                    await writer.start_tls(self.ssl_context)
                name, channel = await self._authenticate(reader, writer)
        except (HandshakeError, TimeoutError, asyncio.IncompleteReadError, OSError, ssl.SSLError):
            writer.transport.abort()
            self.refused += 1
            self._refusal.set()
            return
        except BaseException:  # cancelled by aclose: the half-open connection goes too
            writer.transport.abort()
            raise
        arrival = self._arrivals.get(name)
        if arrival is None or arrival.done():  # forgotten meanwhile
            channel.abort()
            return
        arrival.set_result(channel)

    async def _authenticate(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> tuple[bytes, StreamChannel]:
        head = await reader.readexactly(len(HANDSHAKE_MAGIC) + 2)
        if head[: len(HANDSHAKE_MAGIC)] != HANDSHAKE_MAGIC:
            raise HandshakeError("not an agentcell handshake")
        (length,) = struct.unpack(">H", head[len(HANDSHAKE_MAGIC) :])
        if not 0 < length <= _MAX_AGENT_ID:
            raise HandshakeError("bad agent id length")
        name = await reader.readexactly(length)
        client_nonce = await reader.readexactly(NONCE_BYTES)
        token = self._tokens.get(name)
        if token is None:
            raise HandshakeError("no such agent is expected")
        server_nonce = secrets.token_bytes(NONCE_BYTES)
        writer.write(server_nonce + _mac(token, b"server", name, client_nonce, server_nonce))
        proof = await reader.readexactly(_MAC_BYTES)
        expected = _mac(token, b"client", name, server_nonce, client_nonce)
        if not hmac.compare_digest(proof, expected):
            raise HandshakeError("wrong proof")
        if self._tokens.pop(name, None) is None:  # used up by a concurrent connection
            raise HandshakeError("token already used")
        _no_delay(writer)
        return name, await StreamChannel(
            reader, writer, max_frame_bytes=self.max_frame_bytes
        ).open()

    async def aclose(self) -> None:
        if self._server is not None:
            self._server.close()
        for writer in list(self._handshakes.values()):
            writer.transport.abort()
        await self._handshaking.aclose()  # cancels each handshake and waits for it
        for name in list(self._arrivals):
            self.forget(name.decode())
        if self._server is not None:
            await self._server.wait_closed()
