"""This run's tool-output folder as a descriptor only agentcell's own code holds.

Under ``workspace`` the folder lies beneath ``.agentcell/``, which the mount namespace makes
read-only for the sub-agent's bash (see ``_mountns``). The sub-agent process keeps a
descriptor of the folder on the writable mount beneath (opened close-on-exec, so no
command inherits it) and writes long tool outputs through it; with no descriptor (no
mount namespace, or a run folder elsewhere) the folder is written by its path.
"""

from __future__ import annotations

import os

_folder_fd: int | None = None


def keep(fd: int) -> None:
    """Hold ``fd`` (a folder descriptor) as this run's tool-output folder."""
    global _folder_fd
    _folder_fd = fd


def write(name: str, text: str) -> bool:
    """Write ``name`` in the kept folder (False: there is none; write by path)."""
    if _folder_fd is None:
        return False
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(name, flags, 0o600, dir_fd=_folder_fd)
    with os.fdopen(fd, "w", encoding="utf-8", errors="surrogateescape") as file:
        file.write(text)
    return True
