"""The runner: one sub-agent run, from its definition to its ``SubAgentResult``.

It resolves what the child may do (tools, model, limits), leases a fresh process from the
pool, sends the run, relays the child's events (tagged with the agent id and the parent's
tool call), answers the child's questions (approvals, nested delegation) and turns
however the child ended into exactly one result.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import logging
import secrets
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import dill
import msgspec
from agentcell.orchestrator._records_key import key_for
from agentcell.orchestrator.backends import (
    Backend,
    ChildOutcome,
    OutcomeKind,
    WorkerLease,
    WorkerPool,
    child_environment,
)
from agentcell.orchestrator.config import Settings
from agentcell.orchestrator.definitions import (
    AgentDefinition,
    AgentRegistry,
    load_skills,
    resolve_model_alias,
    resolve_tools,
    with_skills,
)
from agentcell.orchestrator.delegation._approval_question import refused_tool
from agentcell.orchestrator.delegation._approvals import (
    ApprovalAnswer,
    ApprovalBroker,
    ApprovalQuery,
)
from agentcell.orchestrator.delegation._context import (
    gets_instructions,
    instructions_prompt,
    memory_dir,
    memory_prompt,
    prepare_memory,
)
from agentcell.orchestrator.delegation._egress import bash_network, network_value, open_proxy
from agentcell.orchestrator.delegation._events import (
    AgentActivity,
    EventBus,
    SubAgentEnded,
    SubAgentProcess,
    SubAgentStarted,
)
from agentcell.orchestrator.delegation._hooks import HookRunner, SubagentStopHooks, agent_transcript
from agentcell.orchestrator.delegation._limiter import ChildPermits, ProviderLimiter
from agentcell.orchestrator.delegation._mcp_servers import agent_mcp_servers
from agentcell.orchestrator.delegation._request import DelegationRequest, RunAccount, Scope
from agentcell.orchestrator.delegation._results import SubAgentResult
from agentcell.orchestrator.delegation._resume import RecordedAgents
from agentcell.orchestrator.delegation._task_args import parse_task_arguments
from agentcell.orchestrator.delegation._usage import BudgetExceeded, UsageLedger
from agentcell.orchestrator.delegation._web_fetch import NAME as WEB_FETCH
from agentcell.orchestrator.delegation._web_fetch import answer as answer_web_fetch
from agentcell.orchestrator.delegation._web_fetch import (
    web_search_options,
    web_tool_warnings,
    web_tools,
)
from agentcell.orchestrator.delegation._worktree import (
    Worktree,
    WorktreeError,
    create_worktree,
    finish_worktree,
)
from agentcell.protocol import (
    MAX_FRAME_BYTES,
    PROTOCOL_VERSION,
    AgentSpec,
    ApprovalReply,
    ApprovalRequest,
    ChannelClosed,
    Control,
    ControlAction,
    DelegateReply,
    DelegateRequest,
    Event,
    FrameTooLarge,
    HookReply,
    HookRequest,
    Limits,
    Message,
    PermitDone,
    PermitRequest,
    RemoteTool,
    RunStatus,
    Start,
    TurnStarted,
    Usage,
    UsageUpdate,
    encode_frame,
)
from agentcell.worker import (
    OutsideRoot,
    PermissionMode,
    known_secrets,
    release_sandbox,
    secret_digests,
    stricter_sandbox,
)
from agentcell.worker.models import ToolSpec, thinking_control, thinking_max_tokens
from agentcell.worker.tools import Tool

AGENT_HANDLER = "agentcell.worker._agent:run_agent"

log = logging.getLogger("agentcell.runner")

#: Processes tried for one run when the first ones turn out dead before their Start.
_START_ATTEMPTS = 3


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

    def _control(self, control: Control) -> None:
        if self.lease is None:
            self._queued.append(control)
        else:
            self._send(control)

    def _send(self, control: Control) -> None:
        assert self.lease is not None
        with contextlib.suppress(ChannelClosed):
            self.lease.send_nowait(control)


@dataclasses.dataclass(slots=True)
class _Progress:
    """What the relay keeps about a child while it runs."""

    turns: int = 0
    usage: Usage = dataclasses.field(default_factory=Usage)
    model: str = ""
    queued_ms: float = 0.0


class Runner:
    def __init__(
        self,
        *,
        pool: WorkerPool,
        registry: AgentRegistry,
        settings: Settings,
        broker: ApprovalBroker,
        ledger: UsageLedger,
        bus: EventBus,
        workdir: str,
        run_dir: str = "",
        model_objects: dict[str, Any] | None = None,
        custom_tools: Sequence[Tool] = (),
        task_tool_spec: Callable[[Callable[[str], bool] | None], ToolSpec] | None = None,
        backends: dict[str, Backend] | None = None,
        hooks: HookRunner | None = None,
        home: Path | None = None,
        limiter: ProviderLimiter | None = None,
    ) -> None:
        self.pool = pool
        # The provider limits every child's model requests take a permit from.
        self.limiter = limiter or ProviderLimiter(settings.limits)
        # Other places a sub-agent can run (e.g. "ray"); "local" is always the pool.
        self.backends: dict[str, Backend] = {**(backends or {}), "local": pool}
        self.registry = registry
        self.settings = settings
        self.broker = broker
        self.ledger = ledger
        self.bus = bus
        self.workdir = workdir
        self.run_dir = run_dir
        self.model_objects = model_objects or {}
        self.custom_tools = {tool.name: tool for tool in custom_tools}
        self.task_tool_spec = task_tool_spec
        self._ids = itertools.count(1)
        self._session = secrets.token_hex(3)
        self._blobs: dict[tuple[str, tuple[str, ...]], bytes | None] = {}
        # Per run being prepared: the lines its result carries (a server or skill missing).
        self._warnings: dict[str, list[str]] = {}
        self.hooks = hooks or HookRunner(cwd=workdir)
        self.home = home or Path.home()
        self.recorded = RecordedAgents()  # what `task` with `resume` may continue
        self._effort_noted: set[tuple[str, str]] = set()

    def new_agent_id(self) -> str:
        return f"a{next(self._ids)}"

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
        is still published and left on ``handle.result``.
        """
        agent_id = agent_id or self.new_agent_id()
        handle = handle or RunHandle()
        inner = asyncio.create_task(self._run(request, scope, handle, agent_id, task_id))
        handle.task = inner
        if handle.cancelled:  # cancelled before it even started
            inner.cancel()
        try:
            await asyncio.wait({inner})
        except asyncio.CancelledError:
            inner.cancel()
            await asyncio.wait({inner})
            if handle.result is not None and scope.account is not None:
                scope.account.results.append(handle.result)
            raise
        finally:
            self.recorded.ended(agent_id)  # however it ended, it runs no more
        if inner.cancelled():  # cancelled before its first step: it never got going
            result = SubAgentResult(
                agent_id=agent_id,
                agent_type=request.agent_type,
                description=request.description,
                background=bool(request.background) or scope.background,
                depth=scope.depth + 1,
                status=handle.cancel_status,
                error=handle.cancel_reason or "cancelled before it started",
            )
            handle.result = result
            self.bus.publish(SubAgentEnded(agent_id=agent_id, result=result))
        else:
            result = inner.result()
        if scope.account is not None:
            scope.account.results.append(result)
        return result

    async def _run(
        self,
        request: DelegationRequest,
        scope: Scope,
        handle: RunHandle,
        agent_id: str,
        task_id: str,
    ) -> SubAgentResult:
        started = time.perf_counter()
        background = bool(request.background) or scope.background
        base = dict(
            agent_id=agent_id,
            agent_type=request.agent_type,
            description=request.description,
            background=background,
            depth=scope.depth + 1,
        )
        history: list[Message] | None = None
        if request.resume:
            try:
                request, history = self.recorded.continuation(request, self.registry, _owner(scope))
            except LookupError as exc:
                return self._refused(base, RunStatus.ERROR, str(exc))
            base["agent_type"] = request.agent_type
        definition = self.registry.get(request.agent_type)
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
            spec, limits, model = self._prepare(
                definition, request, scope, agent_id, background, run_dir=run_dir
            )
            ledger.reserve_subagent()
            base["warnings"] = self._warnings.pop(agent_id, [])
            # Replaced by what the child reports it applied; kept if it ended before that.
            base["sandbox"] = f"{spec.sandbox} (requested; not confirmed by the child)"
        except (ValueError, BudgetExceeded) as exc:
            self._warnings.pop(agent_id, None)
            status = RunStatus.BUDGET if isinstance(exc, BudgetExceeded) else RunStatus.DENIED
            return self._refused(base, status, str(exc))
        tree: Worktree | None = None
        if (request.isolation or definition.isolation) == "worktree":
            try:
                tree = await self._worktree(agent_id, run_dir)
            except (WorktreeError, OSError) as exc:
                return self._refused(base, RunStatus.ERROR, str(exc))
            spec.workdir = str(tree.workdir)
            skills, _ = load_skills(definition.skills, Path(self.workdir))
            spec.system_prompt = with_skills(_system_prompt(definition, spec.workdir), skills)
        hooks = self.hooks.for_definition(definition).for_agent(
            spec.workdir, spec.permission_mode, agent_transcript(spec)
        )
        try:
            self._complete_spec(spec, definition, request, hooks, history)
        except OutsideRoot as exc:  # a project's link out (its memory folder): refused
            if tree is not None:
                await finish_worktree(tree)
            return self._refused(base, RunStatus.DENIED, str(exc))
        stop_hooks = SubagentStopHooks(
            hooks,
            agent_id=agent_id,
            agent_type=definition.name,
            transcript=hooks.transcript_path,
        )
        spec.hooked_tools.update(stop_hooks.relayed_events())
        self.recorded.started(agent_id, definition.name, run_dir, _owner(scope))
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
                background=background,
                depth=scope.depth + 1,
                parent_id=scope.agent_id,
                task_id=task_id,
                color=definition.color,
            )
        )
        start = Start(
            protocol_version=PROTOCOL_VERSION,
            run_id=agent_id,
            handler=AGENT_HANDLER,
            spec=spec,
            limits=limits,
            objects=self._objects_blob(model, spec.tools),
        )
        too_large = self._too_large(start)
        if too_large:
            if tree is not None:
                await finish_worktree(tree)
            return self._refused(base, RunStatus.ERROR, too_large)
        egress = await open_proxy(
            network_value(self.settings.network, definition.network),
            sandbox=spec.sandbox,
            agent_id=agent_id,
            agent_type=definition.name,
            backend=definition.backend or self.settings.backend,
        )
        spec.egress_port = egress.port if egress is not None else None
        progress = _Progress(model=model)
        lease: WorkerLease | None = None
        cancelled = False
        failure = ""
        try:
            lease = await self._start_on_a_live_process(definition, start)
            progress.queued_ms = (time.perf_counter() - started) * 1000
            self.bus.publish(SubAgentProcess(agent_id=agent_id, pid=lease.pid, node=lease.node))
            # Only now: controls queued while it waited for a process must follow Start.
            handle.attach(lease)
            if limits.address_space_bytes is not None:
                lease.set_memory_limit(limits.address_space_bytes)
            if limits.cpu_seconds is not None:
                lease.set_cpu_limit(limits.cpu_seconds)
            if spec.timeout_s is not None:
                # The child's engine stops itself at the timeout and reports; the parent's
                # deadline, a little later, is the backstop for a child that cannot.
                lease.set_deadline(
                    spec.timeout_s + self.settings.timeout_grace_s, cancel_grace=1.0, term_grace=1.0
                )
            await self._relay(
                lease=lease,
                definition=definition,
                spec=spec,
                request=request,
                scope=scope,
                progress=progress,
                background=background,
                hooks=hooks,
                stop_hooks=stop_hooks,
            )
        except asyncio.CancelledError:
            cancelled = True
            if lease is not None:
                # Politely first: the child stops at once and reports what it has; the
                # escalation (SIGTERM, then SIGKILL) bounds the wait.
                lease.cancel("cancelled by the parent")
                await asyncio.shield(lease.wait())
        except Exception as exc:  # a bug or an environment problem: this run fails, not the parent
            log.exception("sub-agent %s failed in the parent", agent_id)
            failure = f"{type(exc).__name__}: {exc}"
        finally:
            outcome = await asyncio.shield(lease.release()) if lease is not None else None
            if lease is not None and not lease.node:
                # Its cgroup and temp folder, now it is gone (a remote sub-agent's guardian
                # does this on its own node).
                release_sandbox(lease.pid)
            if egress is not None:
                await asyncio.shield(egress.close())
        if failure:
            result = SubAgentResult(
                **base,  # type: ignore[arg-type]
                status=RunStatus.ERROR,
                error=f"the parent could not run this sub-agent: {failure}",
                pid=lease.pid if lease else None,
                duration_ms=(time.perf_counter() - started) * 1000,
            )
        else:
            result = self._result(
                base,
                outcome,
                progress,
                started,
                limits=limits,
                cancelled=cancelled,
                ledger=ledger,
                run_dir=run_dir,
            )
            # A budget stops the run even if its answer came as the budget was crossed.
            replaced = result.status is RunStatus.CANCELLED or (
                result.status is RunStatus.COMPLETED and handle.cancel_status is RunStatus.BUDGET
            )
            if cancelled and handle.cancel_reason and replaced:
                result = msgspec.structs.replace(
                    result, status=handle.cancel_status, error=handle.cancel_reason
                )
        if lease is not None and lease.node:
            result = msgspec.structs.replace(result, node=lease.node)
        if egress is not None and egress.log:
            result = msgspec.structs.replace(result, network_log=list(egress.log))
        if tree is not None:  # what it changed is kept, however it ended
            result = await asyncio.shield(self._settle_worktree(tree, result, request.prompt))
        handle.result = result
        self.recorded.ended(agent_id)
        # Once per run: unless the child's last stop was already put to the hooks (it
        # crashed, timed out, ran out of turns after a block), they hear of the end now.
        await stop_hooks.ended(result.text)
        self._finish(result, model, outcome)
        return result

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
                await asyncio.shield(lease.release())
                if attempt == _START_ATTEMPTS - 1:
                    raise
                continue
            except BaseException:  # cancelled while sending: the process is ours to end
                await asyncio.shield(lease.release())
                raise
            return lease
        raise AssertionError("unreachable")

    def default_backend(self) -> Backend | None:
        """Where a sub-agent runs unless its definition pins one (None: not started)."""
        return self.backends.get(self.settings.backend)

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

    async def _worktree(self, agent_id: str, run_dir: str) -> Worktree:
        if run_dir:
            root, run = Path(run_dir), Path(run_dir).name
        else:  # no run record: a name of its own, so sessions never collide
            run = f"session-{self._session}"
            root = Path(self.workdir) / ".agentcell" / "worktrees" / run
        making = asyncio.ensure_future(
            create_worktree(Path(self.workdir), root, agent_id, f"agentcell/{run}/{agent_id}")
        )
        try:
            return await asyncio.shield(making)
        except asyncio.CancelledError:
            # git goes on regardless: let it finish, then take the (unchanged) tree away.
            with contextlib.suppress(Exception):
                await finish_worktree(await making)
            raise

    async def _settle_worktree(
        self, tree: Worktree, result: SubAgentResult, prompt: str
    ) -> SubAgentResult:
        kept = await finish_worktree(tree, _commit_message(result, prompt))
        if kept is None:
            return result
        stat = kept.diff_stat
        if kept.commit_error:
            stat = f"(not committed, left staged: {kept.commit_error})\n{stat}"
        return msgspec.structs.replace(
            result,
            worktree=kept.path,
            branch=kept.branch,
            commit=None if kept.commit_error else kept.commit,
            diff_stat=stat,
        )

    def _refused(self, base: dict[str, Any], status: RunStatus, error: str) -> SubAgentResult:
        """A run that never got a process (unknown agent, refused override, budget)."""
        base = {k: v for k, v in base.items() if k != "sandbox"}  # no process, no walls
        self.recorded.ended(base["agent_id"])  # never ran: nothing to wait for
        result = SubAgentResult(**base, status=status, error=error)
        self.bus.publish(SubAgentEnded(agent_id=result.agent_id, result=result))
        return result

    def _too_large(self, start: Start) -> str:
        """Why ``start`` cannot cross the pipe ("" if it can): said before a process is
        taken, in words that name the cause and the limit."""
        limit = getattr(getattr(self.pool, "boot", None), "max_frame_bytes", MAX_FRAME_BYTES)
        try:
            encode_frame(start, limit)
        except FrameTooLarge:
            spec = start.spec
            prompt = len(spec.prompt.encode()) if spec is not None else 0
            cap = f"one frame may carry at most {limit / 2**20:g} MiB (MAX_FRAME_BYTES)"
            if prompt * 2 >= limit:
                return (
                    f"the prompt is too large to send to a sub-agent: {prompt / 2**20:.1f} MiB, "
                    f"and {cap}; put the material in a file and pass its path instead"
                )
            return (
                "the sub-agent's start message is too large to send (its forked history or "
                f"its custom tools and model objects), and {cap}"
            )
        return ""

    # -- preparing a run -----------------------------------------------------------------
    def _prepare(
        self,
        definition: AgentDefinition,
        request: DelegationRequest,
        scope: Scope,
        agent_id: str,
        background: bool,
        *,
        run_dir: str,
    ) -> tuple[AgentSpec, Limits, str]:
        settings = self.settings
        model = self._narrow_model(definition, request, scope)
        # The operator's subagent_* settings are caps as well as defaults.
        max_turns = min(
            definition.max_turns or settings.subagent_max_turns, settings.subagent_max_turns
        )
        if request.max_turns is not None:
            if request.max_turns > max_turns:
                raise ValueError(
                    f"max_turns {request.max_turns} is more than {definition.name} allows "
                    f"({max_turns}); overrides may only narrow a definition"
                )
            max_turns = request.max_turns
        resolved = resolve_tools(definition.tools, definition.disallowed_tools, list(scope.tools))
        depth = scope.depth + 1
        max_depth = min(
            d for d in (settings.max_depth, scope.max_depth, definition.max_depth) if d is not None
        )
        remote: list[RemoteTool] = []
        may_delegate = (definition.tools is None or "task" in definition.tools) and (
            "task" not in definition.disallowed_tools
        )
        # Task(a, b) in its tools: the schema it is offered lists only those agent types
        # (and none at all if none of them is registered).
        limited = definition.task_agents is not None or bool(definition.denied_task_agents)
        allowed = definition.may_start if limited else None
        if allowed is not None and not any(allowed(name) for name in self.registry.names()):
            may_delegate = False
        if depth < max_depth and may_delegate and self.task_tool_spec is not None:
            task = self.task_tool_spec(allowed)
            remote.append(
                RemoteTool(name=task.name, description=task.description, parameters=task.parameters)
            )
        remote += web_tools(definition)  # web_fetch: run here, for the sub-agent
        history = scope.history() if definition.context == "fork" and scope.history else []
        # An agent file may ask for a stricter mode, never a looser one than its parent's.
        mode = stricter_mode(
            scope.permission_mode or settings.permission_mode, definition.permission_mode
        )
        env, bash_env = child_environment(
            model, bash_gets_credentials=bash_credentials(settings, definition)
        )
        sandbox = stricter_sandbox(
            "workspace" if settings.sandbox == "required" else settings.sandbox, definition.sandbox
        )
        mcp_servers, warnings = agent_mcp_servers(
            definition, settings.mcp_servers, project_dir=self.workdir
        )
        skills, missing = load_skills(definition.skills, Path(self.workdir))
        self._warnings[agent_id] = [*warnings, *missing, *web_tool_warnings(definition, model)]
        for line in self._warnings[agent_id]:
            log.warning("%s: %s", definition.name, line)
        spec = AgentSpec(
            agent_id=agent_id,
            agent_type=definition.name,
            prompt=request.prompt,
            system_prompt=with_skills(_system_prompt(definition, self.workdir), skills),
            history=history,
            tools=resolved.tools,
            remote_tools=remote,
            model=model,
            model_options={
                **settings.model_options.get(model.partition(":")[0], {}),
                **web_search_options(definition, model),  # Anthropic's server-side search
            },
            max_turns=max_turns,
            timeout_s=_capped(definition.timeout_s, settings.subagent_timeout_s),
            permission_mode=mode,
            allow_rules=list(settings.allow_rules),
            deny_rules=list(settings.deny_rules),
            ask_rules=list(settings.ask_rules),
            workdir=self.workdir,
            run_dir=run_dir,
            record_key=key_for(run_dir, agent_id) if run_dir else b"",
            depth=depth,
            max_depth=max_depth,
            background=background,
            env=env,
            bash_env=bash_env,
            sandbox=sandbox,
            network=bash_network(settings.network, definition.network),
            max_processes=definition.max_processes or settings.max_processes,
            read_paths=list(settings.sandbox_read),
            # The keys it does not get, so that it can still redact them from its records.
            redactions=secret_digests(v for v in known_secrets().values() if v not in env.values()),
            mcp_servers=mcp_servers,
            model_permits=self.limiter.applies(model),
        )
        limits = Limits(
            address_space_bytes=definition.memory_limit_mb * 1024 * 1024
            if definition.memory_limit_mb
            else None,
            cpu_seconds=definition.cpu_limit_s,
            max_tool_calls=definition.max_tool_calls,
            max_tool_output_bytes=definition.max_tool_output_bytes,
        )
        return spec, limits, model

    def _narrow_model(
        self, definition: AgentDefinition, request: DelegationRequest, scope: Scope
    ) -> str:
        aliases = self.settings.aliases
        pinned = resolve_model_alias(definition.model, parent_model=scope.model, aliases=aliases)
        if request.model is None:
            return pinned
        wanted = resolve_model_alias(request.model, parent_model=scope.model, aliases=aliases)
        if definition.model != "inherit" and wanted != pinned:
            raise ValueError(
                f"{definition.name} runs on {pinned}; a model override may only narrow a "
                f"definition, so {request.model!r} is refused"
            )
        return wanted

    def _objects_blob(self, model: str, tools: Sequence[str]) -> bytes | None:
        """Custom objects the child needs (a model object, custom tools), pickled once."""
        custom = tuple(name for name in tools if name in self.custom_tools)
        key = (model, custom)
        if key not in self._blobs:
            objects: dict[str, Any] = {}
            if model in self.model_objects:
                objects["model"] = self.model_objects[model]
            if custom:
                objects["tools"] = [self.custom_tools[name] for name in custom]
            self._blobs[key] = dill.dumps(objects, recurse=True) if objects else None
        return self._blobs[key]

    # -- while it runs -------------------------------------------------------------------
    async def _relay(
        self,
        *,
        lease: WorkerLease,
        definition: AgentDefinition,
        spec: AgentSpec,
        request: DelegationRequest,
        scope: Scope,
        progress: _Progress,
        background: bool,
        hooks: HookRunner,
        stop_hooks: SubagentStopHooks,
    ) -> None:
        agent_id = spec.agent_id
        agent_type = spec.agent_type
        publish = self.bus.publish
        ledger = _ledger(scope, self.ledger)
        call_id = request.call_id
        side: set[asyncio.Task[None]] = set()
        permits = ChildPermits(self.limiter, lease.send_nowait)
        try:
            while (frame := await lease.recv()) is not None:
                if isinstance(frame, PermitRequest):
                    permits.on_request(frame)
                elif isinstance(frame, PermitDone):
                    permits.on_done(frame)
                elif isinstance(frame, Event):
                    event = frame.event
                    if isinstance(event, UsageUpdate):
                        progress.usage = progress.usage + event.usage
                        progress.model = event.model or progress.model
                        ledger.add_usage(agent_id, agent_type, event.model, event.usage)
                    elif isinstance(event, TurnStarted):
                        progress.turns = event.turn
                        ledger.add_turn(agent_id, agent_type)
                    publish(AgentActivity(agent_id=agent_id, event=event, call_id=call_id))
                elif isinstance(frame, ApprovalRequest):
                    query = ApprovalQuery(
                        agent_id=agent_id,
                        agent_type=agent_type,
                        tool=frame.tool,
                        arguments=frame.arguments,
                        reason=frame.reason,
                        call_id=frame.call_id,
                        background=background,
                    )
                    refusal = refused_tool(frame.tool, spec)  # only a tool it was given
                    _spawn(side, self._answer_approval(lease, frame.request_id, query, refusal))
                elif isinstance(frame, DelegateRequest):
                    _spawn(
                        side,
                        self._answer_delegation(
                            lease,
                            frame,
                            definition,
                            spec,
                            background=background,
                            account=scope.account,
                        ),
                    )
                elif isinstance(frame, HookRequest):
                    if frame.event == "SubagentStop" and not stop_hooks.claim():
                        lease.kill(
                            "protocol violation: a second SubagentStop request while one is open"
                        )
                        break
                    _spawn(side, self._answer_hook(lease, frame, spec, hooks, stop_hooks))
                if len(side) > MAX_OPEN_REQUESTS:
                    lease.kill(
                        f"protocol violation: more than {MAX_OPEN_REQUESTS} requests "
                        "(approvals, hooks, delegations) open at once"
                    )
                    break
        finally:
            # The child is gone (or we are): questions it asked are moot now, and what
            # it held of the provider's limits goes back to its siblings.
            await permits.close()
            for task in side:
                task.cancel()
            if side:
                await asyncio.wait(side)

    async def _answer_hook(
        self,
        lease: WorkerLease,
        frame: HookRequest,
        spec: AgentSpec,
        hooks: HookRunner,
        stop_hooks: SubagentStopHooks,
    ) -> None:
        offered = spec.hooked_tools.get(frame.event, [])
        if not hooks.answers(frame.event, frame.tool, offered, bool(spec.hook_patterns)):
            if frame.event == "SubagentStop":
                stop_hooks.open = False
            reply = HookReply(request_id=frame.request_id)
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
        with contextlib.suppress(ChannelClosed):
            await lease.send(reply)

    def _complete_spec(
        self,
        spec: AgentSpec,
        definition: AgentDefinition,
        request: DelegationRequest,
        hooks: HookRunner,
        history: list[Message] | None,
    ) -> None:
        """What the definition's Claude Code keys add to the spec: hooks, memory, instruction
        files, effort, the initial prompt; and, for a continuation, the earlier session."""
        spec.hooked_tools = hooks.hooked_tools(
            [*spec.tools, *(tool.name for tool in spec.remote_tools)]
        )
        spec.hook_patterns = hooks.hook_patterns() if spec.mcp_servers else {}
        workdir = Path(self.workdir)
        extra = []
        if self.settings.instruction_files and gets_instructions(definition):
            extra.append(instructions_prompt(workdir, self.home))
        folder = memory_dir(definition, workdir, self.home)
        if folder is not None:
            prepare_memory(folder)
            spec.memory_dir = str(folder)
            extra.append(memory_prompt(folder))
        extra = [part for part in extra if part]
        if extra:
            spec.system_prompt = "\n\n".join([spec.system_prompt, *extra])
        if definition.effort is not None:
            self._apply_effort(spec, definition)
        if history is not None:
            spec.history = history
        elif definition.initial_prompt.strip():
            spec.prompt = f"{definition.initial_prompt.strip()}\n\n{spec.prompt}"

    def _apply_effort(self, spec: AgentSpec, definition: AgentDefinition) -> None:
        """A definition's ``effort`` as its provider's reasoning control: OpenAI's
        ``reasoning_effort``, Anthropic's extended thinking (``AnthropicModel`` builds the
        request). One note per definition and model where it has no such control, or where
        thinking raises the ``max_tokens`` the user set."""
        effort = definition.effort or "medium"
        provider, _, name = spec.model.partition(":")
        if provider == "openai":
            spec.model_options["reasoning_effort"] = _OPENAI_EFFORT[effort]
            return
        control = thinking_control(name) if provider == "anthropic" else None
        if control is not None:
            spec.model_options["effort"] = effort
            limit = spec.model_options.get("max_tokens")
            raised = thinking_max_tokens(effort, limit if isinstance(limit, int) else None)
            if isinstance(limit, int) and raised > limit:
                self._note_effort(
                    definition,
                    spec.model,
                    f"{definition.name}: effort {effort} raises max_tokens from {limit} to "
                    f"{raised} for {spec.model}: thinking and the answer share it (set "
                    f"model_options.anthropic.max_tokens to {raised} or more to silence this)",
                )
            return
        self._note_effort(
            definition,
            spec.model,
            f"{definition.name}: effort {definition.effort} ignored: its model {spec.model} "
            "has no reasoning control agentcell sets (openai models take reasoning_effort, "
            "Claude 3.7 Sonnet and Claude 4 and later extended thinking)",
        )

    def _note_effort(self, definition: AgentDefinition, model: str, note: str) -> None:
        if (definition.name, model) not in self._effort_noted:
            self._effort_noted.add((definition.name, model))
            log.warning("%s", note)

    async def _answer_approval(
        self, lease: WorkerLease, request_id: int, query: ApprovalQuery, refusal: str = ""
    ) -> None:
        answer = ApprovalAnswer(False, refusal) if refusal else await self.broker.decide(query)
        with contextlib.suppress(ChannelClosed):
            await lease.send(
                ApprovalReply(request_id=request_id, approved=answer.approved, reason=answer.reason)
            )

    async def _answer_delegation(
        self,
        lease: WorkerLease,
        frame: DelegateRequest,
        definition: AgentDefinition,
        spec: AgentSpec,
        *,
        background: bool,
        account: RunAccount | None,
    ) -> None:
        reply = await self._delegation_reply(
            frame, definition, spec, background=background, account=account
        )
        with contextlib.suppress(ChannelClosed):
            await lease.send(reply)

    async def _delegation_reply(
        self,
        frame: DelegateRequest,
        definition: AgentDefinition,
        spec: AgentSpec,
        *,
        background: bool,
        account: RunAccount | None,
    ) -> DelegateReply:
        def refuse(text: str) -> DelegateReply:
            return DelegateReply(request_id=frame.request_id, content=text, is_error=True)

        offered = {tool.name for tool in spec.remote_tools}
        if frame.tool == WEB_FETCH and WEB_FETCH in offered:
            return await answer_web_fetch(
                frame, spec, definition, self.settings, self.broker, background=background
            )
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
        target = self.registry.get(nested.agent_type)
        if not definition.may_start(target.name if target else nested.agent_type):
            allowed = [n for n in self.registry.names() if definition.may_start(n)]
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
        result = await self.run(nested, child_scope)
        return DelegateReply(
            request_id=frame.request_id, content=result.render(), is_error=not result.ok
        )

    # -- after it ended ------------------------------------------------------------------
    def _result(
        self,
        base: dict[str, Any],
        outcome: ChildOutcome | None,
        progress: _Progress,
        started: float,
        *,
        limits: Limits,
        cancelled: bool,
        ledger: UsageLedger,
        run_dir: str,
    ) -> SubAgentResult:
        duration_ms = (time.perf_counter() - started) * 1000
        usage = progress.usage
        entry = ledger.agents.get(base["agent_id"])
        common = dict(
            base,
            usage=usage,
            model=progress.model,
            duration_ms=duration_ms,
            queued_ms=progress.queued_ms,
            turns=progress.turns,
            cost_usd=entry.cost_usd if entry is not None else None,
        )
        if outcome is None:
            return SubAgentResult(
                **common,
                status=RunStatus.CANCELLED,
                error="cancelled before it got a process",
            )
        common.update(
            pid=outcome.pid,
            peak_rss_bytes=outcome.peak_rss_bytes,
            exit_code=outcome.exit_code,
            signal=outcome.signal,
        )
        run = outcome.result
        if run is not None:
            common.update(turns=run.turns or progress.turns, tool_calls=run.tool_calls)
            problems = run.data.get("mcp_problems")
            if isinstance(problems, list):
                common["warnings"] = [*common.get("warnings", []), *map(str, problems)]
            if "sandbox" in run.data:
                common["sandbox"] = str(run.data["sandbox"])
            if run.usage.total_tokens >= usage.total_tokens:
                common["usage"] = run.usage
        kind = outcome.kind
        if kind is OutcomeKind.RESULT and run is not None:
            return SubAgentResult(**common, status=run.status, text=run.text, error=run.error)
        if cancelled or kind is OutcomeKind.KILLED:
            return SubAgentResult(
                **common,
                status=RunStatus.CANCELLED,
                text=run.text if run else "",
                error=outcome.detail or "cancelled by the parent",
            )
        if kind is OutcomeKind.DEADLINE:
            return SubAgentResult(
                **common,
                status=RunStatus.TIMEOUT,
                text=run.text if run else "",
                error=outcome.detail,
            )
        limit_error = _limit_error(outcome, limits)
        if limit_error is not None:
            return SubAgentResult(**common, status=RunStatus.LIMIT, error=limit_error)
        if kind is OutcomeKind.FAILURE:
            return SubAgentResult(**common, status=RunStatus.ERROR, error=outcome.detail)
        error = outcome.detail
        if run_dir:
            log = Path(run_dir) / f"{base['agent_id']}.stderr.log"
            if log.is_file() and log.stat().st_size:
                error += f"; its last output is in {log}"
        return SubAgentResult(**common, status=RunStatus.CRASHED, error=error)

    def _finish(
        self, result: SubAgentResult, model: str, outcome: ChildOutcome | None = None
    ) -> None:
        if outcome is not None and outcome.result is not None:
            # A test double's copy in the child recorded its calls there: hand them back
            # to the parent's object so assertions see every child's calls.
            record = outcome.result.data.get("test_model")
            absorb = getattr(self.model_objects.get(model), "absorb_record", None)
            if record is not None and absorb is not None:
                absorb(record)
        self.bus.publish(SubAgentEnded(agent_id=result.agent_id, result=result))


