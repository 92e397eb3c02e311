"""Linux process plumbing shared by the child bootstrap and the parent's pool.

Every child is the leader of its own session (``os.setsid``), so "everything this child
started" is "every process whose session id is the child's pid" — a test that survives
reparenting, unlike walking the process tree.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import errno
import os
import signal
from collections.abc import Collection

PR_SET_PDEATHSIG = 1
PR_GET_DUMPABLE = 3
PR_SET_DUMPABLE = 4
PR_SET_CHILD_SUBREAPER = 36

# The running program's own symbols include libc's: no ctypes.util.find_library, which
# runs `ldconfig -p` in a subprocess — in every child, were it done lazily there.
_libc = ctypes.CDLL(None, use_errno=True)


def _prctl(option: int, arg: int) -> None:
    if _libc.prctl(option, arg, 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def set_parent_death_signal(sig: int = signal.SIGKILL) -> None:
    """Have the kernel send ``sig`` to this process when its parent dies."""
    _prctl(PR_SET_PDEATHSIG, sig)


def set_child_subreaper() -> None:
    """Orphaned descendants are reparented to this process rather than to init."""
    _prctl(PR_SET_CHILD_SUBREAPER, 1)


def set_dumpable(dumpable: bool) -> None:
    """Not dumpable: processes of the same user (a tool's subprocess, say) can no longer
    read this one's ``/proc/<pid>/environ`` or memory, where secrets live."""
    _prctl(PR_SET_DUMPABLE, 1 if dumpable else 0)


def is_dumpable() -> bool:
    return bool(_libc.prctl(PR_GET_DUMPABLE, 0, 0, 0, 0))


def raise_oom_score(adj: int) -> None:
    """Make the OOM killer prefer this process (a child) over the parent. Best effort."""
    with contextlib.suppress(OSError), open("/proc/self/oom_score_adj", "w") as f:
        f.write(str(adj))


@dataclasses.dataclass(frozen=True, slots=True)
class ProcInfo:
    pid: int
    ppid: int
    sid: int
    rss: int  # bytes
    # CPU seconds it used plus those of its children it reaped (so a tree's total counts
    # the subshells that already exited).
    cpu_s: float = 0.0


_PAGE = os.sysconf("SC_PAGE_SIZE")
_TICK = os.sysconf("SC_CLK_TCK")


def process_table() -> dict[int, ProcInfo]:
    """Every live (non-zombie) process, from one pass over ``/proc``.

    One pass serves every question of one moment (sessions, descendants, memory), so the
    cost — a read per process on the host — is paid once, not once per child.
    """
    table: dict[int, ProcInfo] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rindex(b")") + 2 :].split()
        if fields[0] == b"Z":
            continue
        pid = int(entry)
        ticks = sum(int(f) for f in fields[11:15])  # utime, stime, cutime, cstime
        table[pid] = ProcInfo(
            pid, int(fields[1]), int(fields[3]), int(fields[21]) * _PAGE, ticks / _TICK
        )
    return table


def session_members(sid: int, table: dict[int, ProcInfo] | None = None) -> list[int]:
    """Live (non-zombie) processes in session ``sid``."""
    table = process_table() if table is None else table
    return [info.pid for info in table.values() if info.sid == sid]


def descendants(pid: int, table: dict[int, ProcInfo] | None = None) -> list[int]:
    """Every live descendant of ``pid``, whatever its session."""
    table = process_table() if table is None else table
    children: dict[int, list[int]] = {}
    for info in table.values():
        children.setdefault(info.ppid, []).append(info.pid)
    found: list[int] = []
    stack = list(children.get(pid, ()))
    while stack:
        child = stack.pop()
        found.append(child)
        stack.extend(children.get(child, ()))
    return found


def tree_rss(pid: int, table: dict[int, ProcInfo]) -> int:
    """Resident memory of ``pid`` and all its descendants, in bytes."""
    return sum(table[p].rss for p in (pid, *descendants(pid, table)) if p in table)


def tree_cpu_seconds(pid: int, table: dict[int, ProcInfo]) -> float:
    """CPU seconds used by ``pid``'s tree: the live processes and what they reaped."""
    return sum(table[p].cpu_s for p in (pid, *descendants(pid, table)) if p in table)


