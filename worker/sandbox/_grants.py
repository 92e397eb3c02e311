"""The folders a sandbox grants, opened and checked once, granted from their descriptors.

A granted folder is opened with ``O_PATH`` (no link on the way: ``real_folder``), its
real path read back from the kernel, and the Landlock rule is added from that very
descriptor, so nothing can be swapped in between the check and the grant (a rule added
by path would follow whatever link is there at that moment). A memory folder that is a
link (``.agentcell/agent-memory/NAME`` → ``$HOME``) is refused with one line naming it.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field
from pathlib import Path

from agentcell.worker._beneath import fd_path, real_folder


@dataclass
class Grant:
    fd: int
    path: str  # what the kernel says the descriptor is (the real folder granted)
    writable: bool


@dataclass
class Grants:
    items: list[Grant] = field(default_factory=list)
    memory: Grant | None = None
    outputs: Grant | None = None

    def add(self, fd: int, writable: bool) -> Grant:
        grant = Grant(fd, fd_path(fd), writable)
        self.items.append(grant)
        return grant

    def writable_roots(self) -> list[str]:
        return [grant.path for grant in self.items if grant.writable]

    def close(self) -> None:
        for grant in self.items:
            with contextlib.suppress(OSError):
                os.close(grant.fd)
        self.items.clear()


def open_grants(
    *,
    workdir: str,
    workdir_writable: bool,
    tmpdir: str,
    run_dir: str,
    memory_dir: str,
    git_admin: list[tuple[str, bool]],
) -> Grants:
    """Open every folder the sandbox grants; raises ``OutsideRoot`` for one that is not
    a real folder beneath its root."""
    grants = Grants()
    try:
        grants.add(_open_dir(tmpdir), True)
        if run_dir:
            fd = real_folder(run_dir, Path(run_dir) / "tool-outputs", create=True)
            grants.outputs = grants.add(fd, True)
        if memory_dir:  # ROOT/.agentcell/agent-memory/NAME: made by agentcell, 0700
            root = Path(memory_dir).parent.parent.parent
            grants.memory = grants.add(real_folder(root, memory_dir, create=True), True)
        grants.add(_open_dir(workdir), workdir_writable)
        for path, writable in git_admin:
            with contextlib.suppress(OSError):  # a worktree's admin folder, if it is there
                grants.add(_open_dir(path), writable)
    except BaseException:
        grants.close()
        raise
    return grants


def _open_dir(path: str) -> int:
    return os.open(path, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