_STRICTNESS = [
    m.value
    for m in (
        PermissionMode.PLAN,
        PermissionMode.DEFAULT,
        PermissionMode.ACCEPT_EDITS,
        PermissionMode.BYPASS,
    )
]


def stricter_mode(parent: str, wanted: str | None) -> str:
    """The stricter of two permission modes (plan < default < accept_edits < bypass)."""
    parent = PermissionMode.parse(parent).value
    if wanted is None:
        return parent
    wanted = PermissionMode.parse(wanted).value
    return min(parent, wanted, key=_STRICTNESS.index)


#: A definition's ``effort`` as OpenAI's ``reasoning_effort`` (it has no "max"). Anthropic's
#: thinking budgets are ``THINKING_BUDGETS`` in agentcell.worker.models, by the request.
_OPENAI_EFFORT = {
    "minimal": "minimal",
    "low": "low",
    "medium": "medium",
    "high": "high",
    "max": "high",
}


def _owner(scope: Scope) -> str:
    """Who may continue the agents a scope starts: the top level is one (main and direct
    runs alike); below it, only the very agent that started them."""
    return scope.agent_id if scope.depth > 0 else ""


def _ledger(scope: Scope, default: UsageLedger) -> UsageLedger:
    return scope.account.ledger if scope.account is not None else default


