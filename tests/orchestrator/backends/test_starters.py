"""More than one process starter: fork servers that start children side by side."""

from __future__ import annotations

import asyncio
import gc
import os
import signal
import subprocess
import sys

import psutil
import pytest
from agentcell.orchestrator import Orchestrator, Settings
from agentcell.orchestrator.backends import _starters
from agentcell.orchestrator.backends._forkserver import WorkerPool
from agentcell.orchestrator.backends._outcome import OutcomeKind
from agentcell.orchestrator.backends._starters import (
    MAX_STARTERS,
    default_starters,
    forkserver_pids,
)
from agentcell.orchestrator.backends._workers import wait_gone
from agentcell.protocol import (
    PROTOCOL_VERSION,
    Control,
    ControlAction,
    Event,
    Notice,
    Start,
)
from agentcell.worker.child import _proc
from conftest import SpawnRecorder


def parent_of(pid: int) -> int:
    return psutil.Process(pid).ppid()


def escape_then_die() -> Start:
    """A child leaves two descendants outside its session, then kills itself."""
    return Start(
        protocol_version=PROTOCOL_VERSION,
        run_id="r",
        handler="hardening_handlers:run",
        args={"op": "escape_then", "then": "sigkill"},
    )


async def test_two_starters_fork_children_in_turn_and_sweep_under_both(
    spawned: SpawnRecorder,
) -> None:
    async with WorkerPool(max_workers=4, warm=2, starters=2) as pool:
        await pool.warmed()
        servers = forkserver_pids()
        assert len(servers) == 2 and len(set(servers)) == 2
        leases = [await pool.acquire(), await pool.acquire()]
        # One child from each fork server: they take the requests in turn.
        assert sorted(parent_of(lease.pid) for lease in leases) == sorted(servers)
        left: list[int] = []
        for lease in leases:
            await lease.send(escape_then_die())
            notice = await lease.recv()
            assert isinstance(notice, Event) and isinstance(notice.event, Notice)
            left += [int(p) for p in notice.event.message.split()]
            await lease.send(Control(action=ControlAction.STEER, text="end now"))
        for lease in leases:
            outcome = await lease.wait()
            assert outcome.kind is OutcomeKind.SIGNALED, outcome
            await lease.release()
        # What each dead child left moved to its own fork server, and was swept there.
        await wait_gone(left, within=5.0)
        assert [pid for pid in left if _proc.is_alive(pid)] == []
    assert forkserver_pids() == []
    assert not any(_proc.is_alive(pid) for pid in servers)


async def test_a_killed_second_starter_is_replaced_and_its_child_reported(
    spawned: SpawnRecorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-starter-test-key-not-real")
    # No spares: each acquire starts one child, on the next fork server in turn.
    async with WorkerPool(max_workers=4, warm=0, starters=2) as pool:
        first, second = await pool.acquire(), await pool.acquire()
        servers = forkserver_pids()
        assert [parent_of(first.pid), parent_of(second.pid)] == servers
        os.kill(servers[1], signal.SIGKILL)  # what a tool of any sub-agent could do
        outcome = await second.wait()
        assert "its fork server died" in outcome.detail, outcome
        # The next start on the second server gets a new one, without a failed start.
        third, fourth = await pool.acquire(), await pool.acquire()
        now = forkserver_pids()
        assert now[0] == servers[0] and now[1] not in servers
        # Started again as it was first started: with the minimal environment, no keys.
        with open(f"/proc/{now[1]}/environ", "rb") as environ:
            assert b"sk-starter-test-key" not in environ.read()
        assert [parent_of(third.pid), parent_of(fourth.pid)] == now
        for lease in (first, third, fourth):
            await lease.release()


async def test_an_orchestrator_takes_its_starters_from_the_settings(
    spawned: SpawnRecorder,
) -> None:
    orch = Orchestrator(
        model="scripted:demo",
        settings=Settings(process_starters=3, warm_spares=3),
        load_agent_files=False,
        record=False,
    )
    async with orch:
        await asyncio.wait_for(orch.pool.warmed(), 60)
        assert orch.pool.starters == 3
        assert len(forkserver_pids()) == 3
    assert forkserver_pids() == []


def test_the_default_is_one_starter_per_four_cores_from_one_to_four(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    found = {}
    for cores in (1, 2, 7, 8, 16, 64):
        monkeypatch.setattr(os, "sched_getaffinity", lambda _pid, n=cores: set(range(n)))
        found[cores] = default_starters()
    assert found == {1: 1, 2: 1, 7: 1, 8: 2, 16: 4, 64: 4}
    with pytest.raises(ValueError, match=f"from 1 to {MAX_STARTERS}"):
        WorkerPool(starters=MAX_STARTERS + 1)


def test_a_process_started_with_its_own_environment_is_left_to_multiprocess() -> None:
    # Its Popen was kept in a module list for ever (one more for every fork server ever
    # started), and each still-running one warned at exit: 661 warnings in one suite run.
    read, write = os.pipe()
    code = "import os, sys; os.read(int(sys.argv[1]), 1)"
    try:
        with _starters._with_environment({"PATH": os.environ.get("PATH", "")}):
            pid = _starters._spawnv_passfds(
                sys.executable, [sys.executable, "-c", code, str(read)], [read]
            )
        gc.collect()  # a ResourceWarning here would fail the test (warnings are errors)
        assert not [o for o in gc.get_objects() if isinstance(o, subprocess.Popen) and o.pid == pid]
    finally:
        os.close(write)  # the child reads EOF and exits
        os.close(read)
    # Nothing reaped it behind multiprocess's back: its status is still there to collect.
    assert os.waitpid(pid, 0) == (pid, 0)
