"""Keep the file tools inside the agent's working directory.

Every path a model gives a file tool is resolved fully (``..`` and every symlink, file
or directory component, including the ``/proc/self/...`` magic links) before it is
checked, so a link inside the working directory that points elsewhere is refused like
the outside path itself. Directory walks (glob, grep) skip such links instead.

The check names the file; the open is then done beneath the working directory with
``open_beneath`` (``openat2`` with ``RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS``), so a
symlink swapped in between the two (a ``bash`` job racing the tool) is refused rather
than followed. Writes refuse files with more than one hard link. ``bash`` itself is
not confined here at all (that is the sandbox's work).
"""

from __future__ import annotations

import ctypes
import errno
import os
import stat
import threading
from collections.abc import Callable, Iterator, Sequence
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
    root: str,
    start: str,
    stop: threading.Event,
    max_depth: int | None = None,
    hidden: Callable[[str], bool] | None = None,
) -> Iterator[str]:
    """Regular files under ``start``, sorted directory by directory, never leaving ``root``.

    Symlinked directories are not descended into (an inside target is walked at its real
    place anyway, and this rules out loops); a symlinked file is yielded, under its own
    name, only if it resolves inside ``root``. VCS directories are skipped. ``max_depth``
    limits how many path segments below ``start`` a yielded file may have. A file or
    folder ``hidden`` names (a read rule covers it, under its name or a link's target) is
    passed over.
    """
    for dirpath, dirnames, filenames in os.walk(start):
        dirnames[:] = sorted(
            d
            for d in dirnames
            if d not in VCS_DIRS
            and d not in RECORD_DIRS
            and not is_hidden(hidden, os.path.join(dirpath, d))
        )
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
            if _regular_inside(root, full) and not is_hidden(hidden, full):
                yield full


def is_hidden(hidden: Callable[[str], bool] | None, path: str) -> bool:
    """True if ``hidden`` names ``path`` or, for a link, the file it leads to (a link to
    a denied file is as denied as the file)."""
    if hidden is None:
        return False
    if hidden(path):
        return True
    target = os.path.realpath(path)
    return target != path and hidden(target)


# --- opening beneath the working directory, atomically -------------------------------

_SYS_OPENAT2 = 437  # the same number on every Linux architecture (generic syscall table)
_RESOLVE_NO_MAGICLINKS = 0x02
_RESOLVE_NO_SYMLINKS = 0x04
_RESOLVE_BENEATH = 0x08


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


_libc = ctypes.CDLL(None, use_errno=True)
_openat2_missing = False


def open_beneath(root: str, resolved: str, flags: int, mode: int = 0o644) -> int:
    """Open ``resolved`` (a fully resolved path under ``root``) so that no symlink and no
    ``..`` can take the open outside ``root``, whatever changes between check and open.

    ``openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)`` from a descriptor of ``root``;
    where the kernel lacks it, a walk from that descriptor, one ``O_NOFOLLOW`` component
    at a time. A symlink swapped in after ``resolve_inside`` looked is refused (ELOOP).
    """
    global _openat2_missing
    rel = os.path.relpath(resolved, root)
    flags |= os.O_CLOEXEC | os.O_NOCTTY
    dirfd = os.open(root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        if not _openat2_missing:
            how = _OpenHow(
                flags,
                mode if flags & os.O_CREAT else 0,  # openat2 refuses a mode it would not use
                _RESOLVE_BENEATH | _RESOLVE_NO_SYMLINKS | _RESOLVE_NO_MAGICLINKS,
            )
            fd = _libc.syscall(
                _SYS_OPENAT2, dirfd, rel.encode(), ctypes.byref(how), ctypes.sizeof(how)
            )
            if fd >= 0:
                return int(fd)
            err = ctypes.get_errno()
            if err not in (errno.ENOSYS, errno.EPERM):  # EPERM: a seccomp filter said no
                raise OSError(err, os.strerror(err), resolved)
            _openat2_missing = True
        return _open_walking(dirfd, rel, flags, mode, resolved)
    finally:
        os.close(dirfd)


def _open_walking(dirfd: int, rel: str, flags: int, mode: int, shown: str) -> int:
    parts = [p for p in rel.split(os.sep) if p not in ("", ".")]
    if any(p == ".." for p in parts):
        raise OSError(errno.EXDEV, "path leaves the working directory", shown)
    current = os.dup(dirfd)
    try:
        for part in parts[:-1]:
            try:
                nxt = os.open(part, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=current)
            except NotADirectoryError:
                if stat.S_ISLNK(os.stat(part, dir_fd=current, follow_symlinks=False).st_mode):
                    raise OSError(errno.ELOOP, "a symlink in the path", shown) from None
                raise
            os.close(current)
            current = nxt
        last = parts[-1] if parts else "."
        return os.open(last, flags | os.O_NOFOLLOW, mode, dir_fd=current)
    finally:
        os.close(current)


def refuse_hard_links(st: os.stat_result, shown: str) -> None:
    """Writes go only to files with one name: a hard link inside the working directory
    may be the name of a file outside it, and writing through it changes that file."""
    if stat.S_ISREG(st.st_mode) and st.st_nlink > 1:
        raise ToolError(
            f"{shown} has {st.st_nlink} hard links: it may be a file outside the working "
            "directory under another name, so file tools do not write to it (copy it to a "
            "new file first if the change is meant)"
        )
