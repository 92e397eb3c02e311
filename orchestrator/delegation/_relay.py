"""Relay: a live child, from its ``Start`` to its end.

The second of a delegation's three phases (after ``_prepare``, before ``_settle``). The
child's frames come in here: its events go to the bus (tagged with its agent id and the
parent's tool call) and its usage to the ledger; its questions — an approval, a hook, a
nested ``task``, a provider permit, a model call (``_model_relay``) — are answered, each
in a task of the relay's own ``TaskGroup``, so none outlives the child and one that fails
fails this child's run (the runner turns that into this child's result; its siblings go
on).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import msgspec
from agentcell.orchestrator.approvals._channel import (
    ApprovalAnswer,
    ApprovalBroker,
    ApprovalQuery,
)
from agentcell.orchestrator.approvals._hooks import HookRunner
from agentcell.orchestrator.approvals._question import refused_tool
from agentcell.orchestrator.approvals._stop_hooks import SubagentStopHooks
from agentcell.orchestrator.backends._interface import WorkerLease
from agentcell.orchestrator.config._settings import Settings
from agentcell.orchestrator.definitions._model import AgentDefinition
from agentcell.orchestrator.definitions._registry import AgentRegistry
from agentcell.orchestrator.delegation._events import AgentActivity, EventBus
from agentcell.orchestrator.delegation._request import DelegationRequest, RunAccount, Scope
from agentcell.orchestrator.delegation._results import SubAgentResult
from agentcell.orchestrator.delegation._task_args import parse_task_arguments
from agentcell.orchestrator.journal._journal import Journal
from agentcell.orchestrator.journal._replay import Answer
from agentcell.orchestrator.mcp_host._shared import SharedMcp
from agentcell.orchestrator.model_relay._call_ahead import CallAhead
from agentcell.orchestrator.model_relay._limiter import ChildPermits, ProviderLimiter
from agentcell.orchestrator.model_relay._relay import ModelPools, ModelRelay
from agentcell.orchestrator.network._web_fetch import NAME as WEB_FETCH
from agentcell.orchestrator.network._web_fetch import answer as answer_web_fetch
from agentcell.orchestrator.teams._mail import Team
from agentcell.orchestrator.teams._tools import TEAM_TOOLS, answer_team_tool, hooks_of
from agentcell.orchestrator.telemetry._child_spans import ChildSpans, nested_trace
from agentcell.orchestrator.telemetry._usage import UsageLedger
from agentcell.protocol import (
    AgentSpec,
    ApprovalReply,
    ApprovalRequest,
    ChannelClosed,
    DelegateReply,
    DelegateRequest,
    Event,
    HookReply,
    HookRequest,
    ModelCall,
    ModelCancel,
    Notice,
    PermitDone,
    PermitRequest,
    SpanBatch,
    ToolRecord,
    ToolRecorded,
    TurnStarted,
    Usage,
    UsageUpdate,
)
from agentcell.worker import MCP_PREFIX

#: Requests one child may have open at once (a model's parallel tool calls each ask
#: at most one approval, hook or delegation); beyond it the child is not one of ours.
MAX_OPEN_REQUESTS = 1024

#: How a nested ``task`` is run: the runner's ``run``.
Delegate = Callable[[DelegationRequest, Scope], Awaitable[SubAgentResult]]


@dataclasses.dataclass(slots=True)
class Progress:
    """What the relay keeps about a child while it runs (the settle phase reads it)."""

    turns: int = 0
    usage: Usage = dataclasses.field(default_factory=Usage)
    model: str = ""
    queued_ms: float = 0.0
    spans: ChildSpans | None = None  # its trace, when the parent traces


@dataclasses.dataclass(slots=True)
class Parent:
    """What the relay answers with: the parent's shared services."""

    bus: EventBus
    broker: ApprovalBroker
    limiter: ProviderLimiter
    registry: AgentRegistry
    delegate: Delegate
    settings: Settings
    pools: ModelPools = dataclasses.field(default_factory=ModelPools)  # relayed model calls
    shared_mcp: SharedMcp | None = None  # the MCP servers the parent holds for every agent


