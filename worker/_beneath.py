"""Opening a project's files and folders without following a link out of the project.

A cloned repository (never trusted) may ship ``AGENTS.md`` as a link to ``~/.ssh/id_rsa``
or ``.agentcell/agent-memory/NAME`` as a link to ``$HOME``. Everything agentcell reads
from a project, and every folder it grants to a sandbox, is therefore opened *beneath*
its root: ``openat2`` with ``RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS`` from the root's
descriptor (Linux 5.6+), so a link may point elsewhere inside the root but never out of
it; where ``openat2`` is missing, a walk that opens one component at a time with
``O_NOFOLLOW`` and refuses every link. The descriptor that comes back is what is read
(or what a Landlock rule is added from): nothing can be swapped in between.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import os
import stat
from pathlib import Path

_SYS_OPENAT2 = 437  # the same on x86_64 and aarch64 (generic syscall table)
RESOLVE_NO_XDEV = 0x01
RESOLVE_NO_MAGICLINKS = 0x02
RESOLVE_NO_SYMLINKS = 0x04
RESOLVE_BENEATH = 0x08

_libc = ctypes.CDLL(None, use_errno=True)
_syscall = _libc.syscall
_syscall.restype = ctypes.c_long


class _OpenHow(ctypes.Structure):
    _fields_ = [
        ("flags", ctypes.c_uint64),
        ("mode", ctypes.c_uint64),
        ("resolve", ctypes.c_uint64),
    ]


class OutsideRoot(OSError):
    """A path that leads out of its root (through a link, or by its own ``..``)."""

    def __str__(self) -> str:  # one line naming the link, as the user reads it
        return str(self.strerror)


def _openat2(dirfd: int, rel: str, flags: int, mode: int = 0) -> int:
    how = _OpenHow(
        flags | os.O_CLOEXEC | os.O_NOCTTY, mode, RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS
    )
    fd = _syscall(_SYS_OPENAT2, dirfd, os.fsencode(rel), ctypes.byref(how), ctypes.sizeof(how))
    if fd < 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code), rel)
    return int(fd)


@functools.cache
def has_openat2() -> bool:
    """Whether this kernel has ``openat2`` (asked once: ENOSYS means it has not)."""
    root = os.open("/", os.O_PATH | os.O_CLOEXEC)
    try:
        os.close(_openat2(root, ".", os.O_PATH))
    except OSError as exc:  # ENOSYS: an old kernel; EPERM: a seccomp filter said no
        return exc.errno not in (errno.ENOSYS, errno.EPERM)
    finally:
        os.close(root)
    return True


def _walk_nofollow(dirfd: int, rel: str, flags: int, mode: int = 0) -> int:
    """openat2's fallback: one component at a time, no link followed at all."""
    parts = [part for part in rel.split("/") if part not in ("", ".")]
    if ".." in parts:
        raise OSError(errno.EXDEV, "'..' in a path opened beneath its root", rel)
    current = os.dup(dirfd)
    try:
        for part in parts[:-1]:
            step = _step_nofollow(current, part, rel)
            os.close(current)
            current = step
        last = parts[-1] if parts else "."
        return os.open(last, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=current)
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # the last component is a link
            raise OSError(errno.EXDEV, "a link on the way", rel) from None
        raise
    finally:
        os.close(current)


def _step_nofollow(dirfd: int, part: str, rel: str) -> int:
    try:
        flags = os.O_PATH | os.O_NOFOLLOW | os.O_DIRECTORY | os.O_CLOEXEC
        return os.open(part, flags, dir_fd=dirfd)
    except NotADirectoryError:  # a file, or a link (O_NOFOLLOW): only a link is refused
        if stat.S_ISLNK(os.stat(part, dir_fd=dirfd, follow_symlinks=False).st_mode):
            raise OSError(errno.EXDEV, "a link on the way", rel) from None
        raise


def relative_to_root(root: str | os.PathLike[str], path: str | os.PathLike[str]) -> str:
    """``path`` as a path inside ``root`` (both taken as written, not resolved)."""
    base = os.path.abspath(root)
    full = os.path.abspath(os.path.join(base, path))
    rel = os.path.relpath(full, base)
    if rel == ".." or rel.startswith("../"):
        raise OutsideRoot(errno.EXDEV, f"{full} is not inside {base}: refused", str(full))
    return rel


