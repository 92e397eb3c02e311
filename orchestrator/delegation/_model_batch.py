"""A relayed answer's bytes in as few ``ModelData`` frames as streaming allows.

A provider streams an answer as many small SSE events, and an upstream socket read
often holds dozens of them (httpcore hands each HTTP chunk on alone, without another
read). Relaying each as its own frame costs the parent an encode, a write and a system
call per event, and the child a wake-up and a decode. ``relay_chunks`` joins what the
upstream has *ready*: it asks the source for its next chunk and, if the answer would
mean waiting for the network, first sends what it holds. So a chunk is never held back
for more to come — the first byte still leaves as soon as it arrives — and a burst
leaves as one frame (or a few, at the size bound).

To know whether the source would wait, its next step is started by hand
(``step.send(None)``): a step that finishes at once had its chunk ready; one that hands
back a future would wait on it, and is then awaited to its end by ``_finish`` exactly as
``await`` would have (what the event loop sends or throws in, a cancellation included,
goes on to it). While a step is started nothing else is awaited: the read's own timeout
and cancel scope (httpcore's, under anyio) see the task as if it awaited the read
directly. The backpressure wait on the child's pipe is taken with the first chunk after
each wait, when no step is open.
"""

from __future__ import annotations

import types
from collections.abc import AsyncIterator, Awaitable, Callable, Generator
from typing import Any

#: The most bytes joined into one batch (the frame limit is far above it).
BATCH_BYTES = 64 * 1024


async def relay_chunks(
    chunks: AsyncIterator[bytes],
    send: Callable[[bytes], Awaitable[None]],
    send_nowait: Callable[[bytes], None],
    limit: int = BATCH_BYTES,
) -> None:
    """Pass the bytes of ``chunks`` on, in order, joined into batches of what the source
    had ready (up to ``limit`` bytes). ``send`` waits for the peer to keep up (it is
    called with the first chunk after each wait, and at the size bound); ``send_nowait``
    is called with what was ready just before the source would wait."""
    source = aiter(chunks)
    pending: list[bytes] = []
    size = 0
    while True:
        step = source.__anext__().__await__()
        try:
            waiting_on = step.send(None)
        except StopIteration as ready:
            pending.append(ready.value)
            size += len(ready.value)
            if size >= limit:
                await send(_joined(pending))
                pending, size = [], 0
            continue
        except StopAsyncIteration:
            break
        # The source would wait: what it had ready goes now, not after the wait.
        if pending:
            send_nowait(_joined(pending))
            pending, size = [], 0
        try:
            chunk = await _finish(step, waiting_on)
        except StopAsyncIteration:
            return
        await send(chunk)
    if pending:
        await send(_joined(pending))


def _joined(parts: list[bytes]) -> bytes:
    return parts[0] if len(parts) == 1 else b"".join(parts)


@types.coroutine
def _finish(step: Generator[Any, Any, bytes], waiting_on: Any) -> Generator[Any, Any, bytes]:
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
                return done.value  # type: ignore[no-any-return]
        else:
            try:
                waiting_on = step.send(sent)
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]
