"""SIGKILL the orchestrator: every child, grandchild and the fork server must follow."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

from agentcell.worker.child import _proc
from places import SUPPORT


def test_children_die_with_a_hard_killed_parent() -> None:
    parent = subprocess.Popen(
        [sys.executable, str(SUPPORT / "parent_kill_script.py"), str(SUPPORT)],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    pids: list[int] = []
    try:
        assert parent.stdout is not None
        line = parent.stdout.readline()
        assert line, f"the parent script failed (exit {parent.wait()})"
        report = json.loads(line)
        pids = [
            *report["children"],
            *report["spares"],
            *report["grandchildren"],
            report["forkserver"],
        ]
        assert len(report["children"]) == 4 and len(report["grandchildren"]) == 2
        assert all(_proc.is_alive(pid) for pid in pids)

        os.kill(parent.pid, signal.SIGKILL)
        parent.wait()
        killed_at = time.monotonic()
        survivors = _wait_all_dead(pids, timeout=2.0)
        elapsed = time.monotonic() - killed_at
        assert survivors == [], f"still alive {elapsed:.2f} s after the parent died: {survivors}"
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        if parent.stdout is not None:
            parent.stdout.close()
        for pid in pids:
            _proc.kill_session(pid)
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


def _wait_all_dead(pids: list[int], timeout: float) -> list[int]:
    """Poll process state (an observable condition) until all are gone or time is up."""
    deadline = time.monotonic() + timeout
    while True:
        alive = [pid for pid in pids if _proc.is_alive(pid)]
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.01)