@dataclasses.dataclass(slots=True)
class Child:
    """The child being relayed, as the runner prepared it."""

    lease: WorkerLease
    definition: AgentDefinition
    spec: AgentSpec
    scope: Scope
    call_id: str
    background: bool
    hooks: HookRunner
    stop_hooks: SubagentStopHooks
    ledger: UsageLedger
    ahead: CallAhead | None = None  # its first model request, sent while it started
    replay: list[Answer] = dataclasses.field(default_factory=list)  # a resume's answers


class Relay:
    """Relays one child until its channel ends (or the relay is cancelled)."""

    def __init__(self, parent: Parent, child: Child, progress: Progress) -> None:
        self.parent = parent
        self.child = child
        self.progress = progress
        self._open: set[asyncio.Task[None]] = set()
        self._group: asyncio.TaskGroup | None = None
        self._models: ModelRelay | None = None

    async def run(self) -> None:
        """Until the child is gone. Raises what an answer raised (the first, unwrapped from
        the group), after every other answer has been cancelled."""
        try:
            async with asyncio.TaskGroup() as group:
                self._group = group
                permits = ChildPermits(
                    self.parent.limiter, self.child.lease.send_nowait, start=group.create_task
                )
                models = self._models = self._model_relay(group)
                try:
                    await self._pump(permits, models)
                finally:
                    # The child is gone (or we are): questions it asked are moot now, and
                    # what it held of the provider's limits goes back to its siblings.
                    await models.close()  # its model requests are cancelled upstream
                    self._charge_uncollected(models)
                    await permits.close()
                    for task in self._open:
                        task.cancel()
        except BaseExceptionGroup as errors:
            raise _first(errors) from errors
        finally:
            self._group = None

    def _charge_uncollected(self, models: ModelRelay) -> None:
        """What the servers reported for answers the child never reported usage after
        (it ended first, or a compromised one made calls its engine never counted):
        charged all the same, as if its last ``UsageUpdate`` had said it."""
        usage = models.counted_usage(Usage())
        if usage.input_tokens or usage.output_tokens:
            update = UsageUpdate(usage=usage, model=self.child.spec.model)
            self._on_event(Event(event=update))

    def _model_relay(self, group: asyncio.TaskGroup) -> ModelRelay:
        parent, lease = self.parent, self.child.lease
        models = ModelRelay(
            self.child.spec,
            parent.settings,
            parent.limiter,
            parent.pools,
            lease.send,
            send_nowait=lease.send_nowait,
            start=group.create_task,
            ahead=self.child.ahead,
            tokens_left=self.child.ledger.tokens_left,  # an output limit is clamped to it
            journal=account.journal if (account := self.child.scope.account) else None,
        )
        models.serve_again(self.child.replay)
        return models

    async def _pump(self, permits: ChildPermits, models: ModelRelay) -> None:
        lease = self.child.lease
        while (frame := await lease.recv()) is not None:
            if isinstance(frame, ModelCall):
                models.on_call(frame)
            elif isinstance(frame, ModelCancel):
                models.on_cancel(frame)
            elif isinstance(frame, PermitRequest):
                permits.on_request(frame)
            elif isinstance(frame, PermitDone):
                permits.on_done(frame)
            elif isinstance(frame, Event):
                self._on_event(frame)
            elif isinstance(frame, SpanBatch) and self.progress.spans is not None:
                self.progress.spans.take(frame)
            elif isinstance(frame, ToolRecord):
                self._tool_record(frame)
            elif isinstance(frame, ApprovalRequest):
                self._answer(self._approval(frame))
            elif isinstance(frame, DelegateRequest):
                with nested_trace(self.progress.spans, frame):  # the task copies the context
                    self._answer(self._delegation(frame))
            elif isinstance(frame, HookRequest):
                if frame.event == "SubagentStop" and not self.child.stop_hooks.claim():
                    lease.kill(
                        "protocol violation: a second SubagentStop request while one is open"
                    )
                    return
                self._answer(self._hook(frame))
            if len(self._open) > MAX_OPEN_REQUESTS:
                lease.kill(
                    f"protocol violation: more than {MAX_OPEN_REQUESTS} requests "
                    "(approvals, hooks, delegations) open at once"
                )
                return

    def _answer(self, coro: Coroutine[Any, Any, None]) -> None:
        """Answer in a task of the relay's group: it ends with the child at the latest."""
        assert self._group is not None
        task = self._group.create_task(coro)
        self._open.add(task)
        task.add_done_callback(self._open.discard)

    def _on_event(self, frame: Event) -> None:
        child, progress = self.child, self.progress
        agent_id, agent_type = child.spec.agent_id, child.spec.agent_type
        event = frame.event
        if isinstance(event, UsageUpdate):
            if self._models is not None:  # what the servers said, where they said it
                event = msgspec.structs.replace(
                    event, usage=self._models.counted_usage(event.usage)
                )
            progress.usage = progress.usage + event.usage
            progress.model = event.model or progress.model
            child.ledger.add_usage(agent_id, agent_type, event.model, event.usage)
            if (journal := _journal(child.scope)) is not None:
                journal.charged(agent_id, event.model, event.usage)
        elif isinstance(event, TurnStarted):
            progress.turns = event.turn
            child.ledger.add_turn(agent_id, agent_type)
        elif isinstance(event, Notice) and event.mail and (team := _team(child.scope)):
            team.taken(agent_id, event.mail, event.turn)
        self.parent.bus.publish(
            AgentActivity(agent_id=agent_id, event=event, call_id=child.call_id)
        )

    def _tool_record(self, frame: ToolRecord) -> None:
        """A tool call's start or whole result, into the run's journal (the backend
        dropped one without the child's signature); a start is acknowledged once written,
        and the child runs the call only then."""
        journal = _journal(self.child.scope)
        if journal is not None:
            journal.tool(self.child.spec.agent_id, frame)
        if not frame.finished and frame.request_id:  # 0: the child does not wait for it
            with contextlib.suppress(ChannelClosed):
                self.child.lease.send_nowait(ToolRecorded(request_id=frame.request_id))

    async def _send(self, reply: Any) -> None:
        with contextlib.suppress(ChannelClosed):
            await self.child.lease.send(reply)

    async def _approval(self, frame: ApprovalRequest) -> None:
        spec = self.child.spec
        query = ApprovalQuery(
            agent_id=spec.agent_id,
            agent_type=spec.agent_type,
            tool=frame.tool,
            arguments=frame.arguments,
            reason=frame.reason,
            call_id=frame.call_id,
            background=self.child.background,
        )
        refusal = refused_tool(frame.tool, spec)  # only a tool it was given
        answer = (
            ApprovalAnswer(False, refusal)
            if refusal
            else await self.parent.broker.decide(query, _journal(self.child.scope))
        )
        await self._send(
            ApprovalReply(
                request_id=frame.request_id, approved=answer.approved, reason=answer.reason
            )
        )

    async def _delegation(self, frame: DelegateRequest) -> None:
        child, shared = self.child, self.parent.shared_mcp
        if shared is not None and frame.tool.startswith(MCP_PREFIX):  # a shared server's tool
            reply = await shared.answer(frame, child.spec, _journal(child.scope))
        else:
            with child.lease.slot_lent():  # it waits on its own sub-agent: lend its slot
                reply = await self._delegation_reply(frame)
        await self._send(reply)

    async def _delegation_reply(self, frame: DelegateRequest) -> DelegateReply:
        child = self.child
        if frame.tool in TEAM_TOOLS and any(t.name == frame.tool for t in child.spec.remote_tools):
            team = _team(child.scope)
            spec = child.spec
            hook = hooks_of(child.hooks, (spec.agent_id, spec.agent_type))
            caller = (spec.agent_id, frame.call_id)
            output = await answer_team_tool(team, caller, frame.tool, frame.arguments, hook)
            return DelegateReply(
                request_id=frame.request_id, content=output.content, is_error=output.is_error
            )
        if frame.tool == WEB_FETCH and any(t.name == WEB_FETCH for t in child.spec.remote_tools):
            return await answer_web_fetch(
                frame,
                child.spec,
                child.definition,
                self.parent.settings,
                self.parent.broker,
                background=child.background,
            )
        return await delegation_reply(
            frame,
            child.definition,
            child.spec,
            registry=self.parent.registry,
            delegate=self.parent.delegate,
            background=child.background,
            account=child.scope.account,
        )

    async def _pre_compact(self, frame: HookRequest) -> HookReply:
        """Claude Code's PreCompact input: the trigger and its custom instructions. One
        that blocks (exit 2, ``"decision": "block"``) skips the compaction, as in Claude
        Code. A sub-agent's compaction is automatic (``hooked_tools`` offers "auto"
        alone), and an automatic one has no instructions: none are taken from the child
        (its words would reach your hook as the ones a user typed after ``/compact``)."""
        spec = self.child.spec
        payload = {
            "agent_id": spec.agent_id,
            "agent_type": spec.agent_type,
            "trigger": frame.tool,
            "custom_instructions": "",
        }
        outcome = await self.child.hooks.run("PreCompact", payload, frame.tool)
        return HookReply(request_id=frame.request_id, blocked=outcome.blocked)

    async def _hook(self, frame: HookRequest) -> None:
        spec, hooks, stop_hooks = self.child.spec, self.child.hooks, self.child.stop_hooks
        offered = spec.hooked_tools.get(frame.event, [])
        if not hooks.answers(frame.event, frame.tool, offered, bool(spec.hook_patterns)):
            if frame.event == "SubagentStop":
                stop_hooks.open = False
            reply = HookReply(request_id=frame.request_id)
        elif frame.event == "PreCompact":  # its history is about to be summarised
            reply = await self._pre_compact(frame)
        elif frame.event == "SubagentStop":  # the child's final answer, before it stops
            try:
                outcome = await stop_hooks.relayed(frame.response)
            finally:
                stop_hooks.open = False  # claimed when the frame came in
            reply = HookReply(
                request_id=frame.request_id, blocked=outcome.blocked, reason=outcome.reason
            )
        else:
            outcome = await hooks.tool_event(
                frame.event,
                tool=frame.tool,
                call_id=frame.call_id,
                arguments=frame.arguments,
                response=frame.response,
                is_error=frame.is_error,
                agent=(spec.agent_id, spec.agent_type),
            )
            reply = outcome.reply(frame.request_id, frame.tool)
        await self._send(reply)


