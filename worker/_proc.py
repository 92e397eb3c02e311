"""Linux process plumbing shared by the child bootstrap and the parent's pool.

Every child is the leader of its own session (``os.setsid``), so "everything this child
started" is "every process whose session id is the child's pid" — a test that survives
reparenting, unlike walking the process tree.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import os
import signal

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36

_libc: ctypes.CDLL | None = None


def _prctl(option: int, arg: int) -> None:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    if _libc.prctl(option, arg, 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def set_parent_death_signal(sig: int = signal.SIGKILL) -> None:
    """Have the kernel send ``sig`` to this process when its parent dies."""
    _prctl(PR_SET_PDEATHSIG, sig)


def set_child_subreaper() -> None:
    """Orphaned descendants are reparented to this process rather than to init."""
    _prctl(PR_SET_CHILD_SUBREAPER, 1)


def raise_oom_score(adj: int) -> None:
    """Make the OOM killer prefer this process (a child) over the parent. Best effort."""
    with contextlib.suppress(OSError), open("/proc/self/oom_score_adj", "w") as f:
        f.write(str(adj))


def session_of(pid: int) -> int | None:
    """The session id of ``pid`` (None if it is gone or is a zombie)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    # Field 2 (comm) may contain spaces and parentheses: split after the last ')'.
    fields = stat[stat.rindex(b")") + 2 :].split()
    if fields[0] == b"Z":
        return None
    return int(fields[3])


def session_members(sid: int) -> list[int]:
    """Live (non-zombie) processes in session ``sid``."""
    members = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            pid = int(entry)
            if session_of(pid) == sid:
                members.append(pid)
    return members


def kill_session(sid: int, sig: int = signal.SIGKILL) -> list[int]:
    """Send ``sig`` to every process of session ``sid`` but the caller.

    Returns the pids signalled (the leader included when it was still there), so the
    caller can wait for them to be gone.
    """
    signalled: list[int] = []
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
    for pid in session_members(sid):
        if pid in (me, sid):
            continue
        try:
            os.kill(pid, sig)
            signalled.append(pid)
        except OSError as exc:
            if exc.errno not in (errno.ESRCH, errno.EPERM):
                raise
    return signalled


def kill_descendants(pid: int, sig: int = signal.SIGKILL) -> int:
    """Signal every descendant of ``pid`` (whatever its session); returns the count."""
    import psutil

    try:
        children = psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return 0
    for child in children:
        with contextlib.suppress(psutil.Error):
            child.send_signal(sig)
    return len(children)


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
