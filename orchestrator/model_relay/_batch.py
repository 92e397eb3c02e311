"""A relayed answer in as few frames as streaming allows.

A provider streams an answer as many small SSE events, and one upstream socket read
often holds dozens of them (httpcore hands each HTTP chunk on alone, without another
read). Relaying each as its own frame cost the parent an encode, a write and a system
call per event, and the child a wake-up and a decode. ``relay_chunks`` joins what the
upstream has *ready*: it asks the source for its next chunk and, if the answer would
mean waiting for the network, first sends what it holds. So a chunk is never held back
for more to come — the first byte still leaves as soon as it arrives — and a burst
leaves as one frame (or a few, at the size bound). ``CallFrames`` then puts the
answer's head on its first bytes and its end on its last: a short answer read in one
go is one frame instead of three.

To know whether the source would wait, its next step is started by hand
(``step.send(None)``): a step that finishes at once had its chunk ready (a bare
``yield``, the checkpoint anyio's locks take, only lets a loop round pass and does not
count as waiting); one that hands back a future would wait on it, and is then awaited
to its end by ``_finish`` exactly as ``await`` would have (what the event loop sends or
throws in, a cancellation included, goes on to it). While a step is open nothing else
is awaited — the read's own timeout and cancel scope (httpcore's, under anyio) see the
task as if it awaited the read directly — so the send made just before the wait is
started by hand too, and its own wait for the child's pipe (backpressure) is finished
once the read is done, before the next read starts.
"""

from __future__ import annotations

import types
from collections.abc import AsyncIterator, Awaitable, Callable, Generator
from typing import Any

import msgspec
from agentcell.orchestrator.model_relay._key_mask import KeyMask
from agentcell.protocol import Frame, ModelData, ModelEnd, ModelHead

#: The most bytes joined into one batch.
BATCH_BYTES = 64 * 1024
#: The most body bytes in one frame: well under the frame limit (a batch is split).
MAX_DATA_BYTES = 256 * 1024


async def relay_chunks(
    chunks: AsyncIterator[bytes],
    send: Callable[[bytes], Awaitable[None]],
    limit: int = BATCH_BYTES,
) -> bytes:
    """Pass the bytes of ``chunks`` on to ``send``, in order, joined into batches of
    what the source had ready (up to ``limit`` bytes); ``send`` is also called with
    ``b""`` when the source would wait with nothing held. Returns the bytes the source
    had ready when it ended (the caller sends them with the end)."""
    source = aiter(chunks)
    pending: list[bytes] = []
    size = 0
    while True:
        step = source.__anext__().__await__()
        try:
            ready, got = _resume(step.send, None)
            while not ready and got is None:  # a checkpoint (sleep(0)), not a wait
                ready, got = await _pass_checkpoint(step)
        except StopAsyncIteration:
            return _joined(pending)
        except Exception:  # the source failed: what it had ready goes first
            await send(_joined(pending))
            raise
        if ready:
            pending.append(got)
            size += len(got)
            if size >= limit:
                await send(_joined(pending))
                pending, size = [], 0
            continue
        waiting_on = got
        # The source would wait: what it had ready goes now, not after the wait.
        sending = _Started(send(_joined(pending)))
        pending, size = [], 0
        try:
            chunk = await _finish(step, waiting_on)
        except StopAsyncIteration:
            await sending.finish()
            return b""
        except Exception:  # the source failed after the wait
            await sending.finish()
            raise
        except BaseException:  # cancelled: nothing more is sent
            sending.close()
            raise
        await sending.finish()
        pending.append(chunk)
        size += len(chunk)


def _joined(parts: list[bytes]) -> bytes:
    if not parts:
        return b""
    return parts[0] if len(parts) == 1 else b"".join(parts)


