"""Every way a child can die, each next to siblings that must finish normally.

Each case: three sibling leases start and wait; the crashing lease runs; then the
siblings are told to finish. Asserted: the crash's typed outcome, the siblings' clean
results, the parent still serving, and (by the ``spawned`` fixture) no process left.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import pytest
from agentcell.orchestrator.backends._forkserver import WorkerPool
from agentcell.orchestrator.backends._outcome import OutcomeKind
from agentcell.protocol import Control, ControlAction, Limits, RunStatus
from agentcell.worker.child import _proc
from conftest import SpawnRecorder
from pool_util import first_frame, run_op, start


@dataclasses.dataclass
class Case:
    op: str
    kind: OutcomeKind
    detail: str  # a substring of the outcome's one-line description
    args: dict[str, Any] = dataclasses.field(default_factory=dict)
    deadline: float | None = None


CASES = [
    Case("raise", OutcomeKind.FAILURE, "ValueError: boom from the child"),
    Case("sys_exit", OutcomeKind.EXITED, "exited with code 0 without a result"),
    Case("os_exit", OutcomeKind.EXITED, "exited with code 3 without a result", {"code": 3}),
    Case("segfault", OutcomeKind.SIGNALED, "killed by signal SIGSEGV (segmentation fault)"),
    Case("sigkill", OutcomeKind.SIGNALED, "killed by signal SIGKILL (possibly out of memory)"),
    Case("abort", OutcomeKind.SIGNALED, "killed by signal SIGABRT (aborted)"),
    Case("memory_error", OutcomeKind.FAILURE, "MemoryError"),
    Case(
        "allocate",
        OutcomeKind.FAILURE,
        "MemoryError",
        {"bytes": 4 << 30, "limits": Limits(address_space_bytes=1 << 30)},
    ),
    Case("hang", OutcomeKind.DEADLINE, "deadline of 0.2 s passed", deadline=0.2),
    Case("block_loop", OutcomeKind.DEADLINE, "deadline of 0.2 s passed", deadline=0.2),
    Case("oversize", OutcomeKind.PROTOCOL_ERROR, "peer announced a frame of 67108864 bytes"),
    Case("garbage", OutcomeKind.PROTOCOL_ERROR, "undecodable frame"),
    Case("half_frame", OutcomeKind.PROTOCOL_ERROR, "stream ended inside a frame"),
    Case("grandchild", OutcomeKind.SIGNALED, "SIGKILL", {"then": "sigkill", "own_group": True}),
]


@pytest.mark.parametrize("case", CASES, ids=[f"{c.op}-{c.args.get('then', '')}" for c in CASES])
async def test_crash_is_contained(case: Case, spawned: SpawnRecorder) -> None:
    async with WorkerPool(max_workers=8, warm=4) as pool:
        siblings = [await pool.acquire() for _ in range(3)]
        for sibling in siblings:
            await sibling.send(start("wait_for_steer"))
            await first_frame(sibling)  # each sibling is up and waiting

        args = dict(case.args)
        limits = args.pop("limits", None)
        async with pool.lease() as lease:
            await lease.send(start(case.op, limits=limits, **args))
            if case.deadline is not None:
                lease.set_deadline(case.deadline, cancel_grace=0.2, term_grace=0.2)
            frames = [f async for f in lease]
            outcome = await lease.wait()

        assert outcome.kind is case.kind, outcome
        assert case.detail in outcome.detail, outcome.detail
        assert not _proc.is_alive(outcome.pid)
        assert _proc.session_members(outcome.pid) == []  # nothing it started survives
        grandchildren = [
            int(f.event.message.split()[-1])  # type: ignore[union-attr]
            for f in frames
            if getattr(getattr(f, "event", None), "message", "").startswith("grandchild")
        ]
        for pid in grandchildren:
            assert not _proc.is_alive(pid)

        for i, sibling in enumerate(siblings):
            await sibling.send(Control(action=ControlAction.STEER, text=f"sibling {i}"))
        for i, sibling in enumerate(siblings):
            sibling_outcome = await sibling.wait()
            await sibling.release()
            assert sibling_outcome.kind is OutcomeKind.RESULT
            assert sibling_outcome.result is not None
            assert sibling_outcome.result.text == f"sibling {i}"

        # The parent goes on serving.
        _, after = await run_op(pool, "echo", text="still here")
        assert after.result is not None and after.result.text == "still here"


async def test_grandchild_left_running_by_a_clean_exit_is_killed(
    spawned: SpawnRecorder,
) -> None:
    async with WorkerPool(max_workers=2, warm=0) as pool:
        for own_group in (False, True):
            frames, outcome = await run_op(pool, "grandchild", own_group=own_group)
            assert outcome.kind is OutcomeKind.RESULT
            assert outcome.result is not None and outcome.result.status is RunStatus.COMPLETED
            grandchild = int(outcome.result.text)
            assert not _proc.is_alive(grandchild)


async def test_many_crashes_at_once_leave_the_parent_serving(spawned: SpawnRecorder) -> None:
    ops = ["segfault", "sigkill", "raise", "os_exit", "garbage", "echo"] * 4
    async with WorkerPool(max_workers=8, warm=2) as pool:
        results = await asyncio.gather(*(run_op(pool, op) for op in ops))
        kinds = [outcome.kind for _, outcome in results]
        assert kinds.count(OutcomeKind.RESULT) == 4
        assert kinds.count(OutcomeKind.SIGNALED) == 8
        assert kinds.count(OutcomeKind.FAILURE) == 4
        assert kinds.count(OutcomeKind.EXITED) == 4
        assert kinds.count(OutcomeKind.PROTOCOL_ERROR) == 4
