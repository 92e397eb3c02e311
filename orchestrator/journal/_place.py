"""Where a run's journal lives, and whether its run is still going.

``$XDG_STATE_HOME/agentcell/journal/<run folder's name>-<8 hex of its path>/`` (under
``~/.local/state`` when the variable is unset): outside every workdir, 0700, beside the
record key (records/_key.py). A sandboxed sub-agent's walls grant no part of the home
but git's config, so no child can read or write it; no child gets a descriptor to it.

The folder holds ``journal`` (the records, _file.py), ``lock``, ``run-dir`` (the run
folder's path: when that is gone, nothing can resume the run, and a later run's start
removes its journal) and, once the run has ended, ``ended`` (its status). The live
orchestrator holds an exclusive ``flock`` on ``lock`` for as long as the run goes, with its
pid written in it; the kernel lets go of it when that process dies, however it dies. A run
whose lock nobody holds and that has no ``ended`` was interrupted.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import random
import shutil
import time
from pathlib import Path

JOURNAL_FILE = "journal"
LOCK_FILE = "lock"
#: Written when the run ends (its status), removed when a run opens the journal again.
ENDED_FILE = "ended"
#: The run folder's real path: a journal whose run folder is gone is removed (``prune``).
RUN_DIR_FILE = "run-dir"
#: How many other journals one run's start looks at for removal (a random sample).
PRUNE_SAMPLE = 64


def journal_root() -> Path:
    state = os.environ.get("XDG_STATE_HOME") or os.path.join(
        os.path.expanduser("~"), ".local", "state"
    )
    return Path(state) / "agentcell" / "journal"


def inside(path: Path, folder: Path) -> bool:
    """Whether ``path`` is ``folder`` or beneath it, links resolved."""
    real, top = os.path.realpath(path), os.path.realpath(folder)
    return real == top or real.startswith(top.rstrip("/") + "/")


def journal_dir(run_dir: Path) -> Path:
    """The journal folder of the run recorded in ``run_dir`` (made or not)."""
    real = os.path.realpath(run_dir)
    tag = hashlib.sha256(real.encode()).hexdigest()[:8]
    return journal_root() / f"{Path(real).name}-{tag}"


def make_journal_dir(run_dir: Path) -> Path:
    """The run's journal folder, made 0700 (and its parents 0700) whatever the umask."""
    folder = journal_dir(run_dir)
    root = folder.parent
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    for part in (root.parent, root):
        os.chmod(part, 0o700)
    folder.mkdir(mode=0o700, exist_ok=True)  # a folder in use again (a chat's) appends
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(folder / RUN_DIR_FILE, flags, 0o600)
    try:
        os.write(fd, os.fsencode(os.path.realpath(run_dir)))
    finally:
        os.close(fd)
    return folder


def prune(root: Path, keep: Path) -> list[Path]:
    """Remove journals (besides ``keep``) whose run folder is gone: nothing can resume
    them. A journal that is held (its run is going), or that names no run folder, stays.
    At most ``PRUNE_SAMPLE`` of them, drawn at random, are looked at per call, so a run's
    start never walks a long history. Returns what was removed."""
    try:
        names = [entry.name for entry in os.scandir(root) if entry.is_dir(follow_symlinks=False)]
    except OSError:
        return []
    removed = []
    for name in random.sample(names, min(PRUNE_SAMPLE, len(names))):
        folder = root / name
        if folder == keep or holder_of(folder) is not None:
            continue
        try:
            run_dir = os.fsdecode((folder / RUN_DIR_FILE).read_bytes())
        except OSError:
            continue
        if run_dir and not os.path.lexists(run_dir):
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    return removed


_LOCK_TRIES = 4


class RunLock:
    """The live run's hold on its journal folder: taken at the start, let go at the end
    (or by the kernel, when the orchestrator dies)."""

    def __init__(self, folder: Path) -> None:
        flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
        self._fd = os.open(folder / LOCK_FILE, flags, 0o600)
        for attempt in range(_LOCK_TRIES):
            try:
                fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                # A reader's shared lock (``holder_of``) lasts microseconds: try again
                # a few times before taking the run for a live one's.
                if attempt == _LOCK_TRIES - 1:
                    holder = _holder(self._fd)
                    os.close(self._fd)
                    raise RunStillGoing(holder) from None
                time.sleep(0.005)
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, str(os.getpid()).encode(), 0)

    def release(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)  # the flock goes with the last descriptor
            self._fd = -1


class RunStillGoing(Exception):
    """Another live orchestrator holds the run (its pid, or 0 when it wrote none)."""

    def __init__(self, pid: int) -> None:
        super().__init__(pid)
        self.pid = pid


def _holder(fd: int) -> int:
    with contextlib.suppress(OSError, ValueError):
        return int(os.pread(fd, 32, 0).decode() or 0)
    return 0


def holder_of(folder: Path) -> int | None:
    """The pid of the live orchestrator that holds ``folder``'s run (0 if it wrote none),
    or None when nobody holds it."""
    try:
        fd = os.open(folder / LOCK_FILE, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _holder(fd)
        return None
    finally:
        os.close(fd)  # a shared lock taken here goes with it


def run_state(run_dir: Path) -> tuple[str, int | None]:
    """``("running", pid)``, ``("interrupted", None)``, ``("ended", None)``, or
    ``("unjournaled", None)`` for a run with no journal (``record=False``, or older)."""
    folder = journal_dir(run_dir)
    if not (folder / JOURNAL_FILE).is_file():
        return "unjournaled", None
    pid = holder_of(folder)
    if pid is not None:
        return "running", pid
    if (folder / ENDED_FILE).is_file():
        return "ended", None
    return "interrupted", None
