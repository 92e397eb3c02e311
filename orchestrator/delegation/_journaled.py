"""A sub-agent run in the run's journal: its start and its one result, and, on a
resume, the sub-agent the killed run started with the same tool call (whose journaled
result is delivered again, or whose journaled turns are served again)."""

from __future__ import annotations

import logging
from typing import Any

import msgspec
from agentcell.orchestrator.definitions._model import AgentDefinition
from agentcell.orchestrator.delegation._events import EventBus, SubAgentEnded
from agentcell.orchestrator.delegation._prepare import Prepared
from agentcell.orchestrator.delegation._request import DelegationRequest, RunHandle, Scope
from agentcell.orchestrator.delegation._results import SubAgentResult
from agentcell.orchestrator.journal._replay import AgentPast, Answer
from agentcell.orchestrator.records._store import subagent_json
from agentcell.orchestrator.workspace._worktree import (
    Worktree,
    WorktreeError,
    adopt_worktree,
    journaled_worktree,
)

log = logging.getLogger("agentcell.runner")


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


def journaled_spec(
    prepared: Prepared,
    scope: Scope,
    definition: AgentDefinition,
    before: AgentPast | None,
) -> AgentPast | None:
    """A journaled run's sub-agent reports its tool calls, and its definition is
    journaled as it starts (its resume runs it); a resumed one is handed what it did
    before, not to be done again (returned). Its team knows what it was granted."""
    spec = prepared.spec
    # What it was granted, as the parent narrowed it (trust, its parent's tools).
    grants = {
        "tools": [*spec.tools, *(t.name for t in spec.remote_tools)],
        "sandbox": spec.sandbox,
        "network": spec.network,
        "permission_mode": spec.permission_mode,
        "mcp_servers": [server.name for server in spec.mcp_servers],
    }
    team = scope.account.team if scope.account is not None else None
    if team is not None and (member := team.roster.members.get(spec.agent_id)) is not None:
        member.grants = grants
    journal = scope.account.journal if scope.account is not None else None
    spec.report_tools = journal is not None
    if journal is not None:
        # A file's definition may change before a resume: it is kept as it was. A built-in
        # or one given in code is the resuming orchestrator's own again.
        from_file = definition.source not in ("builtin", "programmatic")
        dumped = definition.model_dump(mode="json") if from_file else None
        relayed = spec.model_via_parent
        journal.fact(
            "definition", agent=spec.agent_id, definition=dumped, relayed=relayed, grants=grants
        )
    if before is not None:
        spec.replayed_tools = dict(before.tools)
        if (past := scope.account.past if scope.account is not None else None) is not None:
            spec.replayed_mail = past.team.taken_by(spec.agent_id)
        spec.replay_turns = len(before.answers)
        if note := restart_note(before):
            prepared.warnings.append(note)
    return before


def definition_again(
    journaled: dict[str, Any], current: AgentDefinition | None
) -> AgentDefinition | None:
    """A resumed sub-agent's definition: the one journaled when it started (its file may
    have changed since: then said, naming the file). None if it no longer reads."""
    try:
        definition = AgentDefinition.model_validate(journaled)
    except ValueError:
        return current
    if current is not None and current != definition:
        log.warning(
            "%s changed since the killed run started %s: the resume runs it as it was then",
            definition.source,
            definition.name,
        )
    return definition


def restart_note(before: AgentPast | None) -> str:
    """What a resumed sub-agent's result says when it could not go on where it stopped."""
    if before is None or before.relayed or before.result is not None:
        return ""
    return (
        "resumed from its prompt: its model calls did not pass through the orchestrator "
        '(a model given in code, ray.model_route = "node", or a provider it does not '
        "relay), so none were journaled"
    )


def gone_on_in(past: AgentPast | None, prepared: Prepared, replay: list[Answer]) -> Worktree | None:
    """On a resume, the worktree the killed run gave this sub-agent, to go on in; None
    for a fresh one. A resumed sub-agent that gets a fresh one starts again from its
    prompt (it would remember changes it cannot see: its tools' work is in the old one,
    which is kept as the kill left it), and its result says why."""
    if past is None:
        return None
    why = "the killed run journaled no worktree for it"
    if past.worktree is not None:
        try:
            return adopt_worktree(past.worktree)
        except WorktreeError as exc:
            why = str(exc)
    replay.clear()
    prepared.spec.replayed_tools = {}
    prepared.warnings.append(
        f"resumed from its prompt in a fresh worktree ({why}); the killed run's worktree, "
        "if any, is kept as it was, on its own branch"
    )
    return None


def journal_worktree(scope: Scope, agent_id: str, tree: Worktree) -> None:
    """The run's journal keeps the worktree a sub-agent works in, as it was made (or
    adopted), before the sub-agent starts: what a resume goes on in."""
    journal = scope.account.journal if scope.account is not None else None
    if journal is not None:
        journal.fact("worktree", agent=agent_id, tree=journaled_worktree(tree))