class _Started:
    """An awaitable run by hand up to its first wait (or to its end, or its error):
    ``finish`` awaits the rest, ``close`` drops it."""

    def __init__(self, awaitable: Awaitable[None]) -> None:
        self._step: Generator[Any, Any, None] | None = None
        self._waiting_on: Any = None
        self._error: BaseException | None = None
        step = awaitable.__await__()
        try:
            self._waiting_on = step.send(None)
        except StopIteration:
            return
        except Exception as exc:  # the channel closed, say: raised once the read is done
            self._error = exc
            return
        self._step = step

    async def finish(self) -> None:
        if self._error is not None:
            raise self._error
        if self._step is not None:
            step, self._step = self._step, None
            await _finish(step, self._waiting_on)

    def close(self) -> None:
        if self._step is not None:
            self._step.close()
            self._step = None


def _resume(step: Callable[[Any], Any], value: Any) -> tuple[bool, Any]:
    """(True, its result) if the step ended, else (False, what it yielded)."""
    try:
        return False, step(value)
    except StopIteration as done:
        return True, done.value


@types.coroutine
def _pass_checkpoint(step: Generator[Any, Any, Any]) -> Generator[Any, Any, tuple[bool, Any]]:
    """Let the loop round the step yielded for (a bare ``yield``: anyio's and asyncio's
    checkpoint) pass, then resume it; as ``_resume``."""
    try:
        sent = yield None
    except GeneratorExit:
        step.close()
        raise
    except BaseException as exc:
        return _resume(step.throw, exc)
    return _resume(step.send, sent)


@types.coroutine
def _finish(step: Generator[Any, Any, Any], waiting_on: Any) -> Generator[Any, Any, Any]:
    """Await the rest of ``step``, started by hand and suspended on ``waiting_on``: the
    values the event loop sends in, and the exceptions it throws in, go on to it."""
    while True:
        try:
            sent = yield waiting_on
        except GeneratorExit:  # we are closed unfinished (never by the event loop)
            step.close()
            raise
        except BaseException as exc:  # a cancellation, first of all: the read gets it
            try:
                waiting_on = step.throw(exc)
            except StopIteration as done:
                return done.value
        else:
            try:
                waiting_on = step.send(sent)
            except StopIteration as done:
                return done.value


class CallFrames:
    """The frames of one relayed answer: the head waits for the body's first bytes (or
    goes alone when the upstream makes the relay wait first), the last bytes carry the
    end. ``feed`` sees every body byte, in order (the usage scan); ``mask`` rewrites
    them on their way to the child (the parent's key masked, ``_key_mask``)."""

    def __init__(
        self,
        send: Callable[[Frame], Awaitable[None]],
        head: ModelHead,
        feed: Callable[[bytes], None] | None = None,
        mask: KeyMask | None = None,
        *,
        keep: bool = False,
    ) -> None:
        self._send = send
        #: Every body byte the child was sent, masked (for the journal), when ``keep``.
        self.kept: list[bytes] | None = [] if keep else None
        self._head: ModelHead | None = head
        self._id = head.id
        self._feed = feed
        self._mask = mask if mask else None
        self._tail = b""

    async def send(self, data: bytes) -> None:
        if data and self._feed is not None:
            self._feed(data)
        if self._mask is not None:
            data = self._mask.stream(data)
        if self.kept is not None:
            self.kept.append(data)
        for frame in self._frames(data, None):
            await self._send(frame)

    def hold(self, data: bytes) -> None:
        """The answer's last bytes: they go with its end."""
        if data and self._feed is not None:
            self._feed(data)
        self._tail += self._mask.stream(data) if self._mask is not None else data

    async def end(self, end: ModelEnd) -> None:
        if self._mask is not None:
            self._tail += self._mask.flush()
        tail, self._tail = self._tail, b""
        if self.kept is not None:
            self.kept.append(tail)
        for frame in self._frames(tail, end):
            await self._send(frame)

    def _frames(self, data: bytes, end: ModelEnd | None) -> list[Frame]:
        pieces = [data[at : at + MAX_DATA_BYTES] for at in range(0, len(data), MAX_DATA_BYTES)]
        pieces = pieces or [b""]
        frames: list[Frame] = []
        for i, piece in enumerate(pieces):
            last = end if i == len(pieces) - 1 else None
            if self._head is not None:
                frames.append(msgspec.structs.replace(self._head, data=piece, end=last))
                self._head = None
            elif piece:
                frames.append(ModelData(id=self._id, data=piece, end=last))
            elif last is not None:
                frames.append(last)
        return frames
