"""The worker pool: one fresh OS process per run, with warm spares started ahead.

Children come from a multiprocess fork server with the heavy modules preloaded, so a
start costs a fork of a warm interpreter rather than a new one. A child serves one run
and is never reused. Each child has a private socketpair pipe to the parent; its death
is read from its process sentinel (authoritative) and its pipe's EOF is only a hint.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import itertools
import logging
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any

import multiprocess
import multiprocess.forkserver
from agentcell.orchestrator.backends._outcome import OutcomeKind
from agentcell.orchestrator.backends._starters import (
    FORK_SERVERS,
    MAX_STARTERS,
    default_starters,
    sweep_orphans,
)
from agentcell.orchestrator.backends._workers import (
    Lease,
    WorkerState,
    _Worker,
)
from agentcell.protocol import (
    PipeChannel,
    TaskNursery,
)
from agentcell.worker import process as proc
from agentcell.worker.process import (
    BOOT_MODULE,
    PRELOAD_MODULES,
    ChildBoot,
    child_main,
    encode_request,
)

log = logging.getLogger("agentcell.pool")


class PoolError(Exception):
    """The pool cannot provide a child (closed, or children fail to start)."""


class WorkerStartError(PoolError):
    """Children die before their handshake: the installation or environment is broken."""


class WorkerPool:
    """Processes for sub-agent runs: ``async with WorkerPool() as pool: lease = ...``.

    ``max_workers`` bounds live children (a lease waits for room); ``warm`` spares are
    kept started so that a lease does not wait for a process start.
    """

    def __init__(
        self,
        *,
        max_workers: int = 32,
        warm: int = 2,
        heartbeat_timeout: float = 30.0,
        memory_period: float = 0.25,
        start_timeout: float = 60.0,
        exit_grace: float = 5.0,
        boot: ChildBoot | None = None,
        preload: list[str] | None = None,
        target: Callable[..., None] = child_main,
        surplus_idle_s: float = 30.0,
        starters: int | None = None,
    ) -> None:
        if max_workers < 1:
            raise ValueError("max_workers must be at least 1")
        if warm < 0:
            raise ValueError("warm must be 0 or more")
        if starters is not None and not 1 <= starters <= MAX_STARTERS:
            raise ValueError(f"starters must be from 1 to {MAX_STARTERS}")
        self.max_workers = max_workers
        self._lent = 0  # slots of children waiting on their nested sub-agents (lend_slot)
        self.warm = min(warm, max_workers)
        self.heartbeat_timeout = heartbeat_timeout
        self.memory_period = memory_period
        self.start_timeout = start_timeout
        self.exit_grace = exit_grace
        self.boot = boot or ChildBoot()
        self._extra_preload = list(preload or [])
        self._target = target
        # Fork servers taking start requests side by side (each forks one at a time),
        # and as many threads handing them requests.
        self.starters = starters or default_starters()
        self._next_starter = itertools.count()
        # How long a spare started ahead for an expectation that was then withdrawn may
        # wait idle for a run (the next turn's fan-out, say) before spares beyond ``warm``
        # are retired.
        self.surplus_idle_s = surplus_idle_s
        self._expected = 0  # leases announced by expect() and not withdrawn
        self._retire_timer: asyncio.TimerHandle | None = None
        self._workers: dict[int, _Worker] = {}
        self._spawning = 0
        self._idle: collections.deque[_Worker] = collections.deque()
        self._waiters: collections.deque[asyncio.Future[_Worker]] = collections.deque()
        self._start_failures = 0
        self._ready = asyncio.Event()
        self._memory_watch = False  # set once any lease has a memory limit
        self._halted = False  # children keep failing to start: wait for the next acquire
        self._preload_warned = False
        self._open = False
        self._closed = False
        # Its own tasks, each owned by a group it enters in start and closes in close:
        # process starts (waited for first), then the watchdog and the clean-ups.
        self._spawns = TaskNursery("the worker pool's process starts")
        self._tasks = TaskNursery("the worker pool")
        self._watchdog: asyncio.Task[None | None] | None = None
        self._spawner: concurrent.futures.ThreadPoolExecutor | None = None
        self._ids = itertools.count(1)
        self._loop: asyncio.AbstractEventLoop = None  # type: ignore[assignment]
        self._ctx = multiprocess.get_context("forkserver")

    # -- lifecycle -----------------------------------------------------------------------
    async def start(self) -> WorkerPool:
        if self._open:
            return self
        if self._closed:
            raise PoolError("this pool is closed; create a new one")
        self._loop = asyncio.get_running_loop()
        self._spawner = concurrent.futures.ThreadPoolExecutor(self.starters, "agentcell-spawn")
        await self._loop.run_in_executor(self._spawner, self._ensure_forkserver)
        await self._spawns.open()
        await self._tasks.open()
        self._open = True
        self._watchdog = self._tasks.start(self._watch(), name="pool watchdog")
        self._replenish()
        return self

    def _ensure_forkserver(self) -> None:
        _skip_main_in_children()
        # The caller's own modules go by the environment: the boot module imports them,
        # each failure caught (multiprocess's own loop would die of all but ImportError).
        preload = self._extra_preload
        FORK_SERVERS.open(
            self.starters,
            [*PRELOAD_MODULES, BOOT_MODULE],
            lambda: {**_minimal_environment(), **proc.preload_environment(preload)},
        )
        # What an orchestrator killed before its clean-up left: the cgroups of its spares.
        proc.remove_stale_caps()
        proc.remove_stale_tmps()  # and their private temp folders

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
        for waiter in self._waiters:
            if not waiter.done():
                waiter.set_exception(PoolError("the pool was closed"))
        self._waiters.clear()
        if self._retire_timer is not None:  # nothing is left to retire
            self._retire_timer.cancel()
            self._retire_timer = None
        if self._watchdog is not None:
            self._watchdog.cancel()
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
        assert self._spawner is not None
        self._spawner.shutdown(wait=True)
        await self._loop.run_in_executor(None, self._release_forkserver)

    @staticmethod
    def _release_forkserver() -> None:
        FORK_SERVERS.close()

    # -- leasing ------------------------------------------------------------------------
    async def acquire(self) -> Lease:
        """Wait for a ready child and take it. Prefer ``async with pool.lease()``."""
        if not self._open or self._closed:
            raise PoolError("the pool is not running (use 'async with WorkerPool() as pool')")
        self._halted = False  # a new request is a new chance after start failures
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
        worker.last_seen = self._loop.time()
        self._replenish()
        return lease

    def _take_idle(self) -> _Worker | None:
        while self._idle:
            candidate = self._idle.popleft()
            if candidate.state is WorkerState.IDLE:
                return candidate
        return None

    async def _wait_for_worker(self) -> _Worker:
        waiter: asyncio.Future[_Worker] = self._loop.create_future()
        self._waiters.append(waiter)
        self._replenish()
        try:
            return await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled() and waiter.exception() is None:
                self._on_ready(waiter.result())  # hand it to the next in line
            else:
                with contextlib.suppress(ValueError):
                    self._waiters.remove(waiter)
            raise

    @contextlib.asynccontextmanager
    async def lease(self) -> AsyncIterator[Lease]:
        """A ready child for one run; on exit the child is ended and reaped."""
        lease = await self.acquire()
        try:
            yield lease
        finally:
            await lease.release()

    # -- bookkeeping --------------------------------------------------------------------
    @property
    def live(self) -> int:
        """Children alive or being started (the quantity ``max_workers`` bounds)."""
        return len(self._workers) + self._spawning

    @property
    def waiting(self) -> int:
        """Callers queued in ``acquire`` for a child."""
        return sum(1 for w in self._waiters if not w.done())

    @property
    def idle(self) -> int:
        return sum(1 for w in self._idle if w.state is WorkerState.IDLE)

    async def _check_memory(self) -> None:
        watched = [
            w
            for w in self._workers.values()
            if (w.memory_limit is not None or w.cpu_limit is not None)
            and w.state is WorkerState.BUSY
        ]
        if not watched:
            return
        # One scan of /proc for every watched child, off the event loop.
        table = await asyncio.to_thread(proc.process_table)
        for worker in watched:
            if worker.state is not WorkerState.BUSY:
                continue
            cpu_limit = worker.cpu_limit
            if cpu_limit is not None:
                cpu = proc.tree_cpu_seconds(worker.pid, table)
                if cpu > cpu_limit:
                    worker.kill(
                        OutcomeKind.CPU,
                        f"CPU time limit exceeded: its processes used {cpu:.1f} CPU seconds, "
                        f"the limit is {cpu_limit:g} (cpu_limit_s)",
                        table,
                    )
                    continue
            limit = worker.memory_limit
            if limit is None:
                continue
            used = proc.tree_rss(worker.pid, table)
            worker.peak_rss = max(worker.peak_rss, used)
            if used > limit:
                worker.kill(
                    OutcomeKind.MEMORY,
                    f"memory limit exceeded: its processes used {used / 2**20:.0f} MiB, "
                    f"the limit is {limit / 2**20:.0f} MiB",
                )

    def pids(self) -> list[int]:
        return list(self._workers)

    def _background(self, work: Coroutine[Any, Any, Any]) -> None:
        """Run ``work`` as a task of the pool's group: its failure is logged, and close
        cancels and awaits it."""
        if not self._tasks.is_open:  # a death noticed after close had given up waiting
            work.close()
            log.warning("the pool is closed: a clean-up of a dead child did not run")
            return
        self._tasks.start(work)

    def _sweep_orphans_soon(self) -> None:
        if self._spawner is None or self._closed:
            return
        self._tasks.start(self._sweep_orphans())

    async def _sweep_orphans(self) -> None:
        await self._loop.run_in_executor(self._spawner, sweep_orphans)

    # -- starting ahead (Backend.expect) ------------------------------------------------
    def expect(self, n: int) -> None:
        """``n`` more leases are on their way (negative: withdraw that many): keep that
        many more processes starting or ready beyond ``warm``, within ``max_workers``.

        What is already started for a withdrawn expectation is not killed (the leases it
        was for may still come): it waits as an idle spare, and spares beyond ``warm``
        are retired ``surplus_idle_s`` after the last withdrawal if no lease took them.
        """
        self._expected = max(0, self._expected + n)
        if n > 0:
            self._replenish()
        elif n < 0 and self._open and not self._closed:
            if self._retire_timer is not None:
                self._retire_timer.cancel()
            self._retire_timer = self._loop.call_later(self.surplus_idle_s, self._retire_surplus)

    @property
    def expected(self) -> int:
        """Leases announced by ``expect`` and not withdrawn yet."""
        return self._expected

    def _retire_surplus(self) -> None:
        self._retire_timer = None
        if not self._open or self._closed:
            return
        starting = self._starting()
        # What is idle or on its way beyond what is wanted (starting ones go to waiters).
        surplus = self.idle + starting - self.warm - self._expected - self.waiting
        if surplus <= 0:
            return
        # Only ready spares can be ended, and only those beyond what is wanted once the
        # starting ones are up: a ready warm spare is never traded for one still starting.
        ready_surplus = min(surplus, self.idle - self.warm)
        idle = [w for w in reversed(self._idle) if w.state is WorkerState.IDLE]
        for worker in idle[: max(0, ready_surplus)]:  # the newest first: acquire takes the oldest
            worker.kill(OutcomeKind.KILLED, "a spare started ahead that no run needed")
        if surplus > max(0, ready_surplus):  # some is still starting: retire it once it is up
            self._retire_timer = self._loop.call_later(self.surplus_idle_s, self._retire_surplus)

    def lend_slot(self, change: int) -> None:
        """A child waiting on its own nested sub-agent lends (+1) or takes back (-1) its
        place under ``max_workers`` (``Lease.slot_lent``)."""
        self._lent += change
        if change > 0:
            self._replenish()

    def _starting(self) -> int:
        return self._spawning + sum(
            1 for w in self._workers.values() if w.state is WorkerState.STARTING
        )

    def _replenish(self) -> None:
        if not self._open or self._closed or self._halted:
            return
        starting = self._starting()
        # Expected leases count like waiting ones: a model streaming N task calls has
        # N processes starting before it has finished writing them.
        want = self.warm + len(self._waiters) + self._expected - self.idle - starting
        room = self.max_workers + self._lent - self.live
        for _ in range(max(0, min(want, room))):
            self._spawn()

    def _spawn(self) -> None:
        self._spawning += 1
        self._spawns.start(self._launch())

    async def _launch(self) -> None:
        assert self._spawner is not None
        if self._closed:
            self._spawning -= 1
            return
        try:
            parent_conn, child_conn = self._ctx.Pipe(duplex=True)
        except OSError as exc:  # out of file descriptors, say
            self._spawning -= 1
            self._start_failed(f"could not create a pipe for a child: {exc}")
            self._replenish()
            return
        request = encode_request(self._target, (self.boot,), f"{_CHILD_NAME}{next(self._ids)}")
        try:
            process = await self._loop.run_in_executor(
                self._spawner, FORK_SERVERS.start, next(self._next_starter), request, child_conn
            )
        except BaseException as exc:
            self._spawning -= 1
            child_conn.close()
            parent_conn.close()
            self._start_failed(f"could not start a child process: {exc}")
            self._replenish()  # a passing failure (EAGAIN) must not strand a waiter
            return
        finally:
            child_conn.close()
        try:
            channel = await PipeChannel.open(parent_conn, max_frame_bytes=self.boot.max_frame_bytes)
        except BaseException:
            self._spawning -= 1
            proc.kill_session(process.pid)
            process.close()
            FORK_SERVERS.known.discard(process.pid)
            raise
        self._spawning -= 1
        worker = _Worker(self, process, channel)
        self._workers[worker.pid] = worker
        channel.set_frame_callback(worker.on_channel_activity)
        self._loop.add_reader(process.sentinel, worker.on_sentinel)
        worker.on_channel_activity()  # its Hello may be here already
        if self._closed:
            worker.kill(OutcomeKind.KILLED, "the pool was closed")

    def _on_ready(self, worker: _Worker) -> None:
        self._start_failures = 0
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(worker)
                return
        self._idle.append(worker)
        self._ready.set()

    async def warmed(self) -> None:
        """Wait until ``warm`` spares are started and idle (a benchmark's starting line)."""
        while self.idle < self.warm:
            self._ready.clear()
            await self._ready.wait()

    def _on_dead(self, worker: _Worker) -> None:
        del self._workers[worker.pid]
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
            while self._waiters:
                waiter = self._waiters.popleft()
                if not waiter.done():
                    waiter.set_exception(error)
            self._start_failures = 0
            self._halted = True  # no more attempts until someone asks again

    async def _watch(self) -> None:
        """Kill children that went silent (no frame for ``heartbeat_timeout``) or that
        went over their memory limit."""
        while True:
            period = min(1.0, self.heartbeat_timeout / 4)
            if self._memory_watch:
                period = min(period, self.memory_period)
            await asyncio.sleep(max(0.05, period))
            now = self._loop.time()
            if self._memory_watch:
                await self._check_memory()
            for worker in list(self._workers.values()):
                silent = now - worker.last_seen
                held = worker.channel.reading_paused  # its heartbeats wait behind its frames
                if (
                    worker.state is WorkerState.BUSY
                    and silent > self.heartbeat_timeout
                    and not held
                    and worker.result is None  # reported: ended after exit_grace instead
                ):
                    worker.kill(
                        OutcomeKind.HEARTBEAT,
                        f"no heartbeat for {silent:.1f} s (limit {self.heartbeat_timeout:g} s); "
                        "the child was killed",
                    )
                elif worker.state is WorkerState.STARTING and silent > self.start_timeout:
                    detail = f"no handshake within {self.start_timeout:g} s"
                    worker.kill(OutcomeKind.KILLED, detail)
                    # a start that hangs is a failed start: counted, or it retries for ever
                    self._start_failed(f"a child was killed: {detail}")


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
