"""The runner: one sub-agent run, from its definition to its ``SubAgentResult``.

A delegation goes through three phases, each a module of its own:

- ``_prepare``: the definition, the request and the settings become the child's spec,
  walls and ``Start`` message (no process yet);
- ``_relay``: a leased child runs; its frames are relayed and its questions answered;
- ``_settle``: however it ended becomes exactly one result (and its worktree a commit).

The runner is what calls them in order, around what only it holds: the backend a process
is leased from, the worktree, the run's handle, the records of who may be resumed. Each run
is a task of a ``TaskGroup`` of its own, and every failure of a run becomes that run's
result, so one sub-agent's error never reaches its caller or its siblings.

A runner is made of what every run is given (``RunServices``), where its sub-agents run
(``RunPlaces``) and what a child may be handed besides its definition (``ChildKit``):
``_run_parts``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import logging
import secrets
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import msgspec
from agentcell.orchestrator.approvals._hooks import HookRunner, agent_transcript
from agentcell.orchestrator.approvals._stop_hooks import SubagentStopHooks
from agentcell.orchestrator.backends._interface import Backend, WorkerLease
from agentcell.orchestrator.backends._outcome import ChildOutcome
from agentcell.orchestrator.config._settings import Settings
from agentcell.orchestrator.definitions._model import AgentDefinition
from agentcell.orchestrator.delegation._events import (
    SubAgentEnded,
    SubAgentProcess,
    SubAgentStarted,
)
from agentcell.orchestrator.delegation._finishing import FinishingSteps, worktree_place
from agentcell.orchestrator.delegation._journaled import (
    definition_again,
    delivered_again,
    earlier,
    gone_on_in,
    journal_end,
    journal_start,
    journal_worktree,
    journaled_spec,
)
from agentcell.orchestrator.delegation._prepare import Prepared, Preparer, too_large
from agentcell.orchestrator.delegation._relay import Child, Parent, Progress, Relay
from agentcell.orchestrator.delegation._request import (
    DelegationRequest,
    RunHandle,
    Scope,
    join_team,
    result_base,
    team_idle,
)
from agentcell.orchestrator.delegation._results import SubAgentResult
from agentcell.orchestrator.delegation._resume import RecordedAgents
from agentcell.orchestrator.delegation._run_parts import ChildKit, RunPlaces, RunServices
from agentcell.orchestrator.delegation._settle import (
    absorb_test_record,
    parent_failure,
    settle,
    settle_worktree,
    start_failure,
    with_cancel_reason,
)
from agentcell.orchestrator.journal._replay import AgentPast, Answer
from agentcell.orchestrator.mcp_host._shared import SharedMcp
from agentcell.orchestrator.model_relay._call_ahead import CallAhead
from agentcell.orchestrator.model_relay._limiter import ProviderLimiter
from agentcell.orchestrator.model_relay._relay import call_ahead
from agentcell.orchestrator.network._egress import EgressProxy, network_value, open_proxy
from agentcell.orchestrator.telemetry._child_spans import ChildSpans, child_spans
from agentcell.orchestrator.telemetry._usage import BudgetExceeded, UsageLedger
from agentcell.orchestrator.workspace._hook_writes import HookWrites
from agentcell.orchestrator.workspace._worktree import Worktree, WorktreeError
from agentcell.protocol import MAX_FRAME_BYTES, ChannelClosed, Message, RunStatus, Start
from agentcell.worker import OutsideRoot, first_request_body, predictable, release_sandbox

log = logging.getLogger("agentcell.runner")

#: Processes tried for one run when the first ones turn out dead before their Start.
_START_ATTEMPTS = 3


@dataclasses.dataclass(slots=True)
class _Admitted:
    """A run the runner has agreed to start: what it prepared, before a process, and how
    that is put on the process it gets (its walls, the relay's view of it)."""

    request: DelegationRequest
    definition: AgentDefinition
    prepared: Prepared
    base: dict[str, Any]  # the fields every result of this run carries
    history: list[Message] | None  # a continuation's earlier session
    ledger: UsageLedger
    run_dir: str
    background: bool
    tree: Worktree | None = None
    hook_writes: HookWrites | None = None  # with a tree: what its hooks change there
    hooks: HookRunner | None = None
    stop_hooks: SubagentStopHooks | None = None
    spans: ChildSpans | None = None  # its trace, when the parent traces
    egress: EgressProxy | None = None  # its host-filtering proxy, for a network: list
    ahead: CallAhead | None = None  # its first model request, sent while it starts
    # A resume: the answers the killed run's agent was given, served again in order.
    replay: list[Answer] = dataclasses.field(default_factory=list)
    past: AgentPast | None = None  # and the rest the killed run journaled of it

    async def open_egress(self, settings: Settings, agent_id: str) -> None:
        """A ``network:`` list: the proxy the child's bash reaches its hosts through."""
        spec, definition = self.prepared.spec, self.definition
        self.egress = await open_proxy(
            network_value(settings.network, definition.network),
            sandbox=spec.sandbox,
            agent_id=agent_id,
            agent_type=definition.name,
            backend=definition.backend or settings.backend,
        )
        spec.egress_port = self.egress.port if self.egress is not None else None

    def wall(self, lease: WorkerLease, grace_s: float) -> None:
        """The limits the parent enforces on the leased process."""
        limits, spec = self.prepared.limits, self.prepared.spec
        if limits.address_space_bytes is not None:
            lease.set_memory_limit(limits.address_space_bytes)
        if limits.cpu_seconds is not None:
            lease.set_cpu_limit(limits.cpu_seconds)
        if spec.timeout_s is not None:
            # The child's engine stops itself at the timeout and reports; the parent's
            # deadline, a little later (``grace_s``), is the backstop for a child that cannot.
            lease.set_deadline(spec.timeout_s + grace_s, cancel_grace=1.0, term_grace=1.0)

    def child(self, lease: WorkerLease, scope: Scope) -> Child:
        """The run as the relay sees it, on ``lease``."""
        assert self.hooks is not None and self.stop_hooks is not None
        return Child(
            lease=lease,
            definition=self.definition,
            spec=self.prepared.spec,
            scope=scope,
            call_id=self.request.call_id,
            background=self.background,
            hooks=self.hooks,
            stop_hooks=self.stop_hooks,
            ledger=self.ledger,
            replay=self.replay,
        )


@dataclasses.dataclass(slots=True)
class _Ended:
    """How the live phase ended, for the settle phase."""

    progress: Progress
    outcome: ChildOutcome | None = None
    pid: int | None = None
    node: str = ""
    cancelled: bool = False
    failure: str = ""


class Runner:
    """Runs one sub-agent per ``run``: prepare, relay, settle (see the module)."""

    def __init__(
        self, services: RunServices, places: RunPlaces, kit: ChildKit | None = None
    ) -> None:
        settings, registry = services.settings, services.registry
        pool, workdir = places.pool, places.workdir
        kit = kit or ChildKit()
        self.pool = pool
        # The provider limits every child's model requests take a permit from.
        self.limiter = services.limiter or ProviderLimiter(settings.limits)
        # Other places a sub-agent can run (e.g. "ray"); "local" is always the pool.
        self.backends: dict[str, Backend] = {**(places.backends or {}), "local": pool}
        self.registry = registry
        self.settings = settings
        self.broker = services.broker
        self.ledger = services.ledger
        self.bus = services.bus
        self.workdir = workdir
        self.run_dir = places.run_dir
        self.model_objects = kit.model_objects or {}
        self.hooks = services.hooks or HookRunner(cwd=workdir)
        self.home = places.home or Path.home()
        self.prepare = Preparer(
            settings=settings,
            registry=registry,
            workdir=workdir,
            home=self.home,
            limiter=self.limiter,
            model_objects=self.model_objects,
            custom_tools={tool.name: tool for tool in kit.custom_tools},
            task_tool_spec=kit.task_tool_spec,
        )
        # Servers started once by the parent and shared by every agent that names one.
        self.shared_mcp = SharedMcp.for_settings(settings, workdir)
        self._parent = Parent(
            shared_mcp=self.shared_mcp,
            bus=self.bus,
            broker=self.broker,
            limiter=self.limiter,
            registry=registry,
            delegate=self.run,
            settings=settings,
        )
        self._ids = itertools.count(1)
        self._session = secrets.token_hex(3)
        self.recorded = RecordedAgents()  # what `task` with `resume` may continue
        # What must finish after its run is cancelled (releases, git): owned here.
        self.finishing = FinishingSteps()
        self.tracing: Any = services.tracing

    def new_agent_id(self) -> str:
        return f"a{next(self._ids)}"

    def agent_id_for(self, request: DelegationRequest, scope: Scope) -> str:
        """The id a sub-agent started by ``request`` gets: on a resume, the one the
        killed run gave the sub-agent that same tool call started; else a new one."""
        before = earlier(scope, request)
        return before.agent_id if before is not None else self.new_agent_id()

    def number_after(self, highest: int) -> None:
        """New sub-agents get ids after ``a{highest}`` (a resumed conversation names those)."""
        self._ids = itertools.count(highest + 1)

    async def open(self) -> None:
        """Before the first run: the owner of the steps that outlive a cancel."""
        await self.finishing.open()
        await self.shared_mcp.open()

    async def close_shared(self) -> None:
        """At the end: the finishing steps (let finish), the limiter's debt, the relay's
        model pools."""
        await self.finishing.aclose()
        await self.shared_mcp.aclose()
        self.limiter.close()
        await self._parent.pools.aclose()

    def default_backend(self) -> Backend | None:
        """Where a sub-agent runs unless its definition pins one (None: not started)."""
        return self.backends.get(self.settings.backend)

    async def run(
        self,
        request: DelegationRequest,
        scope: Scope,
        *,
        handle: RunHandle | None = None,
        agent_id: str | None = None,
        task_id: str = "",
    ) -> SubAgentResult:
        """Run one sub-agent to its end and return its one result.

        The run has a task of its own: ``handle.cancel()`` (task_control, a budget, a
        cancelled turn) ends it with a ``cancelled`` result rather than cancelling the
        caller. Cancelling the *caller* stops the child too, then propagates; the result
        is still published and left on ``handle.result``. A failure of the parent's own
        (a bug, the environment) is this run's ``error`` result: it never raises here.
        """
        handle = handle or RunHandle()
        before = earlier(scope, request)
        if before is not None:  # a resume: the sub-agent the killed run started here
            agent_id = before.agent_id
            if before.result is not None:  # it ended: its result, never asked again
                return delivered_again(before.result, request, scope, (handle, self.bus), task_id)
        agent_id = agent_id or self.new_agent_id()
        team = join_team(scope, request, agent_id, handle)  # named, and reachable
        journal_start(scope, request, agent_id, task_id)
        try:
            async with asyncio.TaskGroup() as group:
                inner = group.create_task(
                    self._contained(request, scope, handle, agent_id, task_id)
                )
                handle.task = inner
                if handle.cancelled:  # cancelled before it even started
                    inner.cancel()
        except asyncio.CancelledError:
            if handle.result is not None and scope.account is not None:
                scope.account.results.append(handle.result)
                journal_end(scope, handle.result)
            raise
        finally:
            self.recorded.ended(agent_id)  # however it ended, it runs no more
            if team is not None:  # its status (none: cancelled before it began)
                team.roster.ended(agent_id, getattr(handle.result, "status", "cancelled"))
        if inner.cancelled():  # cancelled before its first step: it never got going
            result = SubAgentResult(
                **result_base(request, scope, agent_id),
                status=handle.cancel_status,
                error=handle.cancel_reason or "cancelled before it started",
            )
            handle.result = result
            self.bus.publish(SubAgentEnded(agent_id=agent_id, result=result))
        else:
            result = inner.result()
        if scope.account is not None:
            scope.account.results.append(result)
            journal_end(scope, result)
        return result

    async def _contained(
        self,
        request: DelegationRequest,
        scope: Scope,
        handle: RunHandle,
        agent_id: str,
        task_id: str,
    ) -> SubAgentResult:
        """The run's boundary: whatever fails in the parent is this run's result."""
        started = time.perf_counter()
        try:
            return await self._run(request, scope, handle, agent_id, task_id)
        except Exception as exc:  # a bug or an environment problem: this run fails, alone
            log.exception("sub-agent %s failed in the parent", agent_id)
            base = result_base(request, scope, agent_id)
            result = parent_failure(base, f"{type(exc).__name__}: {exc}", None, started)
            handle.result = result
            self.bus.publish(SubAgentEnded(agent_id=agent_id, result=result))
            return result

    async def _run(
        self,
        request: DelegationRequest,
        scope: Scope,
        handle: RunHandle,
        agent_id: str,
        task_id: str,
    ) -> SubAgentResult:
        """Prepare, relay, settle."""
        started = time.perf_counter()
        admitted = self._admit(request, scope, agent_id)
        if isinstance(admitted, SubAgentResult):
            return admitted
        refused = await self._isolate(admitted, scope, agent_id)
        if refused is not None:
            return refused
        start = await self._announce(admitted, scope, agent_id, task_id)
        if isinstance(start, SubAgentResult):
            return start
        ended = await self._live(admitted, start, scope, handle, started)
        return await self._settle(admitted, ended, handle, started)

    # -- prepare ---------------------------------------------------------------------------
    def _admit(
        self, request: DelegationRequest, scope: Scope, agent_id: str
    ) -> _Admitted | SubAgentResult:
        """The definition it runs, its spec and walls; or the result refusing it."""
        base = result_base(request, scope, agent_id)
        history: list[Message] | None = None
        if request.resume:
            try:
                request, history = self.recorded.continuation(request, self.registry, _owner(scope))
            except LookupError as exc:
                return self._refused(base, RunStatus.ERROR, str(exc))
            base["agent_type"] = request.agent_type
        definition = self.registry.get(request.agent_type)
        before = earlier(scope, request)
        if before is not None and before.definition:  # as the killed run started it
            definition = definition_again(before.definition, definition)
        if definition is None:
            names = ", ".join(self.registry.names())
            return self._refused(
                base,
                RunStatus.ERROR,
                f"unknown agent type {request.agent_type!r}; available: {names}",
            )
        base["agent_type"] = definition.name
        ledger = _ledger(scope, self.ledger)
        run_dir = scope.account.run_dir if scope.account is not None else self.run_dir
        try:
            prepared = self.prepare.spec(
                definition, request, scope, agent_id, base["background"], run_dir=run_dir
            )
            ledger.reserve_subagent()
        except (ValueError, BudgetExceeded) as exc:
            status = RunStatus.BUDGET if isinstance(exc, BudgetExceeded) else RunStatus.DENIED
            return self._refused(base, status, str(exc))
        base["warnings"] = prepared.warnings
        before = journaled_spec(prepared, scope, definition, before)
        # Replaced by what the child reports it applied; kept if it ended before that.
        base["sandbox"] = f"{prepared.spec.sandbox} (requested; not confirmed by the child)"
        return _Admitted(
            request=request,
            definition=definition,
            prepared=prepared,
            base=base,
            history=history,
            ledger=ledger,
            run_dir=run_dir,
            background=base["background"],
            replay=list(before.answers) if before is not None else [],
            past=before,
        )

    async def _isolate(
        self, admitted: _Admitted, scope: Scope, agent_id: str
    ) -> SubAgentResult | None:
        """A worktree of its own when asked (a resume's: the killed run's); None: no refusal."""
        if (admitted.request.isolation or admitted.definition.isolation) != "worktree":
            return None
        root, branch = worktree_place(admitted.run_dir, self.workdir, self._session, agent_id)
        try:
            # git goes on after a cancel (the steps' owner is the runner, not this run).
            admitted.tree = gone_on_in(
                admitted.past, admitted.prepared, admitted.replay
            ) or await self.finishing.worktree(Path(self.workdir), root, agent_id, branch)
        except (WorktreeError, OSError) as exc:
            return self._refused(admitted.base, RunStatus.ERROR, str(exc))
        journal_worktree(scope, agent_id, admitted.tree)
        admitted.hook_writes = HookWrites(admitted.tree)
        self.prepare.in_worktree(
            admitted.prepared.spec, admitted.definition, str(admitted.tree.workdir)
        )
        return None

    async def _announce(
        self, admitted: _Admitted, scope: Scope, agent_id: str, task_id: str
    ) -> Start | SubAgentResult:
        """Hooks wired, ``SubagentStart`` run, the start published; the ``Start`` to send,
        or the result refusing one too large to send."""
        definition, spec, request = admitted.definition, admitted.prepared.spec, admitted.request
        watched = admitted.hook_writes
        hooks = admitted.hooks = self.hooks.for_definition(definition).for_agent(
            spec.workdir,
            spec.permission_mode,
            agent_transcript(spec),
            watch=watched.during if watched is not None else None,
        )
        own_tree = admitted.tree is not None  # its servers start in its worktree
        problems = await self.shared_mcp.offer(spec, definition, own_tree=own_tree)
        admitted.base["warnings"] = [*admitted.base["warnings"], *problems]
        try:
            self.prepare.complete(spec, definition, request, hooks, admitted.history)
        except OutsideRoot as exc:  # a project's link out (its memory folder): refused
            if watched is not None:
                await watched.finish()
            return self._refused(admitted.base, RunStatus.DENIED, str(exc))
        stop_hooks = admitted.stop_hooks = SubagentStopHooks(
            hooks,
            agent_id=agent_id,
            agent_type=definition.name,
            transcript=hooks.transcript_path,
            idle=team_idle(scope, agent_id),  # a named teammate's unanswered messages
        )
        spec.hooked_tools.update(stop_hooks.relayed_events())
        self.recorded.started(agent_id, definition.name, admitted.run_dir, _owner(scope))
        started_hook = await hooks.run(
            "SubagentStart",
            {"agent_id": agent_id, "agent_type": definition.name, "prompt": request.prompt},
            definition.name,
        )
        if started_hook.context:
            spec.system_prompt += f"\n\n{started_hook.context}"
        self.bus.publish(
            SubAgentStarted(
                agent_id=agent_id,
                agent_type=definition.name,
                description=request.description,
                background=admitted.background,
                depth=scope.depth + 1,
                parent_id=scope.agent_id,
                task_id=task_id,
                color=definition.color,
            )
        )
        await admitted.open_egress(self.settings, agent_id)
        start = self.prepare.start(admitted.prepared)
        admitted.spans = child_spans(self.tracing, definition.name)
        if admitted.spans is not None:
            start.trace_context = admitted.spans.trace_context
        limit = getattr(getattr(self.pool, "boot", None), "max_frame_bytes", MAX_FRAME_BYTES)
        refusal = too_large(start, limit)
        if refusal:
            if admitted.egress is not None:
                await admitted.egress.close()
            if watched is not None:
                await watched.finish()
            return self._refused(admitted.base, RunStatus.ERROR, refusal)
        return start

    # -- relay -----------------------------------------------------------------------------
    async def _live(
        self, admitted: _Admitted, start: Start, scope: Scope, handle: RunHandle, started: float
    ) -> _Ended:
        """A process leased, sent its start, walled, relayed to its end and released."""
        async with asyncio.TaskGroup() as group:  # its call ahead's task, if any
            admitted.ahead = await self._call_ahead(admitted, group.create_task)
            return await self._leased(admitted, start, scope, handle, started)

    async def _leased(
        self, admitted: _Admitted, start: Start, scope: Scope, handle: RunHandle, started: float
    ) -> _Ended:
        """``_live``'s steps: every failure is the result's, nothing raises out of here."""
        ended = _Ended(progress=Progress(model=admitted.prepared.model, spans=admitted.spans))
        ahead, admitted.ahead = admitted.ahead, None
        lease: WorkerLease | None = None
        try:
            lease = await self._start_on_a_live_process(admitted.definition, start)
            ended.progress.queued_ms = (time.perf_counter() - started) * 1000
            ended.pid, ended.node = lease.pid, lease.node
            self.bus.publish(SubAgentProcess(agent_id=start.run_id, pid=lease.pid, node=lease.node))
            # Only now: controls queued while it waited for a process must follow Start.
            handle.attach(lease)
            admitted.wall(lease, self.settings.timeout_grace_s)
            child = admitted.child(lease, scope)
            child.ahead, ahead = ahead, None  # the relay's now: it serves or cancels it
            await Relay(self._parent, child, ended.progress).run()
        except asyncio.CancelledError:
            ended.cancelled = True
            if lease is not None:
                # Politely first: the child stops at once and reports what it has; the
                # escalation (SIGTERM, then SIGKILL) bounds the wait.
                lease.cancel("cancelled by the parent")
                await self.finishing.shielded(lease.wait(), f"{start.run_id}: its end")
        except Exception as exc:  # a bug or an environment problem: this run fails, not the parent
            if lease is None:  # no process could be had: one line, the result says it all
                log.warning("sub-agent %s never got a process: %s", start.run_id, exc)
            else:
                log.exception("sub-agent %s failed in the parent", start.run_id)
            ended.failure = f"{type(exc).__name__}: {exc}"
        finally:
            if ahead is not None:  # no relay took it (no process could be had, say)
                await self.finishing.shielded(ahead.aclose(), f"{start.run_id}: its call ahead")
            if lease is not None:
                release = lease.release()
                ended.outcome = await self.finishing.shielded(release, f"{start.run_id}: release")
            if lease is not None and not lease.node:
                # Its cgroup and temp folder, now it is gone (a remote sub-agent's guardian
                # does this on its own node).
                release_sandbox(lease.pid)
            if admitted.egress is not None:
                closing = admitted.egress.close()
                await self.finishing.shielded(closing, f"{start.run_id}: its egress proxy")
        return ended

    async def _call_ahead(
        self, admitted: _Admitted, start: Callable[[Coroutine[Any, Any, None]], asyncio.Task[None]]
    ) -> CallAhead | None:
        """The child's first model request, sent now if the parent can build it
        (``_call_ahead``): its answer is then under way while the process starts. Its
        output limit is bounded by the run's token budget left."""
        parent, settings, spec = self._parent, self.settings, admitted.prepared.spec
        # Not under a provider limiter: a run still waiting for a process would hold a
        # permit its running siblings wait for (max_concurrent), and none would move.
        if not settings.call_ahead or not predictable(spec) or parent.limiter.applies(spec.model):
            return None
        if admitted.replay:  # its first answer is in the journal
            return None
        tools = [self.prepare.custom_tools[n] for n in spec.tools if n in self.prepare.custom_tools]
        try:
            body = await first_request_body(spec, tools)
        except Exception as exc:  # options the child will refuse: it says so, in its words
            log.debug("%s: no first request sent ahead: %s", spec.agent_id, exc)
            return None
        if body is None:
            return None
        left = admitted.ledger.tokens_left()
        return call_ahead(spec, body, settings, parent.limiter, parent.pools, start, left)

    async def _start_on_a_live_process(
        self, definition: AgentDefinition, start: Start
    ) -> WorkerLease:
        """A leased process that has received ``start``. A spare can die after its
        handshake and before its lease is used (its fork server was killed, say); its
        death may not be seen yet, so the send fails: that spare is let go and another is
        taken — a dead spare never fails a run."""
        backend = self._backend(definition)
        for attempt in range(_START_ATTEMPTS):
            lease = await backend.acquire()
            try:
                await lease.send(start)
            except ChannelClosed:
                await self.finishing.shielded(lease.release(), "a dead spare's release")
                if attempt == _START_ATTEMPTS - 1:
                    raise
                continue
            except BaseException:  # cancelled while sending: the process is ours to end
                await self.finishing.shielded(lease.release(), "a cancelled start's release")
                raise
            return lease
        raise AssertionError("unreachable")

    def _backend(self, definition: AgentDefinition) -> Backend:
        """The definition's backend (``backend: local`` pins an agent here), else the
        operator's."""
        name = definition.backend or self.settings.backend
        backend = self.backends.get(name)
        if backend is None:
            raise RuntimeError(
                f"{definition.name} runs on the {name!r} backend, which is not started "
                '(run with --backend ray, or set backend = "ray" in the configuration)'
            )
        return backend

    # -- settle ----------------------------------------------------------------------------
    async def _settle(
        self, admitted: _Admitted, ended: _Ended, handle: RunHandle, started: float
    ) -> SubAgentResult:
        """The run's one result: published, handed to its handle, told to the hooks."""
        base = admitted.base
        if ended.failure and ended.pid is None:  # no process could be had for it
            result = start_failure(base, ended.failure, started)
        elif ended.failure:
            result = parent_failure(base, ended.failure, ended.pid, started)
        else:
            result = settle(
                base,
                ended.outcome,
                ended.progress,
                started,
                limits=admitted.prepared.limits,
                cancelled=ended.cancelled,
                ledger=admitted.ledger,
                run_dir=admitted.run_dir,
            )
            result = with_cancel_reason(
                result, handle.cancel_status, handle.cancel_reason, cancelled=ended.cancelled
            )
        if ended.node:
            result = msgspec.structs.replace(result, node=ended.node)
        if admitted.egress is not None and admitted.egress.log:
            result = msgspec.structs.replace(result, network_log=list(admitted.egress.log))
        assert admitted.stop_hooks is not None
        if admitted.hook_writes is not None:  # what it changed is kept, however it ended
            prompt = admitted.request.prompt
            settling = _settled_tree(admitted.hook_writes, admitted.stop_hooks, result, prompt)
            result = await self.finishing.shielded(settling, f"{base['agent_id']}: its worktree")
        handle.result = result
        self.recorded.ended(base["agent_id"])
        # Once per run: unless the child's last stop was already put to the hooks (it
        # crashed, timed out, ran out of turns after a block), they hear of the end now.
        await admitted.stop_hooks.ended(result.text)
        if admitted.spans is not None:
            admitted.spans.settle(result, queued_ms=ended.progress.queued_ms)
        absorb_test_record(ended.outcome, self.model_objects.get(admitted.prepared.model))
        self.bus.publish(SubAgentEnded(agent_id=result.agent_id, result=result))
        return result

    def _refused(self, base: dict[str, Any], status: RunStatus, error: str) -> SubAgentResult:
        """A run that never got a process (unknown agent, refused override, budget)."""
        base = {k: v for k, v in base.items() if k != "sandbox"}  # no process, no walls
        self.recorded.ended(base["agent_id"])  # never ran: nothing to wait for
        result = SubAgentResult(**base, status=status, error=error)
        self.bus.publish(SubAgentEnded(agent_id=result.agent_id, result=result))
        return result


async def _settled_tree(
    watched: HookWrites, stop_hooks: SubagentStopHooks, result: SubAgentResult, prompt: str
) -> SubAgentResult:
    """A worktree agent's end: its SubagentStop hooks hear of it first (unless its last
    stop was asked), so what they write in its worktree is theirs too; then its commit."""
    await stop_hooks.ended(result.text)
    return await settle_worktree(watched, result, prompt)


def _owner(scope: Scope) -> str:
    """Who may continue the agents a scope starts: the top level is one (main and direct
    runs alike); below it, only the very agent that started them."""
    return scope.agent_id if scope.depth > 0 else ""


def _ledger(scope: Scope, default: UsageLedger) -> UsageLedger:
    return scope.account.ledger if scope.account is not None else default
