"""The pool's spawner: starting children, and what each start's end means.

It keeps as many children started or ready as are wanted (``warm`` spares, one per caller
waiting, one per lease expected), within ``max_workers`` (``_replenish``); launches each
through the fork servers (``_starters``), from as many threads; hands a child that says
Hello to the lease queue (``_lease_queue``); counts the starts that fail, three in a row
failing the callers (the installation is broken); and retires spares started ahead that
no run took (``_retire_surplus``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import logging
from collections.abc import Callable
from typing import Any, Protocol

import multiprocess
from agentcell.orchestrator.backends._interface import PoolError
from agentcell.orchestrator.backends._lease_queue import LeaseQueue
from agentcell.orchestrator.backends._outcome import OutcomeKind
from agentcell.orchestrator.backends._starters import FORK_SERVERS
from agentcell.orchestrator.backends._workers import WorkerPool, WorkerState, _Worker
from agentcell.protocol import PipeChannel, TaskNursery
from agentcell.worker import process as proc
from agentcell.worker.process import (
    BOOT_MODULE,
    PRELOAD_MODULES,
    ChildBoot,
    encode_request,
)

log = logging.getLogger("agentcell.pool")


class WorkerStartError(PoolError):
    """Children die before their handshake: the installation or environment is broken."""


class _Pool(WorkerPool, Protocol):
    """What the spawner uses of its pool (``_forkserver.WorkerPool``), besides what it
    hands each child's record."""

    _open: bool
    _closed: bool
    _workers: dict[int, _Worker]
    _spawns: TaskNursery
    boot: ChildBoot
    starters: int
    max_workers: int
    warm: int
    surplus_idle_s: float

    @property
    def queue(self) -> LeaseQueue: ...
    @property
    def live(self) -> int: ...
    @property
    def idle(self) -> int: ...
    @property
    def waiting(self) -> int: ...


