"""The teardown check every process test relies on: it sees a child left alive, and it
never counts or kills a process that only inherited a recorded child's pid."""

from __future__ import annotations

import subprocess

from conftest import SpawnRecorder


def test_a_live_child_is_a_leftover_and_a_reused_pid_is_not_touched() -> None:
    child = subprocess.Popen(["sleep", "600"], start_new_session=True)
    bystander = subprocess.Popen(["sleep", "600"], start_new_session=True)
    try:
        recorder = SpawnRecorder()
        recorder.add(child.pid)
        assert f"child {child.pid} is alive" in recorder.leftovers()
        # The bystander stands for a process that got a recorded child's pid later.
        recorder.add(bystander.pid)
        recorder.started[bystander.pid] -= 1
        found = recorder.leftovers()  # (both are this test's descendants: listed as such)
        assert f"child {child.pid} is alive" in found
        assert f"child {bystander.pid} is alive" not in found
        recorder.kill_all()
        assert child.wait(10) == -9
        assert bystander.poll() is None, "kill_all killed a process that was not the child"
    finally:
        for proc in (child, bystander):
            proc.kill()
            proc.wait()
