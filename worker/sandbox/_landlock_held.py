"""Landlock rule descriptors opened once, in the fork server, for every child.

A sub-agent's ruleset names some 170 paths (the system folders, the Python runtime, the
version managers' trees, ``/etc`` entry by entry, the device files), and a rule is
added from a descriptor: each path cost every child an ``open(O_PATH)``, a ``stat`` and
a ``close`` before its ``landlock_add_rule``. Most of them are the same for every child,
so the fork server opens them once (``O_PATH | O_CLOEXEC``: inherited by every fork,
closed in anything a child executes, so bash and its programs never see them) and notes
which are folders; a child adds its rule from the descriptor it inherited, and opens
itself only what is its own (the workdir, grants, extra read folders) or not held.

A rule is on the object the descriptor refers to, not on its path, so a held path must
not be replaced while agentcell runs. Held:

- the system folders, the runtime's and the version managers' trees, the device files:
  the fork server itself runs from them (a virtualenv rebuilt under a running
  orchestrator needs a restart anyway);
- ``/etc`` and its entries other than links, under a key of the modification times of
  ``/etc``, ``/etc/ssh`` and ``/etc/ssl``: an entry replaced (a rename over it, as
  editors and package managers do) changes its folder's time, and a child that sees
  another key opens every ``/etc`` entry itself, as before. A link (``resolv.conf`` into
  ``/run``) can change its target with no folder changing, so it is never held.

Descriptors are a budget the children share with the fork server: at most a quarter of
the soft ``RLIMIT_NOFILE`` is held (all of them under the usual 1,024; the shared folders
first, then ``/etc``'s entries), never so many that fewer than 64 stay free; what does not
fit is opened by each child, as before.

Never held: the home's files (``~/.gitconfig``, which ``git config --global`` rewrites
by rename) and everything per run. A process not forked from a fork server that held
them (a Ray node's child) finds nothing here and opens every path itself.
"""

from __future__ import annotations

import dataclasses
import os
import resource
import stat
from collections.abc import Iterable


@dataclasses.dataclass(frozen=True, slots=True)
class HeldPath:
    fd: int
    is_dir: bool
    etc: bool  # valid only while the /etc key is the one it was opened under


_held: dict[str, HeldPath] = {}
#: Every descriptor this module opened (all ``O_PATH``: no I/O or ioctl can go through
#: one); kept after ``forget``, since the descriptors stay open.
_opened: set[int] = set()
_etc_key: tuple[int, ...] | None = None
_room: int | None = None  # descriptors this process may still hold (None: not counted yet)


def hold(paths: Iterable[str]) -> None:
    """Open ``paths`` (those that exist) for every later fork: folders and files that
    stay where they are while agentcell runs."""
    for path in paths:
        _open(path, etc=False)


def hold_etc(paths: Iterable[str], key: tuple[int, ...]) -> None:
    """Open the ``/etc`` entries ``paths`` (links left out) under the folders' ``key``."""
    global _etc_key
    _etc_key = key
    for path in paths:
        try:
            if stat.S_ISLNK(os.lstat(path).st_mode):
                continue
        except OSError:
            continue
        _open(path, etc=True)


def _budget() -> int:
    """How many descriptors may be held in this process (see the module's docstring)."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return 4096
    try:
        in_use = len(os.listdir("/proc/self/fd"))
    except OSError:
        in_use = soft // 2
    return max(0, min(soft // 4, soft - in_use - 64))


def _open(path: str, *, etc: bool) -> None:
    global _room
    if path in _held:
        return
    if _room is None:
        _room = _budget()
    if _room <= 0:
        return
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return  # missing here: a child that names it tries itself
    _held[path] = HeldPath(fd, stat.S_ISDIR(os.fstat(fd).st_mode), etc)
    _opened.add(fd)
    _room -= 1


def lookup(path: str, etc_key: tuple[int, ...] | None) -> HeldPath | None:
    """The held descriptor for ``path``, if one is held and still valid under the
    ``/etc`` key the caller sees now."""
    held = _held.get(path)
    if held is None or (held.etc and (etc_key is None or etc_key != _etc_key)):
        return None
    return held


def path_only_fds() -> frozenset[int]:
    """The held descriptors, all ``O_PATH`` (a child's terminal check skips them)."""
    return frozenset(_opened)


def held_paths() -> list[str]:
    """What is held (for tests and the bench)."""
    return sorted(_held)


def forget() -> None:
    """Use none of them from now on (a test's control; the descriptors stay open: they
    are the fork server's, inherited)."""
    global _etc_key
    _held.clear()
    _etc_key = None
