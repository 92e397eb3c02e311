"""A size cap on a sub-agent's private temp folder (issue 27 item 4).

The folder (``_spare.private_tmp``: ``$TMPDIR`` for the sub-agent and its bash) is on
the host's disk, where a command could write until that disk is full (1 GiB in 13 s).
Under ``workspace`` the sub-agent already has a private mount namespace (``_mountns``):
there a tmpfs of ``tmp_size_mb`` MiB, with one inode per 16 KiB of it (at least 1,024), is
mounted on the folder. A write past it fails with ``ENOSPC`` in that command alone; the
parent and the siblings go on. The tmpfs lives in the sub-agent's namespace only: when
the sub-agent and its commands are gone, so is the tmpfs and all it held, and the folder
the parent removes (``_sandbox.release``) is the empty one beneath. Landlock grants the
folder from a descriptor, so the grant is opened again on the tmpfs once it is mounted.
Where no mount namespace can be had, the folder stays uncapped and the sandbox says so.
"""

from __future__ import annotations

import ctypes
import os
from typing import Any

#: What ``agentcell sandbox`` and a result say where the cap cannot be had.
MISSING = "a cap on the private temp folder (no mount namespace: it is on the host's disk)"

_MS_NOSUID = 2
_MS_NODEV = 4
_libc = ctypes.CDLL(None, use_errno=True)


def inodes_for(size_mb: int) -> int:
    """The inode cap of a ``size_mb`` tmpfs: one per 16 KiB, at least 1,024."""
    return max(1024, size_mb * 64)


def cap(box: Any, grants: Any) -> None:
    """Mount the tmpfs on ``box.tmpdir`` (this process is in its private mount namespace
    when ``box.protected`` is set) and grant it in place of the folder beneath."""
    size_mb = getattr(box, "tmp_size_mb", 0)
    if not size_mb or box.tmpdir is None:
        return
    if not box.protected:
        box.missing.append(MISSING)
        return
    path = box.tmpdir
    before = os.open(path, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        real = os.readlink(f"/proc/self/fd/{before}")
    finally:
        os.close(before)
    options = (
        f"size={size_mb}m,nr_inodes={inodes_for(size_mb)},mode=0700,"
        f"uid={os.getuid()},gid={os.getgid()}"
    )
    flags = ctypes.c_ulong(_MS_NOSUID | _MS_NODEV)
    if _libc.mount(b"tmpfs", os.fsencode(real), b"tmpfs", flags, options.encode()) != 0:
        code = ctypes.get_errno()
        box.missing.append(f"a cap on the private temp folder (mount: {os.strerror(code)})")
        return
    mounted = os.open(real, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    for grant in grants.items:
        if grant.path == real:
            os.close(grant.fd)
            grant.fd = mounted
            break
    else:
        os.close(mounted)
    box.tmp_cap = f"tmp capped at {size_mb} MiB ({inodes_for(size_mb)} inodes, tmpfs)"
