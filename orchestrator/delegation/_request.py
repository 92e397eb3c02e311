"""What a delegation asks for, and who asks: the data the runner and the task tools share."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

from agentcell.orchestrator.delegation._results import SubAgentResult
from agentcell.orchestrator.telemetry._usage import UsageLedger
from agentcell.protocol import Message


@dataclasses.dataclass(slots=True)
class DelegationRequest:
    agent_type: str
    prompt: str
    description: str = ""
    # None: the definition's default (the task tool resolves it before running); a run
    # the caller awaits (delegate(), a nested task) is a foreground run.
    background: bool | None = None
    model: str | None = None  # may only narrow: see Runner._narrow
    max_turns: int | None = None
    isolation: str | None = None  # "worktree" for a git worktree of its own
    call_id: str = ""  # the parent's tool call
    resume: str = ""  # continue this finished sub-agent (its recorded session) instead


@dataclasses.dataclass(slots=True)
class Scope:
    """Who delegates: the main agent (depth 0) or a sub-agent (nesting)."""

    agent_id: str
    tools: Sequence[str]  # the delegating agent's own tools: a child never gets more
    model: str  # what ``inherit`` means
    depth: int = 0
    background: bool = False  # a background agent's descendants are background too
    history: Callable[[], list[Message]] | None = None  # completed turns, for context: fork
    permission_mode: str | None = None  # the delegating agent's: a child's can only be stricter
    max_depth: int | None = None  # the deepest its descendants may go
    # The orchestrator call this delegation belongs to; nested delegations inherit it.
    account: RunAccount | None = None


@dataclasses.dataclass(slots=True)
class RunAccount:
    """What one orchestrator call (``run``, ``delegate``, ``map``) gathers: its usage and
    budgets, the results of its sub-agents (nested ones included), where it is recorded."""

    ledger: UsageLedger
    results: list[SubAgentResult] = dataclasses.field(default_factory=list)
    run_dir: str = ""  # "" : not recorded
