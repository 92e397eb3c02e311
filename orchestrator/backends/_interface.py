"""What the runner needs from a process backend: a lease on one fresh worker per run.

Two backends implement it: the local fork-server pool (``WorkerPool``) and Ray
(``RayBackend``). A lease carries frames both ways, ends in exactly one ``ChildOutcome``,
and can be given a deadline, cancelled politely or killed. ``FrameQueue`` is what both
backends' leases share; ``PoolError`` is what either raises when it has no worker to give.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
from collections.abc import AsyncIterator
from typing import Generic, Protocol, TypeVar

from agentcell.orchestrator.backends._outcome import ChildOutcome, OutcomeKind
from agentcell.protocol import (
    DelegateRequest,
    Frame,
    Hello,
    ModelCall,
    SpanBatch,
    Start,
    ToolRecord,
    frame_is_authentic,
    seal_for_child,
)

#: What a child's frame must be signed with its key to count (``protocol._frame_mac``).
_SIGNED = (SpanBatch, ModelCall, ToolRecord, DelegateRequest)


class PoolError(Exception):
    """The pool cannot provide a child (closed, or children fail to start)."""


class WorkerLease(Protocol):
    @property
    def pid(self) -> int: ...

    @property
    def node(self) -> str: ...

    @property
    def hello(self) -> Hello | None: ...

    @property
    def outcome(self) -> ChildOutcome | None: ...

    async def send(self, frame: Frame) -> None: ...

    def send_nowait(self, frame: Frame) -> None: ...

    async def recv(self) -> Frame | None: ...

    async def wait(self) -> ChildOutcome: ...

    def set_deadline(
        self, seconds: float, *, cancel_grace: float = 2.0, term_grace: float = 2.0
    ) -> None: ...

    def set_memory_limit(self, limit_bytes: int) -> None: ...

    def set_cpu_limit(self, seconds: float) -> None: ...

    def slot_lent(self) -> contextlib.AbstractContextManager[None]:
        """While the child waits on a nested delegation, its slot is the backend's."""
        ...

    def cancel(self, reason: str = "cancelled", *, grace: float = 2.0) -> None: ...

    def kill(self, reason: str = "killed by the caller") -> None: ...

    async def release(self) -> ChildOutcome: ...


class Backend(Protocol):
    """Where sub-agent processes come from."""

    async def acquire(self) -> WorkerLease: ...

    def expect(self, n: int) -> None:
        """A hint: ``n`` more ``acquire`` calls are on their way (a model is still
        streaming their ``task`` calls), so start processes for them now; a negative
        ``n`` withdraws that many. Starting early is all it may do: an expectation never
        holds a process back from another caller, nor lets more run than the backend's
        limit. A backend that cannot start ahead ignores it."""

    async def close(self) -> None: ...


class LeasedWorker(Protocol):
    """What a lease's shared part uses of the parent's record of its child (the local
    pool's ``_Worker``, Ray's ``_RemoteWorker``)."""

    frame_key: bytes
    start_sent: bool

    @property
    def pid(self) -> int: ...

    @property
    def hello(self) -> Hello | None: ...

    def kill(self, kind: OutcomeKind, detail: str) -> None: ...


_W = TypeVar("_W", bound=LeasedWorker)


class FrameQueue(WorkerLease, Generic[_W]):
    """What both backends' leases share: the record of the child they lease, the child's
    frames queued for one reader until the child has ended, and the parent's frames sealed
    with the child's key on the way out. ``_after_put``/``_after_take`` let a backend apply
    flow control."""

    def __init__(self, worker: _W) -> None:
        self._worker = worker
        self._frames: collections.deque[Frame] = collections.deque()
        self._ended = False
        self._waiter: asyncio.Future[None] | None = None

    @property
    def pid(self) -> int:
        return self._worker.pid

    @property
    def hello(self) -> Hello | None:
        return self._worker.hello

    def kill(self, reason: str = "killed by the caller") -> None:
        self._worker.kill(OutcomeKind.KILLED, reason)

    def _sealed(self, frame: Frame) -> Frame:
        """The Start carries this child's frame key; approval replies are signed with it."""
        worker = self._worker
        if isinstance(frame, Start):
            worker.start_sent = True
        sealed: Frame = seal_for_child(frame, worker.frame_key)
        return sealed

    def _deliver(self, frame: Frame | None) -> None:
        if isinstance(frame, _SIGNED) and not self._signed(frame):
            return  # spans, model calls, tool records, delegations unsigned: not the child's
        if frame is None:
            self._ended = True
        else:
            self._frames.append(frame)
            self._after_put()
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _signed(self, frame: SpanBatch | ModelCall | ToolRecord | DelegateRequest) -> bool:
        worker = self._worker
        return bool(worker.frame_key) and frame_is_authentic(frame, worker.frame_key)

    def _after_put(self) -> None:
        return None

    def _after_take(self) -> None:
        return None

    async def recv(self) -> Frame | None:
        """The child's next frame, or None once it has ended and every frame was read."""
        while not self._frames:
            if self._ended:
                return None
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        frame = self._frames.popleft()
        self._after_take()
        return frame

    @property
    def pending(self) -> int:
        """Frames received from the child and not read yet."""
        return len(self._frames)

    async def __aiter__(self) -> AsyncIterator[Frame]:
        while (frame := await self.recv()) is not None:
            yield frame
