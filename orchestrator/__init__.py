"""The agentcell parent: worker pool, runner, task tool, registry, tracker, CLI."""

from orchestrator._outcome import ChildOutcome, OutcomeKind
from orchestrator._pool import Lease, PoolError, WorkerPool, WorkerStartError, WorkerState

__all__ = [
    "ChildOutcome",
    "Lease",
    "OutcomeKind",
    "PoolError",
    "WorkerPool",
    "WorkerStartError",
    "WorkerState",
]
