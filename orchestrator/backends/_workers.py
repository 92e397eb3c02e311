"""One child of the pool, as the parent sees it: its state machine (``_Worker``), the
``Lease`` a run holds on it, and how its death is read and settled into one outcome; and
``PoolTimings``, how long the pool and its children's records wait.

Split from ``_forkserver`` (the pool), ``_spawner`` (starting), ``_lease_queue``
(leasing, spares) and ``_watchdog``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import enum
import logging
import os
import signal
from collections.abc import Coroutine, Iterator
from typing import Any, Protocol

from agentcell.orchestrator.backends._interface import FrameQueue
from agentcell.orchestrator.backends._outcome import ChildOutcome, OutcomeKind, describe_exit
from agentcell.orchestrator.backends._preload import preload_warning
from agentcell.orchestrator.backends._starters import (
    FORK_SERVERS,
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


@dataclasses.dataclass(frozen=True)
class PoolTimings:
    """How long the pool and its children's records wait (``WorkerPool(timings=...)``):
    settings a caller rarely changes, and tests shorten."""

    #: Between two scans of the memory and CPU of children that have a limit.
    memory_period: float = 0.25
    #: For a started child's handshake (its Hello): past it, a failed start.
    start_timeout: float = 60.0
    #: For a child that reported to exit: then it is ended, and its report stands.
    exit_grace: float = 5.0


class _Spawner(Protocol):
    """What a child's record tells the spawner that started it (``_spawner.Spawner``)."""

    def _on_ready(self, worker: _Worker) -> None: ...
    def _on_dead(self, worker: _Worker) -> None: ...
    def _start_failed(self, detail: str, *, fatal: bool = False) -> None: ...


class _Watchdog(Protocol):
    """What a child's record asks of the pool's watchdog (``_watchdog.Watchdog``)."""

    memory_watch: bool

    def _sweep_orphans_soon(self) -> None: ...


class WorkerPool(Protocol):
    """What a child's record uses of its pool (``_forkserver.WorkerPool``)."""

    _loop: asyncio.AbstractEventLoop
    _preload_warned: bool

    @property
    def timings(self) -> PoolTimings: ...
    @property
    def spawner(self) -> _Spawner: ...
    @property
    def watchdog(self) -> _Watchdog: ...

    def _background(self, work: Coroutine[Any, Any, Any]) -> None: ...
    def lend_slot(self, change: int) -> None: ...


log = logging.getLogger("agentcell.pool")


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
            self._end_if_slow_to_exit()
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
            self.pool.spawner._start_failed(detail, fatal=True)
            return
        if not frame.preload_ok and not self.pool._preload_warned:
            self.pool._preload_warned = True
            log.warning("%s", preload_warning(frame.missing_preload))
        self.hello = frame
        self.state = WorkerState.IDLE
        self.pool.spawner._on_ready(self)

    # -- ending --------------------------------------------------------------------------
    def _end_if_slow_to_exit(self) -> None:
        """A child that reported and has not exited within ``exit_grace`` is ended then:
        its run is over, and however its exit hangs (a reaping wait, a stop) the Result
        stands — it is not left to go silent and be recorded as crashed."""

        def end() -> None:
            if self.state is not WorkerState.DEAD and self.kill_kind is None:
                self.ended_by_us_after_report = True
                self.kill_tree_off_loop()

        self._timers.append(self.pool._loop.call_later(self.pool.timings.exit_grace, end))

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
            self.pool.watchdog._sweep_orphans_soon()
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
        self.pool.spawner._on_dead(self)

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
        if self.process.server_died:
            exit_text = (
                "its fork server died (killed from outside?), and the child with it; "
                "the pool starts a new fork server for the next runs"
            )
        return ChildOutcome(kind=kind, detail=exit_text, **common)  # type: ignore[arg-type]


class Lease(FrameQueue[_Worker]):
    """Exclusive use of one ready child for one run.

    ``send`` frames to it, ``recv`` its frames (heartbeats are absorbed) until ``None``,
    which means the child has ended; ``outcome`` then says how.
    """

    def __init__(self, worker: _Worker) -> None:
        super().__init__(worker)
        self._waiting = False  # someone waits for the end without reading: never hold

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

    @contextlib.contextmanager
    def slot_lent(self) -> Iterator[None]:
        """While this child waits on a nested delegation, its place under ``max_workers``
        is lent to the pool: the nested sub-agent may start although every slot is held
        (a waiting parent holding the only slot its child could use deadlocked the pool).
        The child's process still exists meanwhile; it waits, and uses no CPU."""
        pool = self._worker.pool
        pool.lend_slot(+1)
        try:
            yield
        finally:
            pool.lend_slot(-1)

    def set_memory_limit(self, limit_bytes: int) -> None:
        """Kill the child when its process tree's resident memory goes over ``limit_bytes``.

        Checked by the pool's watchdog with psutil over the child and every descendant (a
        tool's subprocesses count too), so it catches what RLIMIT_AS cannot: memory held
        by grandchildren.
        """
        self._worker.memory_limit = limit_bytes
        self._worker.pool.watchdog.memory_watch = True

    def set_cpu_limit(self, seconds: float) -> None:
        """Kill the child when its process tree has used more than ``seconds`` of CPU.

        RLIMIT_CPU counts each process alone: twelve busy subshells of one bash use
        twelve times the limit. The watchdog sums the whole tree, the exited subshells
        included (their time is in their parents' reaped-children counts).
        """
        self._worker.cpu_limit = seconds
        self._worker.pool.watchdog.memory_watch = True

    def cancel(self, reason: str = "cancelled", *, grace: float = 2.0) -> None:
        """Ask the child to stop, escalating to signals if it does not within ``grace``."""
        self._worker.escalate(OutcomeKind.KILLED, reason, grace, grace)

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
                    await asyncio.wait_for(
                        asyncio.shield(worker.dead), worker.pool.timings.exit_grace
                    )
                if not worker.dead.done():
                    worker.ended_by_us_after_report = True
                    worker.kill_tree_off_loop()
        return await asyncio.shield(worker.dead)


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
