"""Channels: a duplex stream of frames between two peers.

The interface is two coroutines and a close (``send``, ``recv``, ``close``). Two
implementations pass the same conformance suite (tests/protocol/test_channel_conformance.py):

* ``PipeChannel``: one end of a ``multiprocess.Pipe()`` (a Unix socketpair), read from the
  asyncio event loop through a ``Protocol``, never blocking it;
* ``memory_channel_pair()``: two in-memory ends for fast tests of the layers above.

Both parse with the same ``FrameParser``, so limits and errors behave identically.
"""

from __future__ import annotations

import asyncio
import collections
import os
import socket
from typing import Protocol

from agentcell.protocol._codec import MAX_FRAME_BYTES, FrameParser, ProtocolError, encode_frame
from agentcell.protocol._frames import Frame


class ChannelClosed(EOFError):
    """The channel is closed: by us, or the peer closed its end or died."""


class Channel(Protocol):
    async def send(self, frame: Frame) -> None: ...

    async def recv(self) -> Frame: ...

    def close(self) -> None: ...

    @property
    def closed(self) -> bool: ...


class _Inbox:
    """Frames received and not yet taken, plus how the stream ended (if it has)."""

    __slots__ = ("_end", "_frames", "_parser", "_waiter", "high_water", "on_backlog", "on_frame")

    def __init__(self, max_bytes: int, high_water: int = 1024) -> None:
        self._parser = FrameParser(max_bytes)
        self._frames: collections.deque[Frame] = collections.deque()
        self._waiter: asyncio.Future[None] | None = None
        self._end: BaseException | None = None
        self.on_frame: collections.abc.Callable[[], None] | None = None
        self.on_backlog: collections.abc.Callable[[], None] | None = None
        self.high_water = high_water

    @property
    def buffered(self) -> int:
        return len(self._frames)

    def feed(self, data: bytes | bytearray | memoryview) -> bool:
        """Parse ``data``; False if the stream is broken (the error is kept for ``take``)."""
        if self._end is not None:
            return False
        try:
            frames = self._parser.feed(data)
        except ProtocolError as exc:
            self._end = exc
            self._wake()
            return False
        if frames:
            self._frames.extend(frames)
            if self.on_backlog is not None and len(self._frames) > self.high_water:
                self.on_backlog()
        if self._parser.error is not None:
            self._end = self._parser.error
        if frames or self._end is not None:
            self._wake()
        return self._end is None

    def finish(self, reason: BaseException) -> None:
        if self._end is None:
            if self._parser.pending:
                reason = ProtocolError(
                    f"stream ended inside a frame ({self._parser.pending} bytes left over)"
                )
            self._end = reason
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
        if self.on_frame is not None:
            self.on_frame()

    def poll(self) -> Frame | None:
        """A frame if one is ready; None if not yet; raises once the stream has ended."""
        if self._frames:
            return self._frames.popleft()
        if self._end is not None:
            raise self._end
        return None

    async def take(self) -> Frame:
        while True:
            frame = self.poll()
            if frame is not None:
                return frame
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None

    @property
    def ended(self) -> bool:
        return self._end is not None and not self._frames


class _PipeProtocol(asyncio.Protocol):
    def __init__(self, inbox: _Inbox) -> None:
        self.inbox = inbox
        self.transport: asyncio.Transport | None = None
        self._resume: asyncio.Future[None] | None = None
        self.holds: set[str] = set()  # who asked us to stop reading (see PipeChannel.hold)

    def hold(self, who: str) -> None:
        if not self.holds and self.transport is not None and not self.transport.is_closing():
            self.transport.pause_reading()
        self.holds.add(who)

    def release(self, who: str) -> None:
        if who not in self.holds:
            return
        self.holds.discard(who)
        if not self.holds and self.transport is not None and not self.transport.is_closing():
            self.transport.resume_reading()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        if not self.inbox.feed(data) and self.transport is not None:
            self.transport.abort()

    def eof_received(self) -> bool:
        self.inbox.finish(ChannelClosed("peer closed the channel"))
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.inbox.finish(ChannelClosed(f"channel lost: {exc}" if exc else "channel closed"))
        self._release_writer()

    def pause_writing(self) -> None:
        if self._resume is None:
            self._resume = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        self._release_writer()

    def _release_writer(self) -> None:
        if self._resume is not None and not self._resume.done():
            self._resume.set_result(None)
        self._resume = None

    async def writable(self) -> None:
        if self._resume is not None:
            # Shielded: the future is shared by every writer, and a cancelled waiter
            # must not cancel it for the others (the next send would then fail at once).
            await asyncio.shield(self._resume)

    async def flushed(self) -> None:
        """Wait until everything written has left for the peer (or the peer is gone)."""
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        if transport.get_write_buffer_size():
            transport.set_write_buffer_limits(high=0, low=0)  # pauses us until empty
            await self.writable()


