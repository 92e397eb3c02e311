"""multiprocess's temp folder, named by this process's pid so a later one can clear it.

The fork servers listen on UNIX sockets in multiprocess's temp folder (``pymp-*`` in
``/tmp`` by default), which multiprocess removes when the orchestrator exits cleanly. An
orchestrator that is killed (SIGKILL, the OOM killer, a CI timeout) leaves it behind with
its dead sockets, one folder per killed run, for good.

So the orchestrator gives multiprocess a folder of its own before the first fork server
starts: ``<tmp>/agentcell-mp-<uid>/<pid>-<random>``, removed at a clean exit as
multiprocess's own is, and every later orchestrator of the same user removes those whose
pid is no longer running. The parent folder must be this user's own, not a link and not
writable by others (another user could otherwise plant a link to make us remove
something else), and short enough for a socket's path in it (a UNIX socket's path has at
most 107 bytes); if it is not, multiprocess's default is left as it was.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path

import multiprocess.process
import multiprocess.util
from agentcell.worker import process as proc

#: The longest path a UNIX socket may have (``sun_path`` is 108 bytes with its NUL).
MAX_SOCKET_PATH = 107
#: What multiprocess adds for a socket in its temp folder: "/listener-" (3.11's
#: multiprocess; "/sock-" in later ones) and 8 random characters.
_SOCKET_NAME = len("/listener-12345678")


def base_folder() -> Path:
    """Where every orchestrator of this user keeps its multiprocess temp folder."""
    return Path(tempfile.gettempdir()) / f"agentcell-mp-{os.getuid()}"


def use_own_temp_folder(base: Path | None = None) -> Path | None:
    """Give multiprocess a pid-named temp folder under ``base`` (``base_folder()``) and
    clear the ones dead orchestrators left there. None (nothing changed) if multiprocess
    already has a temp folder or ``base`` is not this user's own private folder."""
    config = multiprocess.process.current_process()._config
    if config.get("tempdir") is not None:
        return None  # already made (and used for a socket, perhaps): keep it
    base = base_folder() if base is None else base
    longest = len(os.fsencode(base)) + len(f"/{os.getpid()}-12345678") + _SOCKET_NAME
    if longest > MAX_SOCKET_PATH or not _private_folder(base):
        return None
    sweep_dead(base)
    folder = tempfile.mkdtemp(prefix=f"{os.getpid()}-", dir=base)
    # As multiprocess's get_temp_dir does for its own: removed at a clean exit, late.
    multiprocess.util.Finalize(None, _remove, args=(shutil.rmtree, folder), exitpriority=-100)
    config["tempdir"] = folder
    return Path(folder)


def sweep_dead(base: Path) -> list[str]:
    """Remove the folders under ``base`` whose orchestrator (the pid in their name) is
    not running; returns their names. A folder of a live pid is kept, even if that pid
    now belongs to another program: it goes once that one ends."""
    removed: list[str] = []
    try:
        names = sorted(os.listdir(base))
    except OSError:
        return removed
    for name in names:
        pid, dash, _ = name.partition("-")
        if not dash or not pid.isdigit() or proc.is_alive(int(pid)):
            continue
        path = base / name
        if path.is_symlink() or not path.is_dir():
            continue  # not one of ours (the folder is private: nothing else puts links here)
        shutil.rmtree(path, ignore_errors=True)
        removed.append(name)
    return removed


def _private_folder(base: Path) -> bool:
    """``base`` exists now (made if missing) as this user's folder that only they can
    write, and is not a link."""
    try:
        base.mkdir(mode=0o700, exist_ok=True)
        info = base.lstat()
    except OSError:
        return False
    return (
        stat.S_ISDIR(info.st_mode)
        and info.st_uid == os.getuid()
        and info.st_mode & (stat.S_IWGRP | stat.S_IWOTH) == 0
    )


def _remove(rmtree: Callable[..., None], folder: str) -> None:
    rmtree(folder, ignore_errors=True)
    current = multiprocess.process.current_process()
    if current is not None and current._config.get("tempdir") == folder:
        current._config["tempdir"] = None
