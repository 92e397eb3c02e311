"""A small tmpfs of a test's own, mounted for the test and unmounted however it ends: a
disk that really fills (ENOSPC from the kernel, not a stand-in). Needs mount rights
(root); elsewhere the test that asks for one skips, saying why."""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


def mount_tmpfs(where: Path, options: str) -> None:
    where.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(where)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip() or done.returncode}")


def unmount(where: Path) -> None:
    if subprocess.run(["umount", str(where)], capture_output=True).returncode != 0:
        subprocess.run(["umount", "-l", str(where)], capture_output=True)


@contextlib.contextmanager
def mounted_tmpfs(where: Path, options: str) -> Iterator[Path]:
    mount_tmpfs(where, options)
    try:
        yield where
    finally:
        unmount(where)