#: Requests one child may have open at once (a model's parallel tool calls each ask
#: at most one approval, hook or delegation); beyond it the child is not one of ours.
MAX_OPEN_REQUESTS = 1024


def _spawn(tasks: set[asyncio.Task[None]], coro: Any) -> None:
    task = asyncio.ensure_future(coro)
    tasks.add(task)
    task.add_done_callback(tasks.discard)


def _capped(value: float | None, cap: float | None) -> float | None:
    """A definition's value, never above the operator's cap (the cap when it sets none)."""
    if value is None or cap is None:
        return value if cap is None else cap
    return min(value, cap)


def _limit_error(outcome: ChildOutcome, limits: Limits) -> str | None:
    """The message naming the limit a child went over, if that is how it ended."""
    if outcome.kind in (OutcomeKind.MEMORY, OutcomeKind.CPU):
        return outcome.detail
    memory = limits.address_space_bytes
    failure = outcome.failure
    if memory is not None and failure is not None and failure.error_type == "MemoryError":
        return (
            f"memory limit exceeded: an allocation failed under the {memory / 2**20:.0f} MiB "
            "limit (memory_limit_mb)"
        )
    if limits.cpu_seconds is not None and outcome.signal == "SIGXCPU":
        return f"CPU time limit exceeded: cpu_limit_s is {limits.cpu_seconds}"
    return None


