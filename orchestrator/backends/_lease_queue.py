"""The pool's lease queue: which ready child goes to which caller.

Ready spares wait in ``spares``, callers of ``acquire`` in ``waiters``; a child that says
Hello goes to the first caller still waiting, else joins the spares. The queue also keeps
the counts that say how many children the spawner (``_spawner``) should have started:
leases announced ahead (``expect``) and slots lent by children waiting on their own
sub-agents (``lend_slot``).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
from typing import Protocol

from agentcell.orchestrator.backends._workers import Lease, WorkerState, _Worker


class _Spawner(Protocol):
    """What the queue asks of the pool's spawner (``_spawner.Spawner``)."""

    halted: bool

    def _replenish(self) -> None: ...
    def _on_ready(self, worker: _Worker) -> None: ...
    def _retire_later(self) -> None: ...


class _Pool(Protocol):
    """What the queue uses of its pool (``_forkserver.WorkerPool``)."""

    _loop: asyncio.AbstractEventLoop

    @property
    def spawner(self) -> _Spawner: ...


class LeaseQueue:
    """Hands ready children to callers in turn; see the module's docstring."""

    def __init__(self, pool: _Pool) -> None:
        self._pool = pool
        # Ready children no lease took yet, the oldest first; one that died meanwhile is
        # passed over when its turn comes.
        self.spares: collections.deque[_Worker] = collections.deque()
        self.waiters: collections.deque[asyncio.Future[_Worker]] = collections.deque()
        self.ready = asyncio.Event()  # a child joined the spares
        self.expected = 0  # leases announced by expect() and not withdrawn
        self.lent = 0  # slots of children waiting on their nested sub-agents (lend_slot)

    async def acquire(self) -> Lease:
        """Wait for a ready child and take it."""
        spawner = self._pool.spawner
        spawner.halted = False  # a new request is a new chance after start failures
        while True:
            worker = self._take_idle()
            if worker is None:
                worker = await self._wait_for_worker()
            # It may have died between being handed over and this task resuming.
            if worker.state is WorkerState.IDLE:
                break
        worker.state = WorkerState.BUSY
        lease = Lease(worker)
        worker.lease = lease
        worker.last_seen = self._pool._loop.time()
        spawner._replenish()
        return lease

    def _take_idle(self) -> _Worker | None:
        while self.spares:
            candidate = self.spares.popleft()
            if candidate.state is WorkerState.IDLE:
                return candidate
        return None

    async def _wait_for_worker(self) -> _Worker:
        waiter: asyncio.Future[_Worker] = self._pool._loop.create_future()
        self.waiters.append(waiter)
        self._pool.spawner._replenish()
        try:
            return await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled() and waiter.exception() is None:
                self._pool.spawner._on_ready(waiter.result())  # hand it to the next in line
            else:
                with contextlib.suppress(ValueError):
                    self.waiters.remove(waiter)
            raise

    def offer(self, worker: _Worker) -> None:
        """A child is ready: to the first caller still waiting, else to the spares."""
        while self.waiters:
            waiter = self.waiters.popleft()
            if not waiter.done():
                waiter.set_result(worker)
                return
        self.spares.append(worker)
        self.ready.set()

    def fail_waiters(self, error: Exception) -> None:
        """Every caller still waiting gets ``error`` instead of a child."""
        while self.waiters:
            waiter = self.waiters.popleft()
            if not waiter.done():
                waiter.set_exception(error)

    def expect(self, n: int) -> None:
        """``WorkerPool.expect``: ``n`` more leases are on their way (negative: withdraw)."""
        self.expected = max(0, self.expected + n)
        if n > 0:
            self._pool.spawner._replenish()
        elif n < 0:
            self._pool.spawner._retire_later()

    def lend_slot(self, change: int) -> None:
        """``WorkerPool.lend_slot``: a slot lent (+1) or taken back (-1)."""
        self.lent += change
        if change > 0:
            self._pool.spawner._replenish()
