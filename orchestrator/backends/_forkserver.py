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
import enum
import itertools
import logging
import os
import signal
from collections.abc import AsyncIterator, Callable
from typing import Any

import multiprocess
import multiprocess.forkserver
from agentcell.orchestrator.backends._interface import FrameQueue
from agentcell.orchestrator.backends._outcome import ChildOutcome, OutcomeKind, describe_exit
from agentcell.orchestrator.backends._starters import (
    FORK_SERVERS,
    MAX_STARTERS,
    default_starters,
    sweep_orphans,
)
from agentcell.protocol import (
    PROTOCOL_VERSION,
    ChannelClosed,
    Control,
    ControlAction,
    Failure,
    Frame,
    Heartbeat,
    Hello,
    PipeChannel,
    ProtocolError,
    Result,
    frame_is_authentic,
    new_frame_key,
)
from agentcell.worker import process as proc
from agentcell.worker import release_sandbox
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


class WorkerState(enum.Enum):
    # Launched, handshake pending. Left on its Hello (→ IDLE) or on death (→ DEAD).
    STARTING = "starting"
    # Handshake done: a warm spare. Left when leased (→ BUSY), or on kill/death.
    IDLE = "idle"
    # Serving one run for a lease. Left when the child ends (→ DEAD) or is killed (→ STOPPING).
    BUSY = "busy"
    # We sent a kill (deadline, heartbeat, protocol error, shutdown), or a spare exited and
    # what it left is being removed. Left when reaped and cleaned up (→ DEAD).
    STOPPING = "stopping"
    # Reaped; its outcome is final. Terminal.
    DEAD = "dead"


