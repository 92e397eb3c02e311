"""One conformance suite, run against every channel implementation.

Each implementation provides a ``Pair``: the channel under test (``near``), the peer's
channel (``far``), and ways to write raw bytes as the peer and to make the peer die.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import subprocess
from collections.abc import AsyncIterator, Callable

import multiprocess
import pytest
from agentcell.protocol import (
    ChannelClosed,
    DelegateReply,
    FrameTooLarge,
    Heartbeat,
    PipeChannel,
    ProtocolError,
    TcpListener,
    encode_frame,
    tcp_connect,
)
from agentcell.protocol._channel import memory_channel_pair

LIMIT = 64 * 1024


@dataclasses.dataclass
class Pair:
    near: PipeChannel | object
    far: PipeChannel | object
    send_raw: Callable[[bytes], None]  # bytes from the peer, bypassing its encoder
    kill_peer: Callable[[], None]  # the peer dies without closing politely


async def _pipe_pair() -> AsyncIterator[Pair]:
    a, b = multiprocess.Pipe()  # the real thing: a socketpair wrapped in Connections
    near = await PipeChannel.open(a, max_frame_bytes=LIMIT)
    far = await PipeChannel.open(b, max_frame_bytes=LIMIT)
    holder: list[subprocess.Popen[bytes]] = []

    def send_raw(data: bytes) -> None:
        far._protocol.transport.write(data)  # type: ignore[union-attr]

    def kill_peer() -> None:
        # The peer's end goes to a real process; we drop ours and kill that process.
        fd = far._fd
        proc = subprocess.Popen(["sleep", "60"], pass_fds=(fd,))
        holder.append(proc)
        far.abort()
        proc.kill()
        proc.wait()

    try:
        yield Pair(near, far, send_raw, kill_peer)
    finally:
        near.close()
        far.close()
        for proc in holder:
            with contextlib.suppress(Exception):
                proc.kill()
                proc.wait()


async def _tcp_pair() -> AsyncIterator[Pair]:
    # The Ray backend's transport: loopback TCP after the mutual HMAC handshake.
    listener = await TcpListener(max_frame_bytes=LIMIT).start()
    token = listener.expect("a1")
    host, port = listener.address
    far = await tcp_connect(host, port, agent_id="a1", token=token, max_frame_bytes=LIMIT)
    async with asyncio.timeout(10):
        near = await listener.accept("a1")

    def send_raw(data: bytes) -> None:
        far._writer.write(data)

    try:
        yield Pair(near, far, send_raw, far.abort)
    finally:
        near.close()
        far.close()
        await listener.aclose()


async def _memory_pair() -> AsyncIterator[Pair]:
    near, far = memory_channel_pair(max_frame_bytes=LIMIT)
    yield Pair(near, far, far.send_raw, far.abort)


_FACTORIES = {"pipe": _pipe_pair, "tcp": _tcp_pair, "memory": _memory_pair}


@pytest.fixture(params=sorted(_FACTORIES))
async def pair(request: pytest.FixtureRequest) -> AsyncIterator[Pair]:
    factory = _FACTORIES[request.param]
    async for p in factory():
        yield p


def hb(i: int) -> Heartbeat:
    return Heartbeat(seq=i)


async def test_frames_arrive_in_order_both_ways(pair: Pair) -> None:
    for i in range(200):
        await pair.far.send(hb(i))  # type: ignore[attr-defined]
        await pair.near.send(hb(-i))  # type: ignore[attr-defined]
    assert [await pair.near.recv() for _ in range(200)] == [hb(i) for i in range(200)]  # type: ignore[attr-defined]
    assert [await pair.far.recv() for _ in range(200)] == [hb(-i) for i in range(200)]  # type: ignore[attr-defined]


async def test_large_frames_within_the_limit_pass_whole(pair: Pair) -> None:
    big = DelegateReply(request_id=7, content="x" * (LIMIT - 100))
    sender = asyncio.create_task(_send_many(pair.far, big, 20))
    got = [await pair.near.recv() for _ in range(20)]  # type: ignore[attr-defined]
    await sender
    assert got == [big] * 20


async def _send_many(channel: object, frame: object, n: int) -> None:
    for _ in range(n):
        await channel.send(frame)  # type: ignore[attr-defined]


async def test_peer_close_is_eof_after_pending_frames(pair: Pair) -> None:
    await pair.far.send(hb(1))  # type: ignore[attr-defined]
    await pair.far.send(hb(2))  # type: ignore[attr-defined]
    pair.far.close()  # type: ignore[attr-defined]
    assert await pair.near.recv() == hb(1)  # type: ignore[attr-defined]
    assert await pair.near.recv() == hb(2)  # type: ignore[attr-defined]
    with pytest.raises(ChannelClosed):
        await pair.near.recv()  # type: ignore[attr-defined]
    with pytest.raises(ChannelClosed):
        await pair.near.recv()  # type: ignore[attr-defined]  # and it stays closed


async def test_close_while_reading_wakes_the_reader(pair: Pair) -> None:
    reader = asyncio.create_task(pair.near.recv())  # type: ignore[attr-defined]
    await asyncio.sleep(0)  # let the reader start waiting (a yield, not a timing guess)
    assert not reader.done()
    pair.near.close()  # type: ignore[attr-defined]
    with pytest.raises(ChannelClosed):
        await reader
    assert pair.near.closed  # type: ignore[attr-defined]


async def test_send_after_close_raises(pair: Pair) -> None:
    pair.near.close()  # type: ignore[attr-defined]
    with pytest.raises(ChannelClosed):
        await pair.near.send(hb(1))  # type: ignore[attr-defined]


async def test_peer_death_is_eof(pair: Pair) -> None:
    await pair.far.send(hb(1))  # type: ignore[attr-defined]
    reader = asyncio.create_task(_recv_all(pair.near))
    pair.kill_peer()
    frames, error = await asyncio.wait_for(reader, 30)
    assert frames == [hb(1)]
    assert isinstance(error, ChannelClosed)


async def _recv_all(channel: object) -> tuple[list[object], BaseException]:
    frames = []
    while True:
        try:
            frames.append(await channel.recv())  # type: ignore[attr-defined]
        except (ChannelClosed, ProtocolError) as exc:
            return frames, exc


async def test_oversize_frame_is_refused_on_its_header(pair: Pair) -> None:
    await pair.far.send(hb(1))  # type: ignore[attr-defined]
    pair.send_raw((LIMIT + 1).to_bytes(4, "big"))  # a header alone: the body never comes
    frames, error = await asyncio.wait_for(_recv_all(pair.near), 30)
    assert frames == [hb(1)]
    assert isinstance(error, FrameTooLarge)


async def test_oversize_frame_is_refused_by_the_sender(pair: Pair) -> None:
    with pytest.raises(FrameTooLarge):
        await pair.far.send(DelegateReply(request_id=1, content="x" * LIMIT))  # type: ignore[attr-defined]
    await pair.far.send(hb(5))  # type: ignore[attr-defined]  # the channel is still usable
    assert await pair.near.recv() == hb(5)  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "garbage",
    [b"\x00\x00\x00\x03\xc1\xc1\xc1", b"\x00\x00\x00\x01\x01", b"\xff\xff\xff\xff"],
    ids=["bad-msgpack", "wrong-shape", "negative-length"],
)
async def test_garbage_bytes_are_a_protocol_error(pair: Pair, garbage: bytes) -> None:
    pair.send_raw(bytes(encode_frame(hb(1))) + garbage)
    frames, error = await asyncio.wait_for(_recv_all(pair.near), 30)
    assert frames == [hb(1)]
    assert isinstance(error, ProtocolError)
    assert not isinstance(error, ChannelClosed)


async def test_stream_cut_inside_a_frame_is_a_protocol_error(pair: Pair) -> None:
    pair.send_raw(bytes(encode_frame(hb(1)))[:5])
    pair.far.close()  # type: ignore[attr-defined]
    frames, error = await asyncio.wait_for(_recv_all(pair.near), 30)
    assert frames == []
    assert isinstance(error, ProtocolError)