class PipeChannel:
    """One end of a socketpair pipe, driven by the running event loop.

    Create it with ``await PipeChannel.open(conn)`` where ``conn`` is a
    ``multiprocess.connection.Connection`` (its descriptor is taken over), a socket or a
    raw file descriptor.
    """

    def __init__(self, protocol: _PipeProtocol, fd: int, max_frame_bytes: int) -> None:
        self._protocol = protocol
        self._fd = fd
        self.max_frame_bytes = max_frame_bytes
        self._closed = False

    @classmethod
    async def open(cls, conn: object, *, max_frame_bytes: int = MAX_FRAME_BYTES) -> PipeChannel:
        sock = _as_socket(conn)
        fd = sock.fileno()
        inbox = _Inbox(max_frame_bytes, cls.high_water)
        protocol = _PipeProtocol(inbox)
        inbox.on_backlog = lambda: protocol.hold("recv")
        loop = asyncio.get_running_loop()
        await loop.connect_accepted_socket(lambda: protocol, sock)
        return cls(protocol, fd, max_frame_bytes)

    @property
    def closed(self) -> bool:
        return self._closed

    async def send(self, frame: Frame) -> None:
        self.send_nowait(frame)
        await self._protocol.writable()

    def send_nowait(self, frame: Frame) -> None:
        """Queue a frame without waiting for the peer to catch up (no backpressure)."""
        transport = self._protocol.transport
        if self._closed or transport is None or transport.is_closing():
            raise ChannelClosed("cannot send: channel is closed")
        transport.write(encode_frame(frame, self.max_frame_bytes))

    async def recv(self) -> Frame:
        if self._closed:
            raise ChannelClosed("channel is closed")
        protocol = self._protocol
        frame = await protocol.inbox.take()
        if protocol.holds and protocol.inbox.buffered <= self.low_water:
            protocol.release("recv")
        return frame

    # -- flow control ------------------------------------------------------------------
    #: Unread frames past which ``recv``'s reader stops reading the socket, and the
    #: number it must fall back to before reading resumes. A peer that sends faster
    #: than we read then blocks on its full socket instead of growing our memory.
    high_water = 1024
    low_water = 256

    def hold(self, who: str) -> None:
        """Stop reading the socket until every holder has released it: the peer's
        writes then fill the kernel buffer and it is slowed (``writable`` waits)."""
        self._protocol.hold(who)

    def release(self, who: str) -> None:
        self._protocol.release(who)

    @property
    def reading_paused(self) -> bool:
        return bool(self._protocol.holds)

    async def writable(self) -> None:
        """Wait while the peer is not keeping up with what we sent (its reading paused)."""
        await self._protocol.writable()

    async def aclose(self) -> None:
        """Close after everything sent so far has been written (use before exiting)."""
        await self._protocol.flushed()
        self.close()

    def poll(self) -> Frame | None:
        """A received frame if one is ready, else None. Raises when the stream has ended."""
        protocol = self._protocol
        frame = protocol.inbox.poll()
        if protocol.holds and protocol.inbox.buffered <= self.low_water:
            protocol.release("recv")
        return frame

    def set_frame_callback(self, callback: collections.abc.Callable[[], None] | None) -> None:
        """Call ``callback`` (from the event loop) whenever frames arrive or the stream ends."""
        self._protocol.inbox.on_frame = callback

    def read_remaining(self) -> None:
        """Read whatever the peer already wrote, now, and end the stream.

        Used when the peer process is known to be dead: its last frames are in the socket
        buffer even if the event loop has not polled it yet, and EOF may never come if a
        descendant of the peer still holds a copy of its end.
        """
        inbox = self._protocol.inbox
        transport = self._protocol.transport
        # A closing transport has already delivered all it read; its descriptor may even
        # be closed and reused by now, so it must not be read behind its back.
        if transport is None or transport.is_closing():
            inbox.finish(ChannelClosed("peer is gone"))
            return
        try:
            while True:
                data = os.read(self._fd, 1 << 16)
                if not data or not inbox.feed(data):
                    break
        except (BlockingIOError, InterruptedError, OSError):
            pass
        inbox.finish(ChannelClosed("peer is gone"))

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._protocol.inbox.finish(ChannelClosed("channel closed locally"))
        if self._protocol.transport is not None:
            self._protocol.transport.close()

    def abort(self) -> None:
        """Close at once, dropping anything not yet written."""
        self._closed = True
        self._protocol.inbox.finish(ChannelClosed("channel aborted locally"))
        if self._protocol.transport is not None:
            self._protocol.transport.abort()