_PROMPT_IN_COMMIT = 4000


def _commit_message(result: SubAgentResult, prompt: str) -> str:
    """Subject: the agent and its task (the title, else the prompt's first line); body: the
    whole prompt and how the run ended, so `git log` tells what asked for the change."""
    task = result.description.strip() or next(
        (line.strip() for line in prompt.splitlines() if line.strip()), "(no prompt)"
    )
    if len(task) > 60:
        task = task[:59] + "…"
    subject = f"agentcell: {result.agent_type} ({result.agent_id}): {task}"
    if len(prompt) > _PROMPT_IN_COMMIT:  # a command line has a length limit
        prompt = prompt[:_PROMPT_IN_COMMIT] + "\n[... prompt cut]"
    return (
        f"{subject}\n\nAgent: {result.agent_type} ({result.agent_id}), "
        f"{result.status.value}\nTask:\n{prompt.strip()}\n"
    )


def bash_credentials(settings: Settings, definition: AgentDefinition) -> bool:
    """Does bash get the model keys? From the user's own config, or a definition made in
    code (never from an agent file: a cloned repository must not hand them out)."""
    if settings.bash_credentials:
        return True
    return definition.source == "programmatic" and bool(definition.extra.get("bash_credentials"))


def _system_prompt(definition: AgentDefinition, workdir: str) -> str:
    prompt = definition.system_prompt.strip()
    return (
        f"{prompt}\n\nWorking directory: {workdir}" if prompt else f"Working directory: {workdir}"
    )