async def delegation_reply(
    frame: DelegateRequest,
    definition: AgentDefinition,
    spec: AgentSpec,
    *,
    registry: AgentRegistry,
    delegate: Delegate,
    background: bool,
    account: RunAccount | None,
) -> DelegateReply:
    """A child's ``task`` call, checked against what it was offered, run, answered."""

    def refuse(text: str) -> DelegateReply:
        return DelegateReply(request_id=frame.request_id, content=text, is_error=True)

    offered = {tool.name for tool in spec.remote_tools}
    if frame.tool != "task" or frame.tool not in offered or spec.depth >= spec.max_depth:
        return refuse(
            f"permission denied: {spec.agent_type} at depth {spec.depth} cannot use "
            f"{frame.tool} (max depth {spec.max_depth})"
        )
    try:
        nested = parse_task_arguments(frame.arguments, call_id=frame.call_id)
    except ValueError as exc:
        return refuse(str(exc))
    # The schema offered only the allowed types; a forged call is refused here too.
    target = registry.get(nested.agent_type)
    if not definition.may_start(target.name if target else nested.agent_type):
        allowed = [n for n in registry.names() if definition.may_start(n)]
        return refuse(
            f"permission denied: {definition.name} may not start {nested.agent_type!r} "
            f"(its tools limit task to: {', '.join(allowed) or 'no registered agent'})"
        )
    # A grandchild's tools are resolved against its parent's — never the root's.
    child_scope = Scope(
        agent_id=spec.agent_id,
        tools=spec.tools,
        model=spec.model,
        depth=spec.depth,
        background=background,
        permission_mode=spec.permission_mode,
        max_depth=spec.max_depth,
        account=account,
    )
    nested.background = False  # nested runs block their parent's tool call
    result = await delegate(nested, child_scope)
    return DelegateReply(
        request_id=frame.request_id, content=result.render(), is_error=not result.ok
    )


def _journal(scope: Scope) -> Journal | None:
    return scope.account.journal if scope.account is not None else None


def _team(scope: Scope) -> Team | None:
    return scope.account.team if scope.account is not None else None


def _first(errors: BaseExceptionGroup) -> BaseException:
    """The first leaf of a (possibly nested) exception group."""
    error: BaseException = errors
    while isinstance(error, BaseExceptionGroup):
        error = error.exceptions[0]
    return error
