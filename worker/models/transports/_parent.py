"""The link transport: a sub-agent's model requests, sent through its parent.

A child whose spec says ``model_via_parent`` builds its provider as usual (the same
classes the parent uses) over this transport instead of an httpx pool: each attempt's
JSON body goes to the parent as a ``ModelCall``; the parent checks it, adds the URL,
headers and key, sends it from its own pools, and streams the answer back as
``ModelHead``, ``ModelData``… and the end (a ``ModelEnd`` of its own, or riding on the
last bytes: a short answer is a single ``ModelHead`` with its body and end). The child
still parses the answer (a hostile server's bytes are parsed inside the sandbox), and
never holds a key or a connection to a model server.

Calls are told apart by id (one link serves every call of the run); closing a call that
has not ended sends ``ModelCancel``, and the parent cancels the request upstream.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
from collections.abc import AsyncIterator
from typing import Any, Protocol

from agentcell.protocol import (
    ChannelClosed,
    ModelCall,
    ModelCancel,
    ModelData,
    ModelEnd,
    ModelHead,
    sign_frame,
)
from agentcell.worker.models import ModelError, ModelErrorKind
from agentcell.worker.models.transports._base import Retry

#: ``ModelEnd.error_kind`` of a call the parent's checks refused (nothing was sent).
REFUSED = "refused"


class Link(Protocol):
    """What the transport needs of ``_child.ChildLink`` (not imported: the fork server's
    rehearsal uses this module, and ``_child`` the fork server's)."""

    channel: Any  # send / send_nowait
    model_link: Any  # where ``dispatch`` hands our frames


class LinkTransport:
    """A ``ModelTransport`` over the child's link to its parent."""

    def __init__(self, link: Link, key: bytes = b"") -> None:
        self._link = link
        self._key = key  # the run's frame key: the parent drops an unsigned call
        self._calls: dict[int, LinkResponse] = {}
        self._next_id = 0
        self._lost: str | None = None
        link.model_link = self

    async def open(self, body: bytes) -> LinkResponse:
        if self._lost is not None:
            raise _lost_error(self._lost)
        self._next_id += 1
        call = LinkResponse(self, self._next_id)
        self._calls[call.id] = call
        try:
            await self._link.channel.send(sign_frame(ModelCall(id=call.id, body=body), self._key))
            await call.head
        except ChannelClosed as exc:
            await call.aclose()
            raise _lost_error(str(exc)) from None
        except BaseException:
            await call.aclose()  # cancelled while waiting: the parent stops it too
            raise
        return call

    def dispatch(self, frame: ModelHead | ModelData | ModelEnd) -> None:
        """A frame of one of our calls (a call given up on drops its late frames)."""
        call = self._calls.get(frame.id)
        if call is not None:
            call.take(frame)

    def fail(self, exc: BaseException) -> None:
        """The channel to the parent is gone: every open call ends with it."""
        self._lost = str(exc) or type(exc).__name__
        for call in list(self._calls.values()):
            call.take(ModelEnd(id=call.id, error_kind="connection", message=self._lost))

    def _forget(self, call: LinkResponse, *, cancel: bool) -> None:
        self._calls.pop(call.id, None)
        if cancel and self._lost is None:
            with contextlib.suppress(ChannelClosed):
                self._link.channel.send_nowait(ModelCancel(id=call.id))

    async def aclose(self) -> None:
        for call in list(self._calls.values()):
            await call.aclose()


class LinkResponse:
    """One relayed call's answer (a ``TransportResponse``): its head, then its bytes."""

    def __init__(self, transport: LinkTransport, call_id: int) -> None:
        self.id = call_id
        self.status = 0
        self.headers: dict[str, str] = {}
        self.head: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._transport = transport
        self._items: collections.deque[bytes | ModelEnd] = collections.deque()
        self._arrived = asyncio.Event()
        self._ended = False  # the parent sent ModelEnd (or we closed it)

    def take(self, frame: ModelHead | ModelData | ModelEnd) -> None:
        """A frame of this call: a head (maybe with the first bytes, maybe with the end
        too), the next bytes (maybe the last, with the end), or the end alone."""
        if self._ended:
            return
        if isinstance(frame, ModelEnd):
            self._end(frame)
            return
        if isinstance(frame, ModelHead):
            if self.head.done():
                return  # a second head: ignored
            self.status, self.headers = frame.status, dict(frame.headers)
            self.head.set_result(None)
        if frame.data:
            self._items.append(frame.data)
            self._arrived.set()
        if frame.end is not None:
            self._end(frame.end)

    def _end(self, end: ModelEnd) -> None:
        self._ended = True
        self._transport._forget(self, cancel=False)
        if not self.head.done():
            self.head.set_exception(end_error(end) or _headless())
            self.head.exception()  # retrieved: nobody may wait on it any more
            return
        self._items.append(end)
        self._arrived.set()

    async def chunks(self) -> AsyncIterator[bytes]:
        items = self._items
        while True:
            while items:
                item = items.popleft()
                if isinstance(item, bytes):
                    yield item
                    continue
                error = end_error(item)
                if error is not None:
                    raise error
                return
            self._arrived.clear()
            await self._arrived.wait()

    async def aclose(self) -> None:
        if not self._ended:
            self._ended = True
            self._transport._forget(self, cancel=True)
        if not self.head.done():
            self.head.cancel()


def end_error(end: ModelEnd) -> Exception | None:
    """What a ``ModelEnd`` means in the child: None (complete), a ``Retry`` or a final
    ``ModelError`` — the same ones the direct route raises for the same failure."""
    if not end.error_kind:
        return None
    if end.error_kind == REFUSED:
        return ModelError(
            ModelErrorKind.BAD_REQUEST, f"the orchestrator refused the model request: {end.message}"
        )
    try:
        kind = ModelErrorKind(end.error_kind)
    except ValueError:
        kind = ModelErrorKind.PROTOCOL
    if end.retry:
        return Retry(kind, end.message, midstream=end.midstream or None)
    return ModelError(kind, end.message)


def _headless() -> ModelError:
    return ModelError(
        ModelErrorKind.PROTOCOL, "the orchestrator ended a model call before its response head"
    )


def _lost_error(why: str) -> ModelError:
    return ModelError(
        ModelErrorKind.CONNECTION, f"the channel to the orchestrator is closed ({why})"
    )
