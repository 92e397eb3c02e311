"""Backpressure: a reader that falls behind stops reading the socket, so the sender is
slowed by its full pipe instead of the reader buffering without limit."""

from __future__ import annotations

import asyncio
import socket

from agentcell.orchestrator.backends._forkserver import WorkerPool
from agentcell.orchestrator.backends._outcome import OutcomeKind
from agentcell.orchestrator.backends._workers import WorkerState
from agentcell.protocol import Event, Notice, PipeChannel, Result, encode_frame
from pool_util import start

#: Far more than the reader's bound plus what the kernel and the sender's transport can
#: hold in flight, so a sender that is not slowed would have finished long before.
FLOOD = 50_000

#: A flood no child finishes (days of frames): a child that ends did so on the cancel frame,
#: never because it ran out of events while the cancel was still in its pipe.
ENDLESS = 10**12


def notice(i: int) -> Event:
    return Event(event=Notice(message=f"event {i}"))


#: The socket is read in chunks (256 KiB in asyncio): a whole chunk is parsed after
#: the limit is crossed, so the bound is the limit plus one chunk's frames.
CHUNK_FRAMES = 256 * 1024 // len(encode_frame(notice(0)))


async def let_the_loop_run() -> None:
    """Yield to the event loop many times (no time passes): a reader still reading would
    take in everything its socket holds meanwhile."""
    for _ in range(200):
        await asyncio.sleep(0)


def watch_for_hold(channel: PipeChannel) -> asyncio.Event:
    """An event set once the channel stops reading (checked as each chunk arrives)."""
    held = asyncio.Event()
    inbox = channel._protocol.inbox
    original = inbox.on_frame

    def on_frame() -> None:
        if original is not None:
            original()
        if channel.reading_paused:
            held.set()

    inbox.on_frame = on_frame
    return held


async def test_a_channel_reader_that_falls_behind_stops_reading_the_socket() -> None:
    ours, theirs = socket.socketpair()
    theirs.setblocking(False)
    channel = await PipeChannel.open(ours)
    held = watch_for_hold(channel)
    data = b"".join(encode_frame(notice(i)) for i in range(FLOOD))
    sender = asyncio.ensure_future(asyncio.get_running_loop().sock_sendall(theirs, data))
    try:
        await asyncio.wait_for(held.wait(), 30)
        await let_the_loop_run()
        assert channel._protocol.inbox.buffered <= PipeChannel.high_water + CHUNK_FRAMES
        assert not sender.done()  # the sender is stuck on its full socket
        for i in range(FLOOD):
            frame = await asyncio.wait_for(channel.recv(), 30)
            assert isinstance(frame, Event) and frame.event == Notice(message=f"event {i}")
        await asyncio.wait_for(sender, 30)  # reading resumed: everything got through
        assert not channel.reading_paused
    finally:
        sender.cancel()
        channel.close()
        theirs.close()


async def test_the_pool_stops_reading_a_child_whose_frames_are_not_read(
    pool: WorkerPool,
) -> None:
    lease = await pool.acquire()
    try:
        held = watch_for_hold(lease._worker.channel)
        await lease.send(start("flood", events=FLOOD))
        await asyncio.wait_for(held.wait(), 30)
        await let_the_loop_run()
        assert lease.pending <= lease.high_water + CHUNK_FRAMES
        # The child cannot have finished: its result is behind events it could not send.
        assert lease.state is WorkerState.BUSY and lease.outcome is None
        frames = [frame async for frame in lease]
        notices = [f.event.message for f in frames if isinstance(f, Event)]
        assert notices == [f"event {i}" for i in range(FLOOD)]
        assert isinstance(frames[-1], Result) and frames[-1].result.text == "flooded"
    finally:
        outcome = await lease.release()
    assert outcome.kind is OutcomeKind.RESULT


async def test_a_held_child_that_is_cancelled_still_ends_promptly(pool: WorkerPool) -> None:
    lease = await pool.acquire()
    try:
        held = watch_for_hold(lease._worker.channel)
        await lease.send(start("flood", events=ENDLESS))
        await asyncio.wait_for(held.wait(), 30)
        lease.cancel("enough", grace=60)  # signals only after a minute: it must not need them
        outcome = await asyncio.wait_for(lease.wait(), 30)
    finally:
        await lease.release()
    # It stopped on the cancel frame and left by itself, its last frames read.
    assert outcome.signal is None and outcome.exit_code == 0, outcome
    assert outcome.result is not None and outcome.result.status.value == "cancelled"


async def test_a_cancelled_writer_waiting_for_the_peer_does_not_break_the_next_send() -> None:
    ours, theirs = socket.socketpair()
    channel = await PipeChannel.open(ours)
    try:
        while not channel._protocol._resume:  # write until the transport pauses us
            channel.send_nowait(notice(0))
        waiting = asyncio.ensure_future(channel.writable())
        await asyncio.sleep(0)  # a yield: it is now waiting on the peer
        waiting.cancel()
        await asyncio.wait({waiting})
        theirs.setblocking(False)
        drain = asyncio.ensure_future(drain_socket(theirs))
        await asyncio.wait_for(channel.send(notice(1)), 30)  # not the cancelled waiter's fate
        drain.cancel()
    finally:
        channel.close()
        theirs.close()


async def drain_socket(sock: socket.socket) -> None:
    loop = asyncio.get_running_loop()
    while await loop.sock_recv(sock, 1 << 16):
        pass
