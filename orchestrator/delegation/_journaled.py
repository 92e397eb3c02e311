"""A sub-agent run in the run's journal: its start and its one result, and, on a
resume, the sub-agent the killed run started with the same tool call (whose journaled
result is delivered again, or whose journaled turns are served again)."""

from __future__ import annotations

from typing import Any

import msgspec
from agentcell.orchestrator.delegation._events import EventBus, SubAgentEnded
from agentcell.orchestrator.delegation._request import DelegationRequest, RunHandle, Scope
from agentcell.orchestrator.delegation._results import SubAgentResult
from agentcell.orchestrator.journal._replay import AgentPast
from agentcell.orchestrator.records._store import subagent_json


def earlier(scope: Scope, request: DelegationRequest) -> AgentPast | None:
    """The sub-agent a resumed run's killed run started with this very tool call."""
    past = scope.account.past if scope.account is not None else None
    if past is None or not request.call_id:
        return None
    return past.started_by(scope.agent_id, request.call_id)


def journaled_result(journaled: dict[str, Any]) -> SubAgentResult:
    """A result as ``subagent_json`` journaled it."""
    fields = {k: v for k, v in journaled.items() if v is not None}
    fields["text"] = fields.pop("final_text", "")
    return msgspec.convert(fields, SubAgentResult, strict=False)


def journal_start(scope: Scope, request: DelegationRequest, agent_id: str, task_id: str) -> None:
    """The run's journal says a sub-agent was started, by whom and for what."""
    journal = scope.account.journal if scope.account is not None else None
    if journal is not None:
        journal.fact(
            "started",
            agent=agent_id,
            by=scope.agent_id,
            depth=scope.depth,
            agent_type=request.agent_type,
            prompt=request.prompt,
            description=request.description,
            background=bool(request.background),
            task=task_id,
            call=request.call_id,
        )


def journal_end(scope: Scope, result: SubAgentResult) -> None:
    """The run's journal says how a sub-agent ended: its one result, whole."""
    journal = scope.account.journal if scope.account is not None else None
    if journal is not None:
        journal.fact("ended", agent=result.agent_id, result=subagent_json(result))


def delivered_again(
    journaled: dict[str, Any],
    request: DelegationRequest,
    scope: Scope,
    to: tuple[RunHandle, EventBus],
    task_id: str,
) -> SubAgentResult:
    """The result a sub-agent of the killed run ended with, delivered again as it was
    (the same words the model read then: on ``to``'s handle and bus), and journaled in
    this run too."""
    result = journaled_result(journaled)
    handle, bus = to
    handle.result = result
    bus.publish(SubAgentEnded(agent_id=result.agent_id, result=result))
    journal_start(scope, request, result.agent_id, task_id)
    if scope.account is not None:
        scope.account.results.append(result)
        journal_end(scope, result)
    return result