def kill_session(
    sid: int, sig: int = signal.SIGKILL, table: dict[int, ProcInfo] | None = None
) -> list[int]:
    """Send ``sig`` to every process of session ``sid`` but the caller.

    Returns the pids signalled (the leader included when it was still there), so the
    caller can wait for them to be gone. A ``sid`` that is no pid (0 or below) signals
    nothing: to ``kill`` 0 is the caller's own group and -1 every process it may signal.
    """
    signalled: list[int] = []
    if sid <= 0:
        return signalled
    me = os.getpid()
    if os.getpgid(0) != sid:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(sid, sig)
    if sid != me:
        # The leader itself, even if it never got as far as becoming a leader.
        try:
            os.kill(sid, sig)
            signalled.append(sid)
        except (ProcessLookupError, PermissionError):
            pass
    for pid in session_members(sid, table):
        if pid in (me, sid):
            continue
        if _signal(pid, sig):
            signalled.append(pid)
    return signalled


def kill_tree(
    pid: int, sig: int = signal.SIGKILL, table: dict[int, ProcInfo] | None = None
) -> list[int]:
    """Signal ``pid``'s descendants (even those that left its session) and its session;
    nothing for a ``pid`` of 0 or below (whose "descendants" would be every process)."""
    if pid <= 0:
        return []
    table = process_table() if table is None else table
    signalled = [p for p in descendants(pid, table) if _signal(p, sig)]
    return signalled + [p for p in kill_session(pid, sig, table) if p not in signalled]


def kill_descendants(pid: int, sig: int = signal.SIGKILL) -> int:
    """Signal every descendant of ``pid`` (whatever its session); returns the count."""
    if pid <= 0:
        return 0
    return sum(1 for p in descendants(pid) if _signal(p, sig))


def _signal(pid: int, sig: int) -> bool:
    if pid <= 0:  # not a process: a group, or every process (see ``kill_session``)
        return False
    try:
        os.kill(pid, sig)
    except OSError as exc:
        if exc.errno not in (errno.ESRCH, errno.EPERM):
            raise
        return False
    return True


def signallable_children() -> list[int]:
    """This process's live children that it may signal (a process outside its Landlock
    domain may not be: signal 0 says so without sending anything)."""
    found = []
    with contextlib.suppress(OSError):
        for task in os.listdir("/proc/self/task"):
            with contextlib.suppress(OSError), open(f"/proc/self/task/{task}/children") as f:
                found += [int(pid) for pid in f.read().split()]
    live = []
    for pid in found:
        try:
            with open(f"/proc/{pid}/stat", "rb") as handle:
                stat = handle.read()
        except OSError:
            continue
        if stat[stat.rfind(b")") + 2 :].startswith(b"Z"):
            continue  # reaped by the next waitpid
        if _signal(pid, 0):
            live.append(pid)
    return live


def kill_group(pgid: int, sig: int = signal.SIGKILL) -> bool:
    """Signal a process group; False if it no longer exists."""
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def is_alive(pid: int) -> bool:
    """True if ``pid`` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return False
    return stat[stat.rindex(b")") + 2 : stat.rindex(b")") + 3] != b"Z"


def detach_terminal(path_only: Collection[int] = ()) -> None:
    """Leave no descriptor of a terminal in this process: standard input, output and
    error that are one become ``/dev/null``, any other is closed. A sub-agent is in a
    session of its own with no controlling terminal, and no tty device is in its walls;
    an inherited descriptor is what Landlock would not check (it checks opens only).
    ``path_only``: descriptors known to be ``O_PATH`` (the fork server's held Landlock
    paths), which no read, write or ioctl can use: not asked one by one."""
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd in path_only:
            continue
        with contextlib.suppress(OSError):
            if not os.isatty(fd):
                continue
            if fd > 2:
                os.close(fd)
                continue
            null = os.open(os.devnull, os.O_RDONLY if fd == 0 else os.O_WRONLY)
            os.dup2(null, fd)
            os.close(null)