class Spawner:
    """Starts the pool's children; see the module's docstring."""

    def __init__(self, pool: _Pool, preload: list[str], target: Callable[..., None]) -> None:
        self._pool = pool
        self._extra_preload = preload
        self._target = target
        # Threads handing start requests to the fork servers, one per server (each forks
        # one at a time); made in open.
        self.threads: concurrent.futures.ThreadPoolExecutor | None = None
        self._next_starter = itertools.count()
        self._ids = itertools.count(1)
        self._ctx = multiprocess.get_context("forkserver")
        self.spawning = 0  # launches not yet a child's record
        self._start_failures = 0
        self.halted = False  # children keep failing to start: wait for the next acquire
        self._retire_timer: asyncio.TimerHandle | None = None

    # -- the fork servers ----------------------------------------------------------------
    async def open(self) -> None:
        pool = self._pool
        self.threads = concurrent.futures.ThreadPoolExecutor(pool.starters, "agentcell-spawn")
        await pool._loop.run_in_executor(self.threads, self._ensure_forkserver)

    def _ensure_forkserver(self) -> None:
        _skip_main_in_children()
        # The caller's own modules go by the environment: the boot module imports them,
        # each failure caught (multiprocess's own loop would die of all but ImportError).
        preload = self._extra_preload
        FORK_SERVERS.open(
            self._pool.starters,
            [*PRELOAD_MODULES, BOOT_MODULE],
            lambda: {**_minimal_environment(), **proc.preload_environment(preload)},
        )
        # What an orchestrator killed before its clean-up left: the cgroups of its spares.
        proc.remove_stale_caps()
        proc.remove_stale_tmps()  # and their private temp folders

    async def close(self) -> None:
        """Once every child is gone: stop the threads, and the fork servers."""
        if self._retire_timer is not None:  # nothing is left to retire
            self._retire_timer.cancel()
            self._retire_timer = None
        assert self.threads is not None
        self.threads.shutdown(wait=True)
        await self._pool._loop.run_in_executor(None, FORK_SERVERS.close)

    # -- how many -------------------------------------------------------------------------
    def starting(self) -> int:
        return self.spawning + sum(
            1 for w in self._pool._workers.values() if w.state is WorkerState.STARTING
        )

    def _replenish(self) -> None:
        pool = self._pool
        if not pool._open or pool._closed or self.halted:
            return
        queue = pool.queue
        starting = self.starting()
        # Expected leases count like waiting ones: a model streaming N task calls has
        # N processes starting before it has finished writing them.
        want = pool.warm + len(queue.waiters) + queue.expected - pool.idle - starting
        room = pool.max_workers + queue.lent - pool.live
        for _ in range(max(0, min(want, room))):
            self._spawn()

    def _retire_later(self) -> None:
        """Retire the spares beyond what is wanted ``surplus_idle_s`` from now (what is
        started for a withdrawn expectation may still be taken by the leases it was for)."""
        pool = self._pool
        if not pool._open or pool._closed:
            return
        if self._retire_timer is not None:
            self._retire_timer.cancel()
        self._retire_timer = pool._loop.call_later(pool.surplus_idle_s, self._retire_surplus)

    def _retire_surplus(self) -> None:
        self._retire_timer = None
        pool = self._pool
        if not pool._open or pool._closed:
            return
        starting = self.starting()
        # What is idle or on its way beyond what is wanted (starting ones go to waiters).
        surplus = pool.idle + starting - pool.warm - pool.queue.expected - pool.waiting
        if surplus <= 0:
            return
        # Only ready spares can be ended, and only those beyond what is wanted once the
        # starting ones are up: a ready warm spare is never traded for one still starting.
        ready_surplus = min(surplus, pool.idle - pool.warm)
        idle = [w for w in reversed(pool.queue.spares) if w.state is WorkerState.IDLE]
        for worker in idle[: max(0, ready_surplus)]:  # the newest first: acquire takes the oldest
            worker.kill(OutcomeKind.KILLED, "a spare started ahead that no run needed")
        if surplus > max(0, ready_surplus):  # some is still starting: retire it once it is up
            self._retire_later()

    # -- one start -----------------------------------------------------------------------
    def _spawn(self) -> None:
        self.spawning += 1
        self._pool._spawns.start(self._launch())

    async def _launch(self) -> None:
        pool = self._pool
        assert self.threads is not None
        if pool._closed:
            self.spawning -= 1
            return
        try:
            parent_conn, child_conn = self._ctx.Pipe(duplex=True)
        except OSError as exc:  # out of file descriptors, say
            self.spawning -= 1
            self._start_failed(f"could not create a pipe for a child: {exc}")
            self._replenish()
            return
        request = encode_request(self._target, (pool.boot,), f"{_CHILD_NAME}{next(self._ids)}")
        try:
            process = await pool._loop.run_in_executor(
                self.threads, FORK_SERVERS.start, next(self._next_starter), request, child_conn
            )
        except BaseException as exc:
            self.spawning -= 1
            child_conn.close()
            parent_conn.close()
            self._start_failed(f"could not start a child process: {exc}")
            self._replenish()  # a passing failure (EAGAIN) must not strand a waiter
            return
        finally:
            child_conn.close()
        try:
            channel = await PipeChannel.open(parent_conn, max_frame_bytes=pool.boot.max_frame_bytes)
        except BaseException:
            self.spawning -= 1
            proc.kill_session(process.pid)
            process.close()
            FORK_SERVERS.known.discard(process.pid)
            raise
        self.spawning -= 1
        worker = _Worker(pool, process, channel)
        pool._workers[worker.pid] = worker
        channel.set_frame_callback(worker.on_channel_activity)
        pool._loop.add_reader(process.sentinel, worker.on_sentinel)
        worker.on_channel_activity()  # its Hello may be here already
        if pool._closed:
            worker.kill(OutcomeKind.KILLED, "the pool was closed")

    def _on_ready(self, worker: _Worker) -> None:
        self._start_failures = 0
        self._pool.queue.offer(worker)

    def _on_dead(self, worker: _Worker) -> None:
        del self._pool._workers[worker.pid]
        if worker.hello is None and worker.kill_kind is None:
            self._start_failed(f"a child died before its handshake: {worker.outcome}")
        self._replenish()

    def _start_failed(self, detail: str, *, fatal: bool = False) -> None:
        self._start_failures += 1
        log.error("%s", detail)
        if fatal or self._start_failures >= 3:
            # Something is wrong with the installation: fail callers rather than loop.
            error = WorkerStartError(
                detail
                if fatal
                else f"{self._start_failures} children in a row failed to start; last: {detail}"
            )
            self._pool.queue.fail_waiters(error)
            self._start_failures = 0
            self.halted = True  # no more attempts until someone asks again


def _minimal_environment() -> dict[str, str]:
    """The environment the fork server (and the resource tracker) start with: the allowlist.

    A process's initial environment stays readable in ``/proc/<pid>/environ`` whatever it
    does to ``os.environ`` later, and every child inherits the fork server's: started with
    the parent's full environment, it would hand the parent's API keys to any tool that
    reads ``/proc/$PPID/environ``. Children get their credentials per run instead. It is
    passed to their exec (``_starters``); ``os.environ`` is never changed for it.
    """
    from agentcell.orchestrator.backends._environment import child_environment

    minimal, _ = child_environment("")
    return minimal


_CHILD_NAME = "agentcell-child-"


def _skip_main_in_children() -> None:
    """Children do not re-import the parent's ``__main__``.

    multiprocess re-runs the main module in every child it starts so that pickled
    references into it resolve. Our process target lives in ``worker``, and closures
    from ``__main__`` travel by value (dill), so a child has no use for the parent's
    main module; re-running it (a CLI, a test runner, a user script) would cost every
    child an import of everything the parent uses.
    """
    from multiprocess import spawn

    original = spawn.get_preparation_data
    if getattr(original, "_agentcell", False):
        return

    def get_preparation_data(name: str) -> dict[str, Any]:
        data: dict[str, Any] = original(name)
        if name.startswith(_CHILD_NAME):
            data.pop("init_main_from_name", None)
            data.pop("init_main_from_path", None)
        return data

    get_preparation_data._agentcell = True  # type: ignore[attr-defined]
    spawn.get_preparation_data = get_preparation_data