class _Worker:
    """Parent-side record of one child process."""

    def __init__(self, pool: WorkerPool, process: Any, channel: PipeChannel) -> None:
        self.pool = pool
        self.process = process
        self.pid: int = process.pid
        self.channel = channel
        self.state = WorkerState.STARTING
        self.started_at = pool._loop.time()
        self.last_seen = self.started_at
        self.hello: Hello | None = None
        self.result: Result | None = None
        self.failure: Failure | None = None
        self.peak_rss = 0
        self.kill_kind: OutcomeKind | None = None
        self.kill_detail = ""
        self.outcome: ChildOutcome | None = None
        self.dead = pool._loop.create_future()
        self.lease: Lease | None = None
        self.memory_limit: int | None = None  # bytes, for the whole process tree
        self.cpu_limit: float | None = None  # CPU seconds, for the whole process tree
        self._timers: list[asyncio.TimerHandle] = []
        # Signs what we send and checks what decides the run (see protocol's _frame_mac);
        # in force from the moment the Start carrying it is sent.
        self.forkserver = process.forkserver  # the one that forked it (it may be replaced)
        self.frame_key = new_frame_key()
        self.start_sent = False
        self.forged_frames = 0
        # We ended it after its report (a slow exit): a signal death then is ours.
        self.ended_by_us_after_report = False

    # -- incoming frames (called from the event loop, once per received chunk) -----------
    def on_channel_activity(self) -> None:
        channel = self.channel
        while True:
            try:
                frame = channel.poll()
            except ChannelClosed:
                return  # EOF is only a hint: the sentinel decides when the child is dead
            except ProtocolError as exc:
                self.kill(OutcomeKind.PROTOCOL_ERROR, f"protocol error: {exc}")
                return
            if frame is None:
                return
            self.on_frame(frame)

    def on_frame(self, frame: Frame) -> None:
        self.last_seen = self.pool._loop.time()
        if isinstance(frame, Heartbeat):
            self.peak_rss = max(self.peak_rss, frame.peak_rss_bytes)
            return
        if self.state is WorkerState.STARTING:
            self._on_hello(frame)
            return
        if self.lease is None:
            self.kill(
                OutcomeKind.PROTOCOL_ERROR,
                f"protocol error: idle child sent {type(frame).__name__}",
            )
            return
        if (
            isinstance(frame, Result | Failure)
            and self.start_sent
            and not frame_is_authentic(frame, self.frame_key)
        ):
            self.forged_frames += 1
            log.warning(
                "child %d: a %s frame without its signature was dropped (another process "
                "may hold a copy of its socket)",
                self.pid,
                type(frame).__name__,
            )
            return
        if isinstance(frame, Result):
            if self.result is not None:
                return  # one report per run: a second one is not the child's
            self.result = frame
            self.peak_rss = max(self.peak_rss, frame.peak_rss_bytes)
        elif isinstance(frame, Failure):
            self.failure = frame
        self.lease._deliver(frame)

    def _on_hello(self, frame: Frame) -> None:
        if not isinstance(frame, Hello):
            self.kill(
                OutcomeKind.PROTOCOL_ERROR,
                f"protocol error: expected Hello, got {type(frame).__name__}",
            )
            return
        if frame.protocol_version != PROTOCOL_VERSION:
            detail = (
                f"protocol mismatch: the child speaks v{frame.protocol_version}, the parent "
                f"v{PROTOCOL_VERSION}; install one agentcell version for both"
            )
            self.kill(OutcomeKind.PROTOCOL_ERROR, detail)
            self.pool._start_failed(detail, fatal=True)
            return
        if not frame.preload_ok and not self.pool._preload_warned:
            self.pool._preload_warned = True
            log.warning(
                "fork server preload incomplete (missing: %s): children start slower",
                ", ".join(frame.missing_preload),
            )
        self.hello = frame
        self.state = WorkerState.IDLE
        self.pool._on_ready(self)

    # -- ending --------------------------------------------------------------------------
    def kill(
        self,
        kind: OutcomeKind,
        detail: str,
        table: dict[int, proc.ProcInfo] | None = None,
    ) -> None:
        """End the child and everything it started — descendants that left its session
        included, found while the child still holds them together — for this reason."""
        if self.state is WorkerState.DEAD:
            return
        if self.kill_kind is None:
            self.kill_kind, self.kill_detail = kind, detail
        self.state = WorkerState.STOPPING
        if table is not None:
            proc.kill_tree(self.pid, signal.SIGKILL, table)  # scanned already: signals only
        else:
            self.kill_tree_off_loop()

    def kill_tree_off_loop(self, sig: int = signal.SIGKILL) -> None:
        """``kill_tree`` in a thread: it scans all of /proc, too slow for the event loop.
        The scan runs before the child is signalled, so its tree is still whole; the
        sentinel (the child's death) can only come after."""
        self.pool._background(asyncio.to_thread(proc.kill_tree, self.pid, sig))

    def escalate(
        self, kind: OutcomeKind, detail: str, cancel_grace: float, term_grace: float
    ) -> None:
        """Cancel politely, then SIGTERM the group, then SIGKILL the whole session."""
        if self.state is WorkerState.DEAD or self.kill_kind is not None:
            return
        self.kill_kind, self.kill_detail = kind, detail
        self.state = WorkerState.STOPPING
        with contextlib.suppress(ChannelClosed):
            self.channel.send_nowait(Control(action=ControlAction.CANCEL))
        loop = self.pool._loop
        self._timers.append(
            loop.call_later(cancel_grace, proc.kill_group, self.pid, signal.SIGTERM)
        )
        self._timers.append(loop.call_later(cancel_grace + term_grace, self.kill_tree_off_loop))

    def on_sentinel(self) -> None:
        loop = self.pool._loop
        loop.remove_reader(self.process.sentinel)
        exit_code = self.process.poll()
        if exit_code is None:  # spurious wake-up
            loop.add_reader(self.process.sentinel, self.on_sentinel)
            return
        for timer in self._timers:
            timer.cancel()
        # Dead now: its pid may be reused by the next child, which must not be shadowed
        # (or swept) by this one's record.
        FORK_SERVERS.known.discard(self.pid)
        if self.state is WorkerState.IDLE:
            # A spare that died (its fork server killed, say) is no longer one while its
            # leftovers are cleaned up in a thread: no lease may take it meanwhile.
            self.state = WorkerState.STOPPING
        # Its last frames are in the socket already; read them before deciding anything.
        self.channel.read_remaining()
        self.on_channel_activity()
        # Nothing more can be sent to a dead child: close the socket now, and the
        # process's sentinel with it (not whenever the garbage collector gets to them).
        self.channel.abort()
        self.process.close()
        clean = self.result is not None and exit_code == 0 and self.kill_kind is None
        # A clean child reaped its own descendants (it is their subreaper): one cheap
        # signal to its group suffices. Otherwise, everything left in its session goes.
        if not clean:
            # Descendants that left its session (setsid, double fork) were reparented to
            # the fork server when it died: find and end them too.
            self.pool._sweep_orphans_soon()
        if not clean or proc.kill_group(self.pid):
            self.pool._background(self._finish_after_sweep(exit_code))
            return
        self.pool._background(self._finish_after_release(exit_code))

    async def _finish_after_sweep(self, exit_code: int) -> None:
        """Declare the child dead only once what it left behind is gone too. The /proc
        scan that finds the leftovers runs in a thread, off the event loop."""
        try:
            signalled = await asyncio.to_thread(proc.kill_session, self.pid)
            leftovers = [p for p in signalled if p != self.pid]
            if leftovers:
                await wait_gone(leftovers, within=10.0)
        finally:
            await self._finish_after_release(exit_code)

    async def _finish_after_release(self, exit_code: int) -> None:
        """Remove the child's cgroup (every spare makes one) and private temp folder,
        then declare it dead. In a thread: removing a cgroup waits on the kernel's cgroup
        locks, ~1.5 ms per child at N=128, which stalled the event loop."""
        try:
            await asyncio.to_thread(release_sandbox, self.pid)
        finally:
            self._finish(exit_code)

    def _finish(self, exit_code: int) -> None:
        # (Its pid left FORK_SERVERS.known when the sentinel fired, without a lock: one
        # set operation is atomic, and waiting for a starter's lock stalled the loop.)
        self.outcome = self._outcome(exit_code)
        self.state = WorkerState.DEAD
        self.dead.set_result(self.outcome)
        if self.lease is not None:
            self.lease._deliver(None)
        self.pool._on_dead(self)

    def _outcome(self, exit_code: int) -> ChildOutcome:
        code, sig, exit_text = describe_exit(exit_code)
        result = self.result.result if self.result is not None else None
        common = {
            "pid": self.pid,
            "exit_code": code,
            "signal": sig,
            "result": result,
            "failure": self.failure,
            "peak_rss_bytes": self.peak_rss,
        }
        if self.kill_kind is not None:
            return ChildOutcome(kind=self.kill_kind, detail=self.kill_detail, **common)  # type: ignore[arg-type]
        if sig is not None and not self.ended_by_us_after_report:
            # A report followed by a death by signal is not a finished run: the report
            # may be forged, and whatever killed the child is the news.
            detail = exit_text
            if result is not None or self.failure is not None:
                detail += "; its report before dying was not accepted"
            return ChildOutcome(kind=OutcomeKind.SIGNALED, detail=detail, **common)  # type: ignore[arg-type]
        if result is not None:
            detail = result.status.value
            return ChildOutcome(kind=OutcomeKind.RESULT, detail=detail, **common)  # type: ignore[arg-type]
        if self.failure is not None:
            detail = f"{self.failure.error_type}: {self.failure.message}"
            return ChildOutcome(kind=OutcomeKind.FAILURE, detail=detail, **common)  # type: ignore[arg-type]
        kind = OutcomeKind.SIGNALED if sig is not None else OutcomeKind.EXITED
        if self.forkserver is not None and not proc.is_alive(self.forkserver):
            exit_text = (
                "its fork server died (killed from outside?), and the child with it; "
                "the pool starts a new fork server for the next runs"
            )
        return ChildOutcome(kind=kind, detail=exit_text, **common)  # type: ignore[arg-type]


