"""What a delegation asks for, who asks, and the handle its caller holds on it: what the
runner and the task tools share."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import Callable, Sequence
from typing import Any

from agentcell.orchestrator.backends._interface import WorkerLease
from agentcell.orchestrator.delegation._results import SubAgentResult
from agentcell.orchestrator.journal._journal import Journal
from agentcell.orchestrator.journal._replay import RunPast
from agentcell.orchestrator.teams._mail import Team
from agentcell.orchestrator.telemetry._usage import UsageLedger
from agentcell.protocol import ChannelClosed, Control, ControlAction, Message, RunStatus


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
    name: str = ""  # what its team calls it (``task``'s name; the runner makes it unique)


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
    journal: Journal | None = None  # the run's journal (recorded runs): journal/
    past: RunPast | None = None  # a resume: the killed run it goes on from
    team: Team | None = None  # its agents by name, and the messages between them


class RunHandle:
    """Controls of a run in flight (cancel, pause, resume, steer), usable before it has a
    process: what arrives early is sent once the child is there."""

    def __init__(self) -> None:
        self.lease: WorkerLease | None = None
        self.task: asyncio.Task[Any] | None = None
        self.result: SubAgentResult | None = None
        self.cancelled = False
        self.cancel_status = RunStatus.CANCELLED
        self.cancel_reason = ""
        self._queued: list[Control] = []

    def attach(self, lease: WorkerLease) -> None:
        self.lease = lease
        for control in self._queued:
            self._send(control)
        self._queued.clear()

    def cancel(self, reason: str = "", status: RunStatus = RunStatus.CANCELLED) -> None:
        """End the run; its result gets ``status`` (e.g. ``budget``) and ``reason``."""
        if self.cancelled:
            return
        self.cancelled = True
        self.cancel_status, self.cancel_reason = status, reason
        if self.task is not None and not self.task.done():
            self.task.cancel()

    def pause(self) -> None:
        self._control(Control(action=ControlAction.PAUSE))

    def resume(self) -> None:
        self._control(Control(action=ControlAction.RESUME))

    def steer(self, text: str) -> None:
        self._control(Control(action=ControlAction.STEER, text=text))

    def message(self, text: str, message_id: str, *, interrupt: bool = False) -> None:
        """A message of its team's: read as a steer is, and said when it was taken;
        ``interrupt`` cancels its model call in flight so that it reads it now."""
        control = Control(
            action=ControlAction.STEER, text=text, message_id=message_id, interrupt=interrupt
        )
        self._control(control)

    def _control(self, control: Control) -> None:
        if self.lease is None:
            self._queued.append(control)
        else:
            self._send(control)

    def _send(self, control: Control) -> None:
        assert self.lease is not None
        with contextlib.suppress(ChannelClosed):
            self.lease.send_nowait(control)


def result_base(request: DelegationRequest, scope: Scope, agent_id: str) -> dict[str, Any]:
    """The fields every result of a run carries, known before anything is resolved."""
    return dict(
        agent_id=agent_id,
        name=request.name,
        agent_type=request.agent_type,
        description=request.description,
        background=bool(request.background) or scope.background,
        depth=scope.depth + 1,
        parent_id=scope.agent_id,
        started_at=time.time(),  # the timeline's clock (runs view)
    )


def join_team(
    scope: Scope, request: DelegationRequest, agent_id: str, handle: RunHandle
) -> Team | None:
    """The run's team, with this agent in it: named uniquely (``request.name`` becomes
    the name it got), its messages sent through ``handle``."""
    team = scope.account.team if scope.account is not None else None
    if team is not None:
        request.name = team.join(
            agent_id, request.name, request.agent_type, scope.agent_id, handle, scope=scope
        )
    return team


def team_idle(scope: Scope, agent_id: str) -> Callable[[], tuple[str, list[str]]] | None:
    """For its stop: its name and the agents whose messages it has not answered (none
    when it is not a named member of a team)."""
    team = scope.account.team if scope.account is not None else None
    return None if team is None else (lambda: team.unanswered(agent_id))
