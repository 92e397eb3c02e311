"""Keep the file tools inside the agent's working directory.

Every path a model gives a file tool is resolved fully (``..`` and every symlink, file
or directory component, including the ``/proc/self/...`` magic links) before it is
checked, so a link inside the working directory that points elsewhere is refused like
the outside path itself. Directory walks (glob, grep) skip such links instead.

This guards against mistakes and injected instructions, not against an adversary: the
check and the later open are two steps, and ``bash`` is not confined at all.
"""

from __future__ import annotations

import os
import stat
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

from agentcell.worker.tools._base import ToolError

#: Version-control directories that glob and grep never descend into.
VCS_DIRS = frozenset({".git", ".hg", ".svn", ".bzr", "_darcs", ".jj"})
#: agentcell's own records (run transcripts, kept worktrees): a walk that merely passes
#: through never enters them, or every earlier agent's transcript would turn up in a later
#: agent's searches. A walk that starts inside one (the model named the path) reads it.
RECORD_DIRS = frozenset({".agentcell"})


def real_root(workdir: Path) -> str:
    """The working directory with every symlink resolved: what paths are checked against."""
    return os.path.realpath(workdir)


def is_inside(root: str, resolved: str) -> bool:
    """True if the fully resolved path ``resolved`` is ``root`` or below it."""
    return resolved == root or resolved.startswith(root.rstrip(os.sep) + os.sep)


def resolve_inside(workdir: Path, path: str, also: Sequence[Path] = ()) -> Path:
    """Resolve ``path`` (relative to ``workdir``, or absolute) and refuse it if outside.

    The result is the fully resolved location; it need not exist. Raises ``ToolError``
    for an empty path, a NUL byte, or a location that is not ``workdir`` or under it.
    """
    if not path or not path.strip():
        raise ToolError(
            f"path is empty: give a file path relative to the working directory {workdir} "
            "or an absolute path under it"
        )
    if "\0" in path:
        raise ToolError(f"path {path!r} contains a NUL byte: remove it from the path")
    root = real_root(workdir)
    lexical = os.path.normpath(os.path.join(workdir, path))  # an absolute path replaces workdir
    resolved = os.path.realpath(lexical)
    if not is_inside(root, resolved) and not any(
        is_inside(real_root(extra), resolved) for extra in also
    ):
        # Name the real target when a symlink took the path elsewhere: otherwise the
        # refusal of an innocent-looking path is a puzzle.
        via = f" (it resolves to {resolved})" if resolved != lexical else ""
        raise ToolError(
            f"path {path!r} is outside the working directory {workdir}{via}: "
            "file tools can only reach files under it"
        )
    return Path(resolved)


def relative_to_root(root: str, path: str) -> str:
    """``path`` (under ``root``) as shown to the model: relative, with ``/`` separators."""
    rel = os.path.relpath(path, root)
    return rel if os.sep == "/" else rel.replace(os.sep, "/")


def inside_target(root: str, path: str) -> str | None:
    """For a directory walk: the resolved ``path`` if it is inside ``root``, else None.

    Used to skip (never follow) a symlink found during a walk whose target is outside.
    """
    resolved = os.path.realpath(path)
    return resolved if is_inside(root, resolved) else None


def _regular_inside(root: str, path: str) -> bool:
    """True for a regular file, or a symlink to one, that is inside ``root``."""
    try:
        st = os.lstat(path)
        if stat.S_ISLNK(st.st_mode):
            target = inside_target(root, path)
            if target is None:
                return False  # a link to outside is skipped, never followed
            st = os.stat(target)
    except OSError:
        return False
    return stat.S_ISREG(st.st_mode)


def walk_files(
    root: str, start: str, stop: threading.Event, max_depth: int | None = None
) -> Iterator[str]:
    """Regular files under ``start``, sorted directory by directory, never leaving ``root``.

    Symlinked directories are not descended into (an inside target is walked at its real
    place anyway, and this rules out loops); a symlinked file is yielded, under its own
    name, only if it resolves inside ``root``. VCS directories are skipped. ``max_depth``
    limits how many path segments below ``start`` a yielded file may have.
    """
    for dirpath, dirnames, filenames in os.walk(start):
        dirnames[:] = sorted(d for d in dirnames if d not in VCS_DIRS and d not in RECORD_DIRS)
        if max_depth is not None:
            depth = 0 if dirpath == start else os.path.relpath(dirpath, start).count(os.sep) + 1
            if depth + 1 >= max_depth:
                dirnames[:] = []
        for name in sorted(filenames):
            if stop.is_set():
                return  # the caller was cancelled: nobody wants the rest
            if name in VCS_DIRS:
                continue  # a .git file (worktrees, submodules) is VCS plumbing too
            full = os.path.join(dirpath, name)
            if _regular_inside(root, full):
                yield full
