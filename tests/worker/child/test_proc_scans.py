"""The full /proc scans that follow a kill or a crash run in a thread, never on the event
loop, and a child's outcome is still final only once what it left behind is gone."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from agentcell.orchestrator.backends._forkserver import WorkerPool
from agentcell.orchestrator.backends._outcome import OutcomeKind
from agentcell.worker.child import _proc
from conftest import SpawnRecorder
from pool_util import first_frame, run_op, start


@pytest.fixture
def scans(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """One entry per /proc scan: True when it ran on a thread with a running event loop."""
    seen: list[bool] = []
    original = _proc.process_table

    def recording() -> Any:
        try:
            asyncio.get_running_loop()
            seen.append(True)
        except RuntimeError:
            seen.append(False)
        return original()

    monkeypatch.setattr(_proc, "process_table", recording)
    return seen


async def test_scans_after_crashes_and_kills_stay_off_the_event_loop(
    spawned: SpawnRecorder, scans: list[bool]
) -> None:
    async with WorkerPool(max_workers=4, warm=0) as pool:
        # A crash that leaves a grandchild behind: swept, and gone before the outcome.
        frames, crashed = await run_op(pool, "grandchild", then="sigkill")
        grandchild = int(frames[0].event.message.split()[1])  # type: ignore[union-attr]
        assert crashed.kind is OutcomeKind.SIGNALED
        assert not _proc.is_alive(grandchild)
        # A kill by the parent (deadline, then SIGKILL to a child that ignores SIGTERM).
        async with pool.lease() as lease:
            await lease.send(start("block_loop"))
            await first_frame(lease)
            lease.set_deadline(0.01, cancel_grace=0.05, term_grace=0.05)
            killed = await lease.wait()
        assert killed.kind is OutcomeKind.DEADLINE and killed.signal == "SIGKILL"
        # A protocol error: killed at once by the parent.
        _, broken = await run_op(pool, "garbage")
        assert broken.kind is OutcomeKind.PROTOCOL_ERROR
    assert len(scans) >= 4  # the sweeps and the kills did scan
    assert not any(scans), scans


#: Run in a session of its own: were a guard missing, ``killpg(0)`` would end this
#: script's own group (not the test's), and signal 0 sends nothing to anyone.
_NO_PID_SCRIPT = """
import signal
from agentcell.worker.child import _proc
print(_proc.kill_session(0, signal.SIGTERM), _proc.kill_session(-1, 0),
      _proc.kill_tree(0, 0), _proc.kill_tree(-1, 0), _proc.kill_descendants(0, 0),
      _proc._signal(0, 0), _proc._signal(-1, 0), flush=True)
"""


def test_a_pid_of_zero_or_below_signals_nothing() -> None:
    # To kill(2), 0 is the caller's own group and -1 every process it may signal: a pid
    # never learnt (0) must not turn a clean-up into killing the caller or everything.
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", _NO_PID_SCRIPT],
        capture_output=True, text=True, timeout=60, start_new_session=True,
    )  # fmt: skip
    assert done.returncode == 0, (done.returncode, done.stderr)
    assert done.stdout.split() == ["[]", "[]", "[]", "[]", "0", "False", "False"]