def _as_socket(conn: object) -> socket.socket:
    if isinstance(conn, socket.socket):
        sock = conn
    elif isinstance(conn, int):
        sock = socket.socket(fileno=conn)
    else:
        fileno = getattr(conn, "fileno", None)
        close = getattr(conn, "close", None)
        if fileno is None or close is None:
            raise TypeError(f"cannot make a channel from {type(conn).__name__}")
        # Take the descriptor over: our own copy, and the connection object let go.
        sock = socket.socket(fileno=os.dup(fileno()))
        close()
    if sock.family != socket.AF_UNIX or sock.type != socket.SOCK_STREAM:
        raise ValueError("a pipe channel needs a Unix stream socket (multiprocess.Pipe())")
    sock.setblocking(False)
    return sock


class MemoryChannel:
    """One end of an in-memory pipe (see ``memory_channel_pair``)."""

    def __init__(self, max_frame_bytes: int = MAX_FRAME_BYTES) -> None:
        self.max_frame_bytes = max_frame_bytes
        self._inbox = _Inbox(max_frame_bytes)
        self._peer: MemoryChannel | None = None
        self._closed = False

    @property
    def closed(self) -> bool:
        return self._closed

    async def send(self, frame: Frame) -> None:
        self.send_nowait(frame)

    def send_nowait(self, frame: Frame) -> None:
        self.send_raw(encode_frame(frame, self.max_frame_bytes))

    def send_raw(self, data: bytes | bytearray) -> None:
        """Deliver raw bytes to the peer's parser (tests use this to send garbage)."""
        peer = self._peer
        if self._closed or peer is None or peer._closed:
            raise ChannelClosed("cannot send: channel is closed")
        if not peer._inbox.feed(bytes(data)):
            # The peer's stream is broken; like a socket it stops listening.
            peer._inbox.finish(ChannelClosed("stream broken"))

    async def recv(self) -> Frame:
        if self._closed:
            raise ChannelClosed("channel is closed")
        return await self._inbox.take()

    def poll(self) -> Frame | None:
        return self._inbox.poll()

    async def writable(self) -> None:
        return None  # delivery is immediate: the peer never falls behind its socket

    def set_frame_callback(self, callback: collections.abc.Callable[[], None] | None) -> None:
        self._inbox.on_frame = callback

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._inbox.finish(ChannelClosed("channel closed locally"))
        if self._peer is not None:
            self._peer._inbox.finish(ChannelClosed("peer closed the channel"))

    abort = close


def memory_channel_pair(
    max_frame_bytes: int = MAX_FRAME_BYTES,
) -> tuple[MemoryChannel, MemoryChannel]:
    a, b = MemoryChannel(max_frame_bytes), MemoryChannel(max_frame_bytes)
    a._peer, b._peer = b, a
    return a, b