def first_link(root: str | os.PathLike[str], rel: str) -> str:
    """The first component of ``rel`` that is a link (for the message), else ``rel``."""
    current = Path(os.path.abspath(root))
    for part in Path(rel).parts:
        current = current / part
        with contextlib.suppress(OSError):
            if current.is_symlink():
                return f"{current} (-> {os.readlink(current)})"
    return str(current)


def open_beneath(
    root: str | os.PathLike[str], path: str | os.PathLike[str], flags: int, mode: int = 0
) -> int:
    """A descriptor of ``path`` (absolute, or relative to ``root``) opened beneath
    ``root``. A link out of it raises ``OutsideRoot`` with one line naming the link."""
    rel = relative_to_root(root, path)
    rootfd = os.open(os.path.abspath(root), os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        try:
            if has_openat2():
                return _openat2(rootfd, rel, flags, mode)
            return _walk_nofollow(rootfd, rel, flags, mode)
        except OSError as exc:
            if exc.errno in (errno.EXDEV, errno.ELOOP):
                raise refused(root, rel) from None
            raise
    finally:
        os.close(rootfd)


def refused(root: str | os.PathLike[str], rel: str) -> OutsideRoot:
    link = first_link(root, rel)
    return OutsideRoot(
        errno.EXDEV,
        f"{link} leads out of {os.path.abspath(root)}: refused (agentcell never follows a "
        "link out of a project; replace the link with a real file or folder)",
        link,
    )


def read_beneath(
    root: str | os.PathLike[str], path: str | os.PathLike[str], limit: int | None = None
) -> bytes:
    """The bytes of a regular file beneath ``root`` (at most ``limit`` and one more, to
    tell a cut). FIFOs, devices and sockets are refused; ``OutsideRoot`` for a link out."""
    # O_NONBLOCK: a FIFO nobody writes to would block for ever; fstat then tells what it is.
    fd = open_beneath(root, path, os.O_RDONLY | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as file:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
        return file.read() if limit is None else file.read(limit + 1)


def real_folder(
    root: str | os.PathLike[str],
    path: str | os.PathLike[str],
    *,
    create: bool = False,
    mode: int = 0o700,
) -> int:
    """An ``O_PATH`` descriptor of the real folder ``path`` beneath ``root``, no link on
    the way at all (a granted folder must be what it says). ``create`` makes the missing
    components (``mode``: 0700, the folder is agentcell's). ``OutsideRoot`` otherwise."""
    rel = relative_to_root(root, path)
    if create:  # the root itself is the user's (a workdir, the home): made as asked
        os.makedirs(root, exist_ok=True)
    rootfd = os.open(os.path.abspath(root), os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    current = rootfd
    try:
        for part in [p for p in rel.split("/") if p not in ("", ".")]:
            step = _step_into(current, part, create=create, mode=mode)
            if step is None:
                raise _not_a_folder(root, rel)
            os.close(current)
            current = step
        return os.dup(current)
    finally:
        os.close(current)


def _step_into(dirfd: int, name: str, *, create: bool, mode: int) -> int | None:
    """The folder ``name`` in ``dirfd`` (made if missing and ``create``), None if it is
    not a real folder (a link, a file)."""
    if create:
        with contextlib.suppress(FileExistsError):
            os.mkdir(name, mode, dir_fd=dirfd)
    fd = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dirfd)
    if not stat.S_ISDIR(os.fstat(fd).st_mode):
        os.close(fd)
        return None
    return fd


def _not_a_folder(root: str | os.PathLike[str], rel: str) -> OutsideRoot:
    link = first_link(root, rel)
    return OutsideRoot(
        errno.ENOTDIR,
        f"{link} is not a real folder: refused (a folder agentcell grants or writes in must "
        "be a folder, not a link; remove it and agentcell makes it)",
        link,
    )


def fd_path(fd: int) -> str:
    """The path the kernel knows for ``fd`` (what a check of it actually checked)."""
    return os.readlink(f"/proc/self/fd/{fd}")
