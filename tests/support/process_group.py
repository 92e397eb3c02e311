"""A command run in a process group of its own, and everything it leaves killed with it
(an orchestrator SIGKILLed mid-run leaves no process the test could miss)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence


def run_in_group(
    args: Sequence[str],
    *,
    cwd: os.PathLike[str] | str,
    env: Mapping[str, str],
    input: str | None = None,
    timeout: float = 120,
) -> subprocess.CompletedProcess[str]:
    """``args`` run to its end (or its kill); then its group emptied, and checked empty."""
    proc = subprocess.Popen(
        list(args), cwd=cwd, env=dict(env), text=True, start_new_session=True,
        stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        out, err = proc.communicate(input, timeout=timeout)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
    assert_group_gone(proc.pid)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def assert_group_gone(group: int, within_s: float = 10) -> None:
    """The group's processes (an orchestrator's children die with it) are gone."""
    deadline = time.monotonic() + within_s
    while True:
        try:
            os.killpg(group, 0)
        except ProcessLookupError:
            return
        assert time.monotonic() < deadline, f"processes of group {group} outlived the run"
        time.sleep(0.05)
