"""The pool's watchdog: it kills the children that went silent, that never said Hello, or
that went over their memory or CPU limit, and it sweeps up what dead children left.

A child's heartbeat is any frame; one that sends none for ``heartbeat_timeout`` while it
serves a run is killed (not while the parent holds its pipe: its heartbeats wait behind
its frames). The memory and CPU of a child with a limit are those of its whole process
tree, scanned from /proc every ``memory_period``.
"""

from __future__ import annotations

import asyncio
from typing import Protocol

from agentcell.orchestrator.backends._outcome import OutcomeKind
from agentcell.orchestrator.backends._spawner import Spawner
from agentcell.orchestrator.backends._starters import sweep_orphans
from agentcell.orchestrator.backends._workers import PoolTimings, WorkerState, _Worker
from agentcell.protocol import TaskNursery
from agentcell.worker import process as proc


class _Pool(Protocol):
    """What the watchdog uses of its pool (``_forkserver.WorkerPool``)."""

    _loop: asyncio.AbstractEventLoop
    _closed: bool
    _workers: dict[int, _Worker]
    _tasks: TaskNursery
    heartbeat_timeout: float

    @property
    def timings(self) -> PoolTimings: ...
    @property
    def spawner(self) -> Spawner: ...


class Watchdog:
    """Watches the pool's children; see the module's docstring."""

    def __init__(self, pool: _Pool) -> None:
        self._pool = pool
        self.memory_watch = False  # set once any lease has a memory or CPU limit
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = self._pool._tasks.start(self._watch(), name="pool watchdog")

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()

    async def _watch(self) -> None:
        """Kill children that went silent (no frame for ``heartbeat_timeout``) or that
        went over their memory limit."""
        pool = self._pool
        while True:
            heartbeat_timeout, timings = pool.heartbeat_timeout, pool.timings
            period = min(1.0, heartbeat_timeout / 4)
            if self.memory_watch:
                period = min(period, timings.memory_period)
            await asyncio.sleep(max(0.05, period))
            now = pool._loop.time()
            if self.memory_watch:
                await self._check_memory()
            for worker in list(pool._workers.values()):
                silent = now - worker.last_seen
                held = worker.channel.reading_paused  # its heartbeats wait behind its frames
                if (
                    worker.state is WorkerState.BUSY
                    and silent > heartbeat_timeout
                    and not held
                    and worker.result is None  # reported: ended after exit_grace instead
                ):
                    worker.kill(
                        OutcomeKind.HEARTBEAT,
                        f"no heartbeat for {silent:.1f} s (limit {heartbeat_timeout:g} s); "
                        "the child was killed",
                    )
                elif worker.state is WorkerState.STARTING and silent > timings.start_timeout:
                    detail = f"no handshake within {timings.start_timeout:g} s"
                    worker.kill(OutcomeKind.KILLED, detail)
                    # a start that hangs is a failed start: counted, or it retries for ever
                    pool.spawner._start_failed(f"a child was killed: {detail}")

    async def _check_memory(self) -> None:
        watched = [
            w
            for w in self._pool._workers.values()
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

    def _sweep_orphans_soon(self) -> None:
        """End what a dead child's descendants that left its session still run (they
        were reparented to the fork server), in the spawner's threads."""
        pool = self._pool
        if pool.spawner.threads is None or pool._closed:
            return
        pool._tasks.start(self._sweep_orphans())

    async def _sweep_orphans(self) -> None:
        await self._pool._loop.run_in_executor(self._pool.spawner.threads, sweep_orphans)
