"""What a spare does before its Hello for the sandbox of the run it will get.

Every run's sandbox needs a private temp folder (named by the process's pid) and a
Landlock ruleset with the rules every sandbox has (``_common_rules``): ~1 ms of a warm
dispatch's 5.5 in the child. A spare makes both while it waits (``prepare``); the run's
``_sandbox.apply`` takes them where they fit and makes its own where not.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import stat
import tempfile
from pathlib import Path

from agentcell.worker.sandbox import _landlock
from agentcell.worker.sandbox import _landlock_rules as _common_rules
from agentcell.worker.sandbox._landlock import Ruleset


def private_tmp(pid: int) -> Path:
    """The private temp folder of sub-agent process ``pid`` (it cannot remove it itself:
    that takes a right on the folder above, which it does not have)."""
    return Path(tempfile.gettempdir()) / f"agentcell-sandbox-{os.getuid()}" / str(pid)


@dataclasses.dataclass
class Spare:
    """The run-independent part of ``_sandbox.apply``, done by a spare before its Hello."""

    pid: int
    tmpdir: Path | None = None
    tmp_identity: tuple[int, int] = (0, 0)  # (st_dev, st_ino) of the folder it made
    ruleset: Ruleset | None = None  # with ``allow_common``'s rules in it
    abi: int = 0
    wall_tcp: bool = True
    etc_key: tuple[int, ...] = ()


_spare: Spare | None = None


def prepare() -> None:
    """In a spare, before its Hello: what ``_sandbox.apply`` does the same for every run, taken
    off the run's path (~1 ms of a warm dispatch's 5.5 in the child) — the private temp
    folder named by this pid, and a Landlock ruleset already holding ``allow_common``'s
    rules, with TCP walled (the usual run: its model requests go through the parent).

    Made here, after the fork, never in the fork server: a ruleset descriptor made there
    would be one kernel object shared by every child it forks. ``_sandbox.apply`` uses them only
    in this process, and only where they fit: the folder still the one made here, empty;
    the ruleset of the same ABI and TCP handling, from the same ``/etc``. Else it does
    the whole as before. Nothing here can fail a spare: what fails is left to ``_sandbox.apply``."""
    global _spare
    spare = Spare(os.getpid())
    with contextlib.suppress(OSError):
        spare.tmpdir = make_private_tmp()
        made = spare.tmpdir.lstat()
        spare.tmp_identity = (made.st_dev, made.st_ino)
    abi = _landlock.abi_version()
    if abi >= 1:
        spare.abi, spare.etc_key = abi, _common_rules.etc_key_now()
        ruleset = None
        try:
            ruleset = _common_rules.new_ruleset(abi, wall_tcp=spare.wall_tcp)
            _common_rules.allow_common(ruleset, spare.etc_key)
        except OSError:
            if ruleset is not None:
                ruleset.close()
        else:
            spare.ruleset = ruleset
    _spare = spare


def own_spare() -> Spare | None:
    """What ``prepare`` made, if this process made it (a process forked from a spare
    shares its descriptors but is not it)."""
    return _spare if _spare is not None and _spare.pid == os.getpid() else None


def make_private_tmp() -> Path:
    """This process's private temp folder, new and empty."""
    private = private_tmp(os.getpid())
    private.parent.mkdir(mode=0o700, exist_ok=True)
    if private.parent.is_symlink() or private.parent.stat().st_uid != os.getuid():
        raise OSError(f"{private.parent} is not this user's own folder: remove it")
    # A folder under our pid is a leftover of an earlier process that had the same pid
    # (pids are reused; one whose parent died before cleaning up leaves it): it is stale.
    if private.is_symlink():  # rmtree refuses a link (and would leave it in the way)
        private.unlink()
    shutil.rmtree(private, ignore_errors=True)
    private.mkdir(mode=0o700)
    return private


def spare_tmp() -> Path | None:
    """The folder ``prepare`` made, if it is still that folder and still empty: a spare
    may wait long, and another process of this user (one not walled) could have put
    something there or replaced it meanwhile. Else None: ``_sandbox.apply`` makes a new one."""
    spare = own_spare()
    if spare is None or spare.tmpdir is None:
        return None
    folder, spare.tmpdir = spare.tmpdir, None  # used once
    try:
        now = folder.lstat()
        if (now.st_dev, now.st_ino) != spare.tmp_identity or not stat.S_ISDIR(now.st_mode):
            return None
        if os.listdir(folder):
            return None
    except OSError:
        return None
    return folder


def spare_ruleset(abi: int, *, wall_tcp: bool, etc_key: tuple[int, ...]) -> Ruleset | None:
    """The ruleset ``prepare`` made, if it is the one this run needs (else closed)."""
    spare = own_spare()
    if spare is None or spare.ruleset is None:
        return None
    ruleset, spare.ruleset = spare.ruleset, None  # used once
    if (spare.abi, spare.wall_tcp, spare.etc_key) != (abi, wall_tcp, etc_key):
        ruleset.close()
        return None
    return ruleset


def drop_spare_ruleset() -> None:
    spare = own_spare()
    if spare is not None and spare.ruleset is not None:
        spare.ruleset.close()
        spare.ruleset = None
