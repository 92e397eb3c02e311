"""A cap on the number of processes of one sub-agent's tree: a cgroup ``pids`` controller.

``RLIMIT_NPROC`` counts per user and does not bind root, so a fork bomb in a root
sub-agent's bash would take the machine's process table; a cgroup counts exactly the
tree of the process put in it (what it forks stays in it) and refuses ``fork`` past
``pids.max``. The child creates its own cgroup and moves itself in before it restricts
itself (a spare makes it before its Hello, with no limit, and the run then only writes
its limit: ``ProcessCap.prepare``); ``pids.events`` then says whether the cap was hit;
the parent removes the cgroup once the child is gone (``release_process_cap``).

cgroup v1 (a ``pids`` hierarchy) and v2 (``pids`` enabled for our subtree) are both
detected, never assumed; where neither can be written, ``ProcessCap.create`` returns None
and the caller says so.
"""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
_GROUP = "agentcell"


def _v1_base() -> Path | None:
    base = CGROUP_ROOT / "pids"
    return base if (base / "cgroup.procs").is_file() else None


def _v2_base() -> Path | None:
    controllers = CGROUP_ROOT / "cgroup.controllers"
    if not controllers.is_file():
        return None
    try:
        own = next(
            line.partition("::")[2]
            for line in Path("/proc/self/cgroup").read_text().splitlines()
            if line.startswith("0::")
        )
    except (OSError, StopIteration):
        return None
    base = CGROUP_ROOT / own.lstrip("/")
    try:
        enabled = (base / "cgroup.subtree_control").read_text().split()
    except OSError:
        return None
    return base if "pids" in enabled else None


def controller() -> tuple[str, Path] | None:
    """("v1" | "v2", the folder per-agent cgroups go under), or None when there is none."""
    v1 = _v1_base()
    if v1 is not None:
        return "v1", v1 / _GROUP
    v2 = _v2_base()
    if v2 is not None:
        return "v2", v2 / _GROUP
    return None


def cap_path(pid: int) -> Path | None:
    """Where the cgroup of the sub-agent process ``pid`` is (whether it exists or not)."""
    found = controller()
    return None if found is None else found[1] / str(pid)


#: The cgroup ``ProcessCap.prepare`` made, by the pid that made it (a process forked
#: from a spare is not in it as the owner: its pid differs).
_prepared: dict[int, Path] = {}


class ProcessCap:
    """The cgroup this process and its descendants count against."""

    def __init__(self, path: Path, limit: int) -> None:
        self.path = path
        self.limit = limit
        self._events_fd = -1  # pids.events, opened at the first read and kept (polled)

    @classmethod
    def create(cls, limit: int) -> ProcessCap | None:
        """Put this process into a new cgroup allowing ``limit`` processes, or None.

        A spare made its cgroup before its Hello (``prepare``): then only the limit is
        written now — the costly part (the move into the cgroup waits for the kernel's
        cgroup locks, many ms when many processes start at once) is off the run's path."""
        prepared = _prepared.get(os.getpid())
        if prepared is not None:
            try:
                (prepared / "pids.max").write_text(str(limit))
            except OSError:
                return None
            return cls(prepared, limit)
        path = cap_path(os.getpid())
        if path is None or not made_group(path, limit=limit, member=os.getpid()):
            return None
        return cls(path, limit)

    @staticmethod
    def prepare() -> bool:
        """Make this process's own cgroup now, with no limit yet, and move into it (a
        spare, before its Hello). ``create`` then only sets the run's limit. False where
        no cgroup can be made here (``create`` then tries the whole way and says so)."""
        pid = os.getpid()
        path = cap_path(pid)
        if path is None or not made_group(path, member=pid):
            return False
        _prepared[pid] = path
        return True

    def times_hit(self) -> int:
        """How often a fork was refused because the tree was at the cap. Read every
        ``CAP_CHECK_S`` for the run's whole life: one ``pread`` of a descriptor kept open
        (``O_CLOEXEC``: nothing it executes has it), not an open, read and close."""
        try:
            if self._events_fd < 0:
                self._events_fd = os.open(self.path / "pids.events", os.O_RDONLY | os.O_CLOEXEC)
            for line in os.pread(self._events_fd, 4096, 0).splitlines():
                key, _, value = line.partition(b" ")
                if key == b"max":
                    return int(value)
        except (OSError, ValueError):
            pass
        return 0


def made_group(
    path: Path, *, limit: int | None = None, member: int | None = None, new: bool = False
) -> bool:
    """The cgroup at ``path`` made (``new``: and not there before), its ``limit`` and
    its ``member`` written; False, and the folder removed, if a step fails."""
    try:
        path.mkdir(parents=True, exist_ok=not new)
        if limit is not None:
            (path / "pids.max").write_text(str(limit))
        if member is not None:
            (path / "cgroup.procs").write_text(str(member))
    except OSError:
        with contextlib.suppress(OSError):
            path.rmdir()
        return False
    return True


def release_process_cap(pid: int) -> None:
    """Kill whatever is left in sub-agent ``pid``'s cgroup and remove it (parent side)."""
    path = cap_path(pid)
    if path is not None:
        release_group(path)


def release_group(path: Path) -> None:
    """Kill whatever is left in the cgroup at ``path`` and remove it."""
    if not path.is_dir():
        return
    with contextlib.suppress(OSError, ValueError):
        for line in (path / "cgroup.procs").read_text().split():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(int(line), signal.SIGKILL)
    with contextlib.suppress(OSError):
        path.rmdir()


def remove_stale_caps() -> list[int]:
    """Remove the cgroups of sub-agent processes that are gone and left them behind (an
    orchestrator killed before it could remove them); returns their pids.

    Every spare makes one, so an orchestrator that is SIGKILLed leaves one per live
    child. Only a cgroup that is empty and whose process no longer exists is removed:
    one just made by a starting spare has a live pid."""
    found = controller()
    if found is None:
        return []
    removed = []
    with contextlib.suppress(OSError):
        for entry in os.scandir(found[1]):
            # A sub-agent's is named by its pid; a shared MCP server host's is
            # ``mcp-<orchestrator pid>-<n>`` (``worker/mcp/_host.py``).
            owner = entry.name.removeprefix("mcp-").partition("-")[0]
            if not owner.isdigit() or not entry.is_dir(follow_symlinks=False):
                continue
            pid = int(owner)
            if os.path.exists(f"/proc/{pid}"):
                continue
            try:
                if (Path(entry.path) / "cgroup.procs").read_text().split():
                    continue  # still has members: not ours to judge
                os.rmdir(entry.path)
            except OSError:
                continue
            removed.append(pid)
    return removed
