"""The worker pool: warm spares, one process per run, bounds, controls, hardening."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys

import psutil
import pytest
from agentcell.orchestrator import PoolError
from agentcell.orchestrator.backends._forkserver import PoolTimings, WorkerPool
from agentcell.orchestrator.backends._outcome import OutcomeKind
from agentcell.orchestrator.backends._spawner import WorkerStartError
from agentcell.orchestrator.backends._starters import forkserver_pid
from agentcell.orchestrator.backends._workers import WorkerState
from agentcell.protocol import (
    ApprovalReply,
    ApprovalRequest,
    Control,
    ControlAction,
    Notice,
    Result,
    RunStatus,
    Start,
)
from agentcell.worker.child import _proc
from conftest import SpawnRecorder
from pool_util import first_frame, run_op, start


async def test_warm_spares_are_ready_before_any_lease(pool: WorkerPool) -> None:
    await pool.warmed()
    assert pool.idle == 2
    assert pool.live == 2


async def test_each_run_gets_a_fresh_process_that_is_never_reused(pool: WorkerPool) -> None:
    pids = []
    for i in range(4):
        frames, outcome = await run_op(pool, "echo", text=f"run {i}")
        assert outcome.kind is OutcomeKind.RESULT
        assert outcome.result is not None and outcome.result.text == f"run {i}"
        pids.append(outcome.pid)
        assert not _proc.is_alive(outcome.pid)
    assert len(set(pids)) == 4


async def test_lifecycle_states(pool: WorkerPool) -> None:
    lease = await pool.acquire()
    try:
        assert lease.state is WorkerState.BUSY
        assert lease.hello is not None and lease.hello.preload_ok, lease.hello
        await lease.send(start("echo"))
        assert isinstance(await first_frame(lease), Result)
        assert await lease.recv() is None
    finally:
        outcome = await lease.release()
    assert lease.state is WorkerState.DEAD
    assert outcome.kind is OutcomeKind.RESULT


async def test_events_stream_in_order(pool: WorkerPool) -> None:
    frames, outcome = await run_op(pool, "echo", events=50)
    notices = [f.event.message for f in frames if hasattr(f, "event")]
    assert notices == [f"event {i}" for i in range(50)]
    assert isinstance(frames[-1], Result)
    assert outcome.ok


async def test_max_workers_bounds_live_children_and_queues_the_rest(
    spawned: SpawnRecorder,
) -> None:
    async with WorkerPool(max_workers=2, warm=0) as pool:
        first = await pool.acquire()
        second = await pool.acquire()
        third = asyncio.create_task(pool.acquire())
        await asyncio.sleep(0)  # let it queue (a yield, not a wait for time to pass)
        assert pool.waiting == 1
        assert pool.live == 2
        assert not third.done()
        await first.send(start("echo"))
        await first.release()
        lease = await asyncio.wait_for(third, 30)
        assert pool.live <= 2
        assert lease.pid not in (first.pid, second.pid)
        await second.release()
        await lease.release()


async def test_a_cancelled_acquire_does_not_lose_a_child(spawned: SpawnRecorder) -> None:
    async with WorkerPool(max_workers=1, warm=0) as pool:
        waiter = asyncio.create_task(pool.acquire())
        await asyncio.sleep(0)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        lease = await asyncio.wait_for(pool.acquire(), 30)  # the one slot is still usable
        await lease.release()


async def test_closed_pool_refuses_leases(spawned: SpawnRecorder) -> None:
    pool = WorkerPool(warm=1)
    async with pool:
        pass
    with pytest.raises(PoolError, match="not running"):
        await pool.acquire()


async def test_close_kills_and_reaps_everything_including_the_forkserver(
    spawned: SpawnRecorder,
) -> None:
    async with WorkerPool(max_workers=4, warm=2) as pool:
        await pool.warmed()
        busy = await pool.acquire()
        await busy.send(start("grandchild", then="hang"))
        notice = await first_frame(busy)
        grandchild = int(notice.event.message.split()[-1])  # type: ignore[union-attr]
        server = forkserver_pid()
        assert server is not None and _proc.is_alive(server)
    assert busy.outcome is not None and busy.outcome.kind is OutcomeKind.KILLED
    assert not _proc.is_alive(grandchild)
    assert not _proc.is_alive(server)
    assert forkserver_pid() is None
    live = [p for p in psutil.Process().children(recursive=True) if p.status() != "zombie"]
    assert live == []


async def test_children_are_hardened(pool: WorkerPool) -> None:
    async with pool.lease() as lease:
        pid = lease.pid
        assert os.getsid(pid) == pid  # its own session and process group
        assert os.getpgid(pid) == pid
        with open(f"/proc/{pid}/oom_score_adj") as f:
            assert int(f.read()) == 500  # the OOM killer picks children before the parent
        assert psutil.Process(pid).ppid() == forkserver_pid()


async def test_cancel_control_reaches_a_cooperative_child(pool: WorkerPool) -> None:
    async with pool.lease() as lease:
        await lease.send(start("wait_for_cancel"))
        assert isinstance(await first_frame(lease), type(await _notice()))
        await lease.send(Control(action=ControlAction.CANCEL))
        frames = [f async for f in lease]
    assert isinstance(frames[-1], Result)
    assert frames[-1].result.status is RunStatus.CANCELLED


async def _notice() -> Notice:
    from agentcell.protocol import Event

    return Event(event=Notice(message=""))  # type: ignore[return-value]


async def test_steer_text_reaches_the_child(pool: WorkerPool) -> None:
    async with pool.lease() as lease:
        await lease.send(start("wait_for_steer"))
        await first_frame(lease)
        await lease.send(Control(action=ControlAction.STEER, text="look in src/"))
        frames = [f async for f in lease]
    assert frames[-1].result.text == "look in src/"  # type: ignore[union-attr]


async def test_approval_round_trip(pool: WorkerPool) -> None:
    async with pool.lease() as lease:
        await lease.send(start("approval"))
        request = await first_frame(lease)
        assert isinstance(request, ApprovalRequest)
        assert request.tool == "bash"
        await lease.send(
            ApprovalReply(request_id=request.request_id, approved=False, reason="not today")
        )
        frames = [f async for f in lease]
    assert frames[-1].result.text == "False:not today"  # type: ignore[union-attr]


async def test_deadline_cancels_a_cooperative_child_first(pool: WorkerPool) -> None:
    async with pool.lease() as lease:
        await lease.send(start("wait_for_cancel"))
        await first_frame(lease)
        lease.set_deadline(0.05, cancel_grace=30, term_grace=30)
        frames = [f async for f in lease]
        outcome = await lease.wait()
    assert outcome.kind is OutcomeKind.DEADLINE
    assert outcome.result is not None and outcome.result.status is RunStatus.CANCELLED
    assert isinstance(frames[-1], Result)


async def test_deadline_escalates_to_sigkill_when_the_child_ignores_everything(
    pool: WorkerPool,
) -> None:
    async with pool.lease() as lease:
        await lease.send(start("block_loop"))
        await first_frame(lease)
        lease.set_deadline(0.05, cancel_grace=0.1, term_grace=0.1)
        outcome = await lease.wait()
    assert outcome.kind is OutcomeKind.DEADLINE
    assert "deadline of 0.05 s passed" in outcome.detail
    assert outcome.signal == "SIGKILL"  # SIGTERM was ignored, so it took SIGKILL


async def test_missed_heartbeats_kill_the_child(spawned: SpawnRecorder) -> None:
    pool = WorkerPool(max_workers=2, warm=0, heartbeat_timeout=0.5)
    async with pool, pool.lease() as lease:
        await lease.send(start("block_loop", heartbeat_s=0.1))
        await first_frame(lease)
        outcome = await lease.wait()
    assert outcome.kind is OutcomeKind.HEARTBEAT
    assert "no heartbeat" in outcome.detail


async def test_heartbeats_keep_a_slow_child_alive(spawned: SpawnRecorder) -> None:
    pool = WorkerPool(max_workers=2, warm=0, heartbeat_timeout=0.5)
    async with pool, pool.lease() as lease:
        await lease.send(start("wait_for_steer", heartbeat_s=0.05))
        await first_frame(lease)
        # Far longer than the heartbeat timeout, counted in heartbeats, not seconds.
        beats = await _count_heartbeats(lease, 30)
        await lease.send(Control(action=ControlAction.STEER, text="done"))
        outcome = await lease.wait()
    assert beats == 30
    assert outcome.kind is OutcomeKind.RESULT


async def _count_heartbeats(lease: object, n: int) -> int:
    from agentcell.protocol import Heartbeat

    worker = lease._worker  # type: ignore[attr-defined]
    seen = 0
    original = worker.on_frame
    done = asyncio.get_running_loop().create_future()

    def counting(frame: object) -> None:
        nonlocal seen
        if isinstance(frame, Heartbeat):
            seen += 1
            if seen == n and not done.done():
                done.set_result(None)
        original(frame)

    worker.on_frame = counting
    await asyncio.wait_for(done, 60)
    worker.on_frame = original
    return seen


async def test_child_refuses_a_start_of_another_protocol_version(pool: WorkerPool) -> None:
    async with pool.lease() as lease:
        bad = start("echo")
        await lease.send(
            Start(protocol_version=999, run_id=bad.run_id, handler=bad.handler, args=bad.args)
        )
        outcome = await lease.wait()
    assert outcome.kind is OutcomeKind.FAILURE
    assert outcome.failure is not None and outcome.failure.error_type == "ProtocolMismatch"
    assert "v999" in outcome.detail


async def test_parent_refuses_a_child_of_another_protocol_version(
    spawned: SpawnRecorder,
) -> None:
    from pool_handlers import child_with_wrong_version

    async with WorkerPool(max_workers=1, warm=0, target=child_with_wrong_version) as pool:
        with pytest.raises(WorkerStartError, match="protocol mismatch: the child speaks v999"):
            await asyncio.wait_for(pool.acquire(), 30)


async def test_children_that_never_greet_fail_the_caller_instead_of_retrying_for_ever(
    spawned: SpawnRecorder,
) -> None:
    from pool_handlers import child_that_never_greets

    async with WorkerPool(
        max_workers=1,
        warm=0,
        target=child_that_never_greets,
        timings=PoolTimings(start_timeout=0.5),
    ) as pool:
        with pytest.raises(WorkerStartError, match="3 children in a row failed to start; last: "):
            await asyncio.wait_for(pool.acquire(), 60)


async def test_unknown_handler_is_a_reported_failure(pool: WorkerPool) -> None:
    async with pool.lease() as lease:
        s = start("echo")
        await lease.send(
            Start(protocol_version=s.protocol_version, run_id="x", handler="no_such_module:run")
        )
        outcome = await lease.wait()
    assert outcome.kind is OutcomeKind.FAILURE
    assert "no_such_module" in outcome.detail


async def test_children_import_nothing_the_forkserver_did_not_preload(
    pool: WorkerPool,
) -> None:
    frames, outcome = await run_op(pool, "modules")
    assert outcome.result is not None
    imported = outcome.result.data["imported"]
    assert imported == [], f"imported in the child, not preloaded: {imported}"
    # The shell parser is imported lazily (a command-line start does not need its ~120 ms
    # of table building) but is in the template; the HTTP client stack is not.
    assert outcome.result.data["inherited"] == ["bashlex"]


def test_a_command_line_start_does_not_build_the_shell_parsers_tables() -> None:
    code = "import sys, agentcell.orchestrator.cli; print('bashlex' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


def test_forkserver_boot_module_is_never_imported_in_the_parent() -> None:
    assert "agentcell.worker.child._forkserver_boot" not in sys.modules


def test_a_sentinel_past_descriptor_1024_still_reports_the_exit() -> None:
    """A busy orchestrator (a host application's files, ~500 live children) hands out
    descriptors past 1024, where ``select()`` refuses to look: the child's end must still
    be read from its sentinel, or its lease and the pool's close wait forever."""
    import resource

    import multiprocess.forkserver
    from agentcell.orchestrator.backends._starters import ForkedChild

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 2100:
        pytest.skip(f"the hard descriptor limit here is {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 2100), hard))
    read_end, write_end = os.pipe()
    high = os.dup2(read_end, 2000)
    os.close(read_end)
    try:
        child = ForkedChild(pid=0, sentinel=high, forkserver=None)
        assert child.poll() is None  # nothing written: still running
        multiprocess.forkserver.write_signed(write_end, 7)  # the fork server: "exit code 7"
        assert child.poll() == 7
        child.close()
        assert child.sentinel == -1
    finally:
        os.close(write_end)
        with contextlib.suppress(OSError):
            os.close(high)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_a_sentinel_closed_without_a_code_is_the_fork_server_dying() -> None:
    """Only the fork server's own death closes a child's sentinel with no exit code on
    it, and that, not ``/proc``, is what says so: a SIGKILLed server closes its
    descriptors before ``/proc`` shows it a zombie, and a check there raced the kernel
    (the pool called a killed server alive and reported a plain exit 255)."""
    import multiprocess.forkserver
    from agentcell.orchestrator.backends._starters import ForkedChild

    for written, code, died in ((None, 255, True), (255, 255, False), (0, 0, False)):
        read_end, write_end = os.pipe()
        child = ForkedChild(pid=0, sentinel=read_end, forkserver=None)
        if written is not None:  # the server reports the child's own exit code
            multiprocess.forkserver.write_signed(write_end, written)
        os.close(write_end)
        try:
            assert child.poll() == code
            assert child.server_died is died, written
        finally:
            child.close()
