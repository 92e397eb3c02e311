"""The fork servers that start the pools' children: one per process starter.

A fork server is a warmed Python process that forks one child per request. It forks
one at a time, so on a machine with many cores a large fan-out waits in its queue:
``starters`` fork servers (``default_starters()`` by the machine's cores) take requests
side by side, the pool handing them out in turn. The first is multiprocess's own
(``multiprocess.forkserver._forkserver``); the others are further instances of its
``ForkServer``, started the same way. They are shared by every pool of this process and
stopped when the last pool closes.

Each fork server is the subreaper of what its children leave behind: a child's
descendants that outlive it are reparented to the server that forked it. The sweep looks
for them under every server; a start and a sweep of the same server never overlap, so
a child just forked is never mistaken for an orphan.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import multiprocess.forkserver
import multiprocess.util
from agentcell.orchestrator.backends._mp_tempdir import use_own_temp_folder
from agentcell.worker import process as proc

#: At most this many fork servers (each holds its own warmed interpreter, ~40 MiB).
MAX_STARTERS = 8


@contextlib.contextmanager
def _interrupts_blocked() -> Iterator[None]:
    """Start fork servers with SIGINT blocked.

    A program inherits the signal mask of the thread that started it, so a fork server
    starts with Ctrl-C blocked: it is importing its preload list then (a second or more),
    and a terminal's Ctrl-C, sent to the whole foreground process group, would kill it
    mid-import with a ``KeyboardInterrupt`` traceback on the user's screen and fail every
    start after it. Its boot module ignores SIGINT and unblocks it
    (``worker/child/_forkserver_boot.py``). multiprocess's resource tracker unblocks SIGINT
    after starting itself, so it is started first."""
    from multiprocess import resource_tracker

    resource_tracker.ensure_running()
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def default_starters() -> int:
    """One fork server per four usable cores, from one up to four: on two cores a second
    server would only take CPU from the children; on sixteen, four keep up with a
    fan-out of hundreds."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return max(1, min(4, cores // 4))


#: The environment the fork server (and resource tracker) being started in this thread
#: gets; unset: multiprocess's own spawn, which inherits ours.
_starting = threading.local()
_inherited_spawn = multiprocess.util.spawnv_passfds


def _spawnv_passfds(path: str, args: Sequence[str], passfds: Sequence[int]) -> int:
    """``multiprocess.util.spawnv_passfds``, with the environment ``_with_environment``
    set for this thread instead of ours."""
    env = getattr(_starting, "env", None)
    if env is None:
        pid: int = _inherited_spawn(path, args, passfds)
        return pid
    try:
        child = subprocess.Popen(
            list(args),
            executable=path,
            pass_fds=tuple(sorted(map(int, passfds))),
            close_fds=True,
            env=dict(env),
            restore_signals=False,
        )
    except OSError:
        # The interpreter cannot be executed (by this user, say). multiprocess's own
        # spawn does not report that: it returns the pid of a child that exits 255, and
        # the pool reports the dead fork server as it always has. Keep that behaviour.
        pid = _inherited_spawn(path, args, passfds)
        return pid
    # multiprocess reaps it (a fork server, a resource tracker): subprocess must neither
    # wait for it nor warn about it. Kept in a list instead, as this did, the list grew by
    # one for every fork server ever started, and each left a "still running"
    # ResourceWarning at exit (661 in one run of the suite).
    child._child_created = False  # type: ignore[attr-defined]
    return child.pid


@contextlib.contextmanager
def _with_environment(env: Mapping[str, str]) -> Iterator[None]:
    """Processes multiprocess starts from this thread meanwhile get ``env``: passed to
    their exec, never written to ``os.environ`` (other threads read it)."""
    _starting.env = env
    try:
        yield
    finally:
        _starting.env = None


multiprocess.util.spawnv_passfds = _spawnv_passfds


class ForkedChild:
    """A child a fork server started for us: its pid, the fork server's pid, and its
    sentinel — that server's status pipe, readable once the child has exited (its exit
    code follows)."""

    def __init__(self, pid: int, sentinel: int, forkserver: int | None) -> None:
        self.pid = pid
        self.sentinel = sentinel
        self.forkserver = forkserver
        self.returncode: int | None = None
        # The sentinel closed with no exit code on it: only the server's own death does
        # that. This, not /proc, is the proof: a killed process closes its descriptors
        # before /proc shows it a zombie, so a check there races the kernel's exit.
        self.server_died = False

    def poll(self) -> int | None:
        """The exit code once the child has exited, else None (never blocks)."""
        if self.returncode is None and self.sentinel >= 0:
            # poll(), not select(): a busy orchestrator's descriptors pass 1024.
            poller = select.poll()
            poller.register(self.sentinel, select.POLLIN)
            if not poller.poll(0):
                return None
            try:
                self.returncode = multiprocess.forkserver.read_signed(self.sentinel)
            except (OSError, EOFError):
                self.returncode = 255  # the fork server itself died (as multiprocess says)
                self.server_died = True
        return self.returncode

    def close(self) -> None:
        if self.sentinel >= 0:
            os.close(self.sentinel)
            self.sentinel = -1


