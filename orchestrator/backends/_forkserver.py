"""The worker pool: one fresh OS process per run, with warm spares started ahead.

Children come from a multiprocess fork server with the heavy modules preloaded, so a
start costs a fork of a warm interpreter rather than a new one. A child serves one run
and is never reused. Each child has a private socketpair pipe to the parent; its death
is read from its process sentinel (authoritative) and its pipe's EOF is only a hint.

``WorkerPool`` is what the rest of agentcell holds: its lifecycle and its leasing surface.
Its parts do the work: ``_spawner`` starts children, ``_lease_queue`` hands ready ones to
callers, ``_watchdog`` kills those that go silent or over a limit, ``_workers`` is one
child's record and the lease on it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any

from agentcell.orchestrator.backends._descriptors import workers_that_fit
from agentcell.orchestrator.backends._interface import PoolError
from agentcell.orchestrator.backends._lease_queue import LeaseQueue
from agentcell.orchestrator.backends._outcome import OutcomeKind
from agentcell.orchestrator.backends._spawner import Spawner
from agentcell.orchestrator.backends._starters import MAX_STARTERS, default_starters
from agentcell.orchestrator.backends._watchdog import Watchdog
from agentcell.orchestrator.backends._workers import (
    Lease,
    PoolTimings,
    WorkerState,
    _Worker,
)
from agentcell.protocol import TaskNursery
from agentcell.worker import process as proc
from agentcell.worker.process import ChildBoot, child_main

log = logging.getLogger("agentcell.pool")


class WorkerPool:
    """Processes for sub-agent runs: ``async with WorkerPool() as pool: lease = ...``.

    ``max_workers`` bounds live children (a lease waits for room); ``warm`` spares are
    kept started so that a lease does not wait for a process start. The work is done by
    three parts: the ``spawner`` starts children, the ``queue`` hands ready ones to
    callers, the ``watchdog`` kills those that go silent or over their limits.
    """

    def __init__(
        self,
        *,
        max_workers: int = 32,
        warm: int = 2,
        heartbeat_timeout: float = 30.0,
        boot: ChildBoot | None = None,
        preload: list[str] | None = None,
        target: Callable[..., None] = child_main,
        surplus_idle_s: float = 30.0,
        starters: int | None = None,
        timings: PoolTimings | None = None,
    ) -> None:
        if max_workers < 1:
            raise ValueError("max_workers must be at least 1")
        if warm < 0:
            raise ValueError("warm must be 0 or more")
        if starters is not None and not 1 <= starters <= MAX_STARTERS:
            raise ValueError(f"starters must be from 1 to {MAX_STARTERS}")
        self.max_workers = max_workers
        self.warm = min(warm, max_workers)
        self.heartbeat_timeout = heartbeat_timeout
        self.timings = timings or PoolTimings()
        self.boot = boot or ChildBoot()
        # Fork servers taking start requests side by side (each forks one at a time),
        # and as many threads handing them requests.
        self.starters = starters or default_starters()
        # How long a spare started ahead for an expectation that was then withdrawn may
        # wait idle for a run (the next turn's fan-out, say) before spares beyond ``warm``
        # are retired.
        self.surplus_idle_s = surplus_idle_s
        self._workers: dict[int, _Worker] = {}
        self._preload_warned = False
        self._open = False
        self._closed = False
        # Its own tasks, each owned by a group it enters in start and closes in close:
        # process starts (waited for first), then the watchdog and the clean-ups.
        self._spawns = TaskNursery("the worker pool's process starts")
        self._tasks = TaskNursery("the worker pool")
        self._loop: asyncio.AbstractEventLoop = None  # type: ignore[assignment]
        self.queue = LeaseQueue(self)
        self.spawner = Spawner(self, list(preload or []), target)
        self.watchdog = Watchdog(self)

    # -- lifecycle -----------------------------------------------------------------------
    async def start(self) -> WorkerPool:
        if self._open:
            return self
        if self._closed:
            raise PoolError("this pool is closed; create a new one")
        self._loop = asyncio.get_running_loop()
        # Before any child: the soft open-file limit raised for max_workers children (or
        # fewer of them at once, with a warning, where the hard limit is too low).
        self.max_workers = workers_that_fit(self.max_workers)
        self.warm = min(self.warm, self.max_workers)
        await self.spawner.open()
        await self._spawns.open()
        await self._tasks.open()
        self._open = True
        self.watchdog.start()
        self.spawner._replenish()
        return self

    async def __aenter__(self) -> WorkerPool:
        return await self.start()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Kill every child (and what it started), reap them, stop the fork server."""
        if self._closed:
            return
        self._closed = True
        if not self._open:
            return
        self.queue.fail_waiters(PoolError("the pool was closed"))
        self.watchdog.stop()
        # Spawns in flight finish first (each kills its child on seeing the pool closed),
        # so that no process appears after the kill below.
        await self._spawns.aclose(cancel=False)
        workers = list(self._workers.values())
        table = await asyncio.to_thread(proc.process_table)  # one scan for all, off the loop
        for worker in workers:
            worker.kill(OutcomeKind.KILLED, "the pool was closed", table)
        if workers:
            await asyncio.wait([w.dead for w in workers], timeout=30)
        await self._tasks.aclose()  # what a death or a kill still had going
        await self.spawner.close()

    # -- leasing ------------------------------------------------------------------------
    async def acquire(self) -> Lease:
        """Wait for a ready child and take it. Prefer ``async with pool.lease()``."""
        if not self._open or self._closed:
            raise PoolError("the pool is not running (use 'async with WorkerPool() as pool')")
        return await self.queue.acquire()

    @contextlib.asynccontextmanager
    async def lease(self) -> AsyncIterator[Lease]:
        """A ready child for one run; on exit the child is ended and reaped."""
        lease = await self.acquire()
        try:
            yield lease
        finally:
            await lease.release()

    def expect(self, n: int) -> None:
        """``n`` more leases are on their way (negative: withdraw that many): keep that
        many more processes starting or ready beyond ``warm``, within ``max_workers``.

        What is already started for a withdrawn expectation is not killed (the leases it
        was for may still come): it waits as an idle spare, and spares beyond ``warm``
        are retired ``surplus_idle_s`` after the last withdrawal if no lease took them.
        """
        self.queue.expect(n)

    @property
    def expected(self) -> int:
        """Leases announced by ``expect`` and not withdrawn yet."""
        return self.queue.expected

    def lend_slot(self, change: int) -> None:
        """A child waiting on its own nested sub-agent lends (+1) or takes back (-1) its
        place under ``max_workers`` (``Lease.slot_lent``)."""
        self.queue.lend_slot(change)

    # -- bookkeeping --------------------------------------------------------------------
    @property
    def live(self) -> int:
        """Children alive or being started (the quantity ``max_workers`` bounds)."""
        return len(self._workers) + self.spawner.spawning

    @property
    def waiting(self) -> int:
        """Callers queued in ``acquire`` for a child."""
        return sum(1 for w in self.queue.waiters if not w.done())

    @property
    def idle(self) -> int:
        return sum(1 for w in self.queue.spares if w.state is WorkerState.IDLE)

    def pids(self) -> list[int]:
        return list(self._workers)

    async def warmed(self) -> None:
        """Wait until ``warm`` spares are started and idle (a benchmark's starting line)."""
        ready = self.queue.ready
        while self.idle < self.warm:
            ready.clear()
            await ready.wait()

    def _background(self, work: Coroutine[Any, Any, Any]) -> None:
        """Run ``work`` as a task of the pool's group: its failure is logged, and close
        cancels and awaits it."""
        if not self._tasks.is_open:  # a death noticed after close had given up waiting
            work.close()
            log.warning("the pool is closed: a clean-up of a dead child did not run")
            return
        self._tasks.start(work)