class Lease(FrameQueue):
    """Exclusive use of one ready child for one run.

    ``send`` frames to it, ``recv`` its frames (heartbeats are absorbed) until ``None``,
    which means the child has ended; ``outcome`` then says how.
    """

    def __init__(self, worker: _Worker) -> None:
        super().__init__()
        self._worker = worker
        self._waiting = False  # someone waits for the end without reading: never hold

    def _sealing(self) -> _Worker:
        return self._worker

    @property
    def pid(self) -> int:
        return self._worker.pid

    @property
    def node(self) -> str:
        """Where the child runs: "" for this machine."""
        return ""

    @property
    def state(self) -> WorkerState:
        return self._worker.state

    @property
    def outcome(self) -> ChildOutcome | None:
        return self._worker.outcome

    @property
    def hello(self) -> Hello | None:
        return self._worker.hello

    #: Frames a lease holds for a reader that fell behind before the pool stops reading
    #: the child's socket (the child then blocks on its full pipe), and the count it
    #: must fall back to before reading resumes.
    high_water = 1024
    low_water = 256

    def _after_put(self) -> None:
        if len(self._frames) >= self.high_water and not self._ended and not self._waiting:
            self._worker.channel.hold("lease")

    def _after_take(self) -> None:
        if len(self._frames) <= self.low_water and self._worker.channel.reading_paused:
            self._worker.last_seen = self._worker.pool._loop.time()  # silence was ours
            self._worker.channel.release("lease")

    async def send(self, frame: Frame) -> None:
        """Send a frame; raises ``ChannelClosed`` if the child is gone."""
        await self._worker.channel.send(self._sealed(frame))

    def send_nowait(self, frame: Frame) -> None:
        self._worker.channel.send_nowait(self._sealed(frame))

    async def wait(self) -> ChildOutcome:
        """Wait until the child has ended (frames not yet read stay readable)."""
        # Nobody reads while we wait: a held pipe would keep a cancelled child from
        # sending its last frames and exiting.
        self._waiting = True
        self._worker.channel.release("lease")
        return await asyncio.shield(self._worker.dead)

    def set_deadline(
        self, seconds: float, *, cancel_grace: float = 2.0, term_grace: float = 2.0
    ) -> None:
        """After ``seconds``: cancel frame, then SIGTERM, then SIGKILL to the session."""
        worker = self._worker
        detail = f"deadline of {seconds:g} s passed"
        worker._timers.append(
            worker.pool._loop.call_later(
                seconds,
                worker.escalate,
                OutcomeKind.DEADLINE,
                detail,
                cancel_grace,
                term_grace,
            )
        )

    def set_memory_limit(self, limit_bytes: int) -> None:
        """Kill the child when its process tree's resident memory goes over ``limit_bytes``.

        Checked by the pool's watchdog with psutil over the child and every descendant (a
        tool's subprocesses count too), so it catches what RLIMIT_AS cannot: memory held
        by grandchildren.
        """
        self._worker.memory_limit = limit_bytes
        self._worker.pool._memory_watch = True

    def set_cpu_limit(self, seconds: float) -> None:
        """Kill the child when its process tree has used more than ``seconds`` of CPU.

        RLIMIT_CPU counts each process alone: twelve busy subshells of one bash use
        twelve times the limit. The watchdog sums the whole tree, the exited subshells
        included (their time is in their parents' reaped-children counts).
        """
        self._worker.cpu_limit = seconds
        self._worker.pool._memory_watch = True

    def cancel(self, reason: str = "cancelled", *, grace: float = 2.0) -> None:
        """Ask the child to stop, escalating to signals if it does not within ``grace``."""
        self._worker.escalate(OutcomeKind.KILLED, reason, grace, grace)

    def kill(self, reason: str = "killed by the caller") -> None:
        self._worker.kill(OutcomeKind.KILLED, reason)

    async def release(self) -> ChildOutcome:
        """Make sure the child is gone; returns its outcome."""
        worker = self._worker
        if worker.state is not WorkerState.DEAD:
            if worker.result is None and worker.failure is None:
                worker.kill(OutcomeKind.KILLED, "lease released before the child finished")
            else:
                # It has reported and is exiting: give it a moment, then make sure. A slow
                # exit does not change the outcome of a run that was delivered.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.shield(worker.dead), worker.pool.exit_grace)
                if not worker.dead.done():
                    worker.ended_by_us_after_report = True
                    worker.kill_tree_off_loop()
        return await asyncio.shield(worker.dead)


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
        self._tasks: set[asyncio.Future[Any]] = set()
        self._watchdog: asyncio.Task[None] | None = None
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
        self._open = True
        self._watchdog = asyncio.create_task(self._watch())
        self._replenish()
        return self

    def _ensure_forkserver(self) -> None:
        _skip_main_in_children()
        modules = [*PRELOAD_MODULES, *self._extra_preload, BOOT_MODULE]
        FORK_SERVERS.open(self.starters, modules, _minimal_environment)
        # What an orchestrator killed before its clean-up left: the cgroups of its spares.
        proc.remove_stale_caps()

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
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        workers = list(self._workers.values())
        table = await asyncio.to_thread(proc.process_table)  # one scan for all, off the loop
        for worker in workers:
            worker.kill(OutcomeKind.KILLED, "the pool was closed", table)
        if workers:
            await asyncio.wait([w.dead for w in workers], timeout=30)
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

    def _background(self, work: Any) -> None:
        """Run ``work`` as a task the pool waits for on close."""
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _sweep_orphans_soon(self) -> None:
        if self._spawner is None or self._closed:
            return
        future = self._loop.run_in_executor(self._spawner, sweep_orphans)
        self._tasks.add(future)
        future.add_done_callback(self._tasks.discard)

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
        room = self.max_workers - self.live
        for _ in range(max(0, min(want, room))):
            self._spawn()

    def _spawn(self) -> None:
        self._spawning += 1
        future = asyncio.ensure_future(self._launch())
        self._tasks.add(future)
        future.add_done_callback(self._tasks.discard)

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
                ):
                    worker.kill(
                        OutcomeKind.HEARTBEAT,
                        f"no heartbeat for {silent:.1f} s (limit {self.heartbeat_timeout:g} s); "
                        "the child was killed",
                    )
                elif worker.state is WorkerState.STARTING and silent > self.start_timeout:
                    worker.kill(OutcomeKind.KILLED, f"no handshake within {self.start_timeout:g} s")


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


async def wait_gone(pids: list[int], within: float) -> None:
    """Wait until every pid has exited (not just been signalled), via pidfds.

    A pidfd becomes readable when its process exits, whoever its parent is — these are
    not our children, so waitpid cannot tell us.
    """
    loop = asyncio.get_running_loop()
    waiters = []
    fds = []
    for pid in pids:
        try:
            fd = os.pidfd_open(pid)
        except ProcessLookupError:
            continue  # already gone
        fds.append(fd)
        done = loop.create_future()
        loop.add_reader(fd, _resolve, done)
        waiters.append(done)
    try:
        if waiters:
            await asyncio.wait(waiters, timeout=within)
    finally:
        for fd in fds:
            loop.remove_reader(fd)
            os.close(fd)


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


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
