"""The fork server's lean start request (worker/child/_fork_request.py), and what it keeps."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import multiprocess
import pytest
from agentcell.orchestrator.backends._forkserver import WorkerPool
from agentcell.orchestrator.backends._outcome import OutcomeKind
from agentcell.protocol import PROTOCOL_VERSION, Start
from agentcell.worker.child._main import child_main
from conftest import SpawnRecorder

DESCRIBE = Start(protocol_version=PROTOCOL_VERSION, run_id="t", handler="start_handlers:describe")


async def _describe(pool: WorkerPool) -> dict[str, Any]:
    async with pool.lease() as lease:
        await lease.send(DESCRIBE)
        frame = await lease.recv()
        outcome = await lease.wait()
    assert outcome.kind is OutcomeKind.RESULT, (frame, outcome)
    assert outcome.result is not None
    return dict(outcome.result.data)


async def test_children_are_forked_for_the_lean_request_with_the_parents_path_and_cwd(
    spawned: SpawnRecorder, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with WorkerPool(max_workers=1, warm=0) as pool:
        # Changed after the fork server started: each request carries the parent's
        # working directory and sys.path (the handler's module is found through it).
        monkeypatch.chdir(tmp_path)
        seen = await _describe(pool)
    assert seen["cwd"] == str(tmp_path)
    assert seen["name"].startswith("agentcell-child-")
    # No multiprocess Process object was sent (nor unpickled) to start it.
    assert seen["started_as_process_object"] is False


def _closure_target() -> Any:
    marker = "made in a closure"

    def target(conn: Any, boot: Any) -> None:
        assert marker  # a closure: no pickle by reference; it travels by value (dill)
        child_main(conn, boot)

    return target


async def test_a_target_that_only_dill_can_send_still_starts(spawned: SpawnRecorder) -> None:
    async with WorkerPool(max_workers=1, warm=0, target=_closure_target()) as pool:
        seen = await _describe(pool)
    assert seen["name"].startswith("agentcell-child-")


async def test_a_partial_target_starts(spawned: SpawnRecorder) -> None:
    target = functools.partial(child_main)
    async with WorkerPool(max_workers=1, warm=0, target=target) as pool:
        assert (await _describe(pool))["started_as_process_object"] is False


async def test_multiprocess_own_process_start_still_works_on_the_same_fork_server(
    spawned: SpawnRecorder,
) -> None:
    from start_handlers import say_hello

    async with WorkerPool(max_workers=1, warm=0, preload=["start_handlers"]) as pool:
        await _describe(pool)  # the fork server is agentcell's, serving both requests
        ctx = multiprocess.get_context("forkserver")
        a, b = ctx.Pipe(duplex=False)
        process = ctx.Process(target=say_hello, args=(b,), name="agentcell-child-plain")
        process.start()
        b.close()
        try:
            assert a.poll(30), "the Process.start() child never answered"
            assert a.recv_bytes().startswith(b"hello from ")
        finally:
            process.join(30)
            a.close()
        assert process.exitcode == 0
