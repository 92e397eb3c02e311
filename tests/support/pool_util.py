"""Helpers for tests that drive the pool with the fixture handlers in pool_handlers."""

from __future__ import annotations

from typing import Any

from agentcell.orchestrator.backends._forkserver import WorkerPool
from agentcell.orchestrator.backends._outcome import ChildOutcome
from agentcell.orchestrator.backends._workers import Lease
from agentcell.protocol import PROTOCOL_VERSION, Frame, Limits, Start

HANDLER = "pool_handlers:run"


def start(op: str, *, limits: Limits | None = None, heartbeat_s: float = 1.0, **args: Any) -> Start:
    return Start(
        protocol_version=PROTOCOL_VERSION,
        run_id=f"test-{op}",
        handler=HANDLER,
        args={"op": op, **args},
        limits=limits,
        heartbeat_s=heartbeat_s,
    )


async def run_op(pool: WorkerPool, op: str, **kwargs: Any) -> tuple[list[Frame], ChildOutcome]:
    """Lease a child, run one op to its end, return every frame and the outcome."""
    async with pool.lease() as lease:
        await lease.send(start(op, **kwargs))
        frames = [frame async for frame in lease]
        outcome = await lease.wait()
    return frames, outcome


async def first_frame(lease: Lease) -> Frame:
    frame = await lease.recv()
    assert frame is not None, lease.outcome
    return frame