class _Server:
    def __init__(self, server: Any) -> None:
        self.server = server
        # Held for a whole start on this server, and by a sweep of it: a sweep never
        # sees a child this server forked that is not known yet.
        self.lock = threading.Lock()

    @property
    def pid(self) -> int | None:
        pid: int | None = self.server._forkserver_pid
        return pid


class ForkServers:
    """The process's fork servers and the children they started for its pools."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._servers = [_Server(multiprocess.forkserver._forkserver)]
        self._running = 1  # how many of them the pools use now
        self._users = 0
        self._environment: Callable[[], Mapping[str, str]] | None = None
        #: Every live child the pools started; anything else a fork server is the parent
        #: of is an orphan (a descendant of a child that died, reparented to it).
        self.known: set[int] = set()

    def open(
        self,
        count: int,
        preload: list[str],
        environment: Callable[[], Mapping[str, str]],
    ) -> None:
        """A pool needs ``count`` fork servers (started with the environment
        ``environment()`` gives, preloading ``preload`` when they start). The first pool to
        ask for more starts them."""
        count = max(1, min(count, MAX_STARTERS))
        with self._lock:
            self._environment = environment
            use_own_temp_folder()  # before a fork server's socket goes into one
            while len(self._servers) < count:
                self._servers.append(_Server(multiprocess.forkserver.ForkServer()))
            for entry in self._servers[:count]:
                if entry.pid is None:
                    entry.server.set_forkserver_preload(preload)
                with _with_environment(environment()), _interrupts_blocked():
                    entry.server.ensure_running()
            self._running = max(self._running, count)
            self._users += 1

    def close(self) -> None:
        """A pool is done with them: the last one stops them all, and the resource
        tracker."""
        with self._lock:
            self._users -= 1
            if self._users > 0:
                return
            for entry in self._servers:
                entry.server._stop()
            self._running = 1
            from multiprocess import resource_tracker

            stop = getattr(resource_tracker._resource_tracker, "_stop", None)
            if stop is not None:
                stop()

    def start(self, index: int, request: bytes, child_conn: Any) -> ForkedChild:
        """Have fork server ``index`` (modulo those running) fork a child for
        ``request``, its pipe end passed along; returns once the server has said the
        child's pid. (In a starter thread: this blocks.) A server killed from outside
        is started again by the next request to it."""
        entry = self._servers[index % self._running]
        with entry.lock:
            if entry.pid is not None and not proc.is_alive(entry.pid) and self._environment:
                # Killed from outside: start it again as it was started, with the minimal
                # environment (multiprocess's own restart would give it ours, keys included).
                with _with_environment(self._environment()), _interrupts_blocked():
                    entry.server.ensure_running()
            sentinel, data = entry.server.connect_to_new_process([child_conn.fileno()])
            try:
                with open(data, "wb", closefd=True) as pipe:
                    pipe.write(request)
                pid = multiprocess.forkserver.read_signed(sentinel)
            except BaseException:
                os.close(sentinel)
                raise
            self.known.add(pid)
        return ForkedChild(pid, sentinel, entry.pid)

    def pids(self) -> list[int]:
        """The pids of the fork servers running now (the first one first)."""
        return [pid for entry in self._servers if (pid := entry.pid) is not None]

    def sweep(self) -> list[int]:
        """Kill every orphan under a fork server (and its descendants); returns the pids.

        This tracks a sub-agent's tree without relying on sessions: while a child lives
        it is the subreaper of everything it starts, and when it dies what is left moves
        to its fork server."""
        killed: list[int] = []
        for entry in list(self._servers):
            with entry.lock:
                server = entry.pid
                if server is None:
                    continue
                table = proc.process_table()
                orphans = [
                    i.pid for i in table.values() if i.ppid == server and i.pid not in self.known
                ]
                for pid in orphans:
                    killed.extend(proc.kill_tree(pid, signal.SIGKILL, table))
        return killed


#: The one set of fork servers of this process.
FORK_SERVERS = ForkServers()


def sweep_orphans() -> list[int]:
    """``FORK_SERVERS.sweep()``: kill what dead children left under the fork servers."""
    return FORK_SERVERS.sweep()


def forkserver_pid() -> int | None:
    """The first fork server's pid while one runs in this process (tests check it goes
    away); ``forkserver_pids()`` lists them all."""
    pid: int | None = multiprocess.forkserver._forkserver._forkserver_pid
    return pid


def forkserver_pids() -> list[int]:
    """Every fork server running in this process."""
    return FORK_SERVERS.pids()
