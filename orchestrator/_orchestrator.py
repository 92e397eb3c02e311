"""``Orchestrator``: the Python API around the main agent, its sub-agents and their processes.

async with Orchestrator(model="openai:gpt-4o-mini") as orch:
    report = await orch.run("Find every TODO and summarise them")
    one = await orch.delegate("Explore", "Where is the config loaded?")
    many = await orch.map("Explore", prompts, concurrency=32)
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from agentcell.orchestrator._main_run import (
    RunReport,
    blocked_report,
    default_channel,
    load_registry,
    main_hooks,
    main_mcp_servers,
    main_tools,
    main_transcript,
    ray_backend,
    run_report,
    tee,
    write_call_summary,
)
from agentcell.orchestrator._run_stream import stream_run
from agentcell.orchestrator.approvals._channel import ApprovalBroker, ApprovalChannel, ApprovalQuery
from agentcell.orchestrator.approvals._hooks import (
    HookRunner,
    SessionHooks,
    notification_hook,
    stop_hook,
)
from agentcell.orchestrator.backends._forkserver import WorkerPool
from agentcell.orchestrator.config._load import base_url_problem
from agentcell.orchestrator.config._sandbox_policy import check_sandbox
from agentcell.orchestrator.config._settings import Settings
from agentcell.orchestrator.definitions._model import AgentDefinition
from agentcell.orchestrator.delegation._events import (
    AgentActivity,
    EventBus,
    EventStream,
    OrchestratorEvent,
)
from agentcell.orchestrator.delegation._request import DelegationRequest, RunAccount, Scope
from agentcell.orchestrator.delegation._results import SubAgentResult
from agentcell.orchestrator.delegation._runner import RunHandle, Runner
from agentcell.orchestrator.delegation._task_args import task_tool_spec
from agentcell.orchestrator.prompt._context import instructions_prompt
from agentcell.orchestrator.records._disk import (
    disk_full_report,
    disk_full_result,
    disk_refusal,
    finish_record,
)
from agentcell.orchestrator.records._store import new_run_dir
from agentcell.orchestrator.task_tools._background import BackgroundRuns
from agentcell.orchestrator.task_tools._delivery import ResultDelivery
from agentcell.orchestrator.task_tools._start_ahead import StartAhead
from agentcell.orchestrator.task_tools._tools import (
    TaskTool,
    background_finisher,
    background_injector,
)
from agentcell.orchestrator.task_tools._tracker import TaskTracker
from agentcell.orchestrator.telemetry._tracing_setup import (
    main_tracer,
    tracing_from_env,
    tracing_preload,
)
from agentcell.orchestrator.telemetry._usage import UsageLedger
from agentcell.protocol import (
    RunStatus,
    TaskNursery,
    ToolCall,
    TurnStarted,
    Usage,
    UsageUpdate,
    gather_owned,
)
from agentcell.worker import (
    ChildBoot,
    Engine,
    Limits,
    McpServers,
    Session,
    Transcript,
    hold_secrets,
    release_secrets,
    remove_protection_placeholders,
)
from agentcell.worker.models import Model, ModelError, ModelErrorKind, request_gate, resolve_model
from agentcell.worker.tools import Tool, builtin_tools

#: What a crossed budget calls on what a call started: (reason, status).
Stop = Callable[[str, RunStatus], None]

log = logging.getLogger("agentcell.orchestrator")


class Orchestrator:
    """The parent process's side of agentcell. Use it as an async context manager."""

    def __init__(
        self,
        *,
        model: str | Model | None = None,
        settings: Settings | None = None,
        workdir: str | Path = ".",
        agents: Sequence[AgentDefinition] = (),
        agents_dirs: Sequence[str | Path] = (),
        home: Path | None = None,
        load_agent_files: bool = True,
        tools: Sequence[Tool] = (),
        models: dict[str, Model] | None = None,
        approval: ApprovalChannel | None = None,
        run_dir: str | Path | None = None,
        record: bool = True,
        pool: WorkerPool | None = None,
        tracing: Any = None,
    ) -> None:
        self.settings = settings or Settings()
        check_sandbox(self.settings)
        self.workdir = Path(workdir).resolve()
        self.run_dir = Path(run_dir).resolve() if run_dir is not None else None
        self.record = record
        self.call_summaries = True  # False: the caller keeps summary.json (chat's turns)
        self.model_objects: dict[str, Model] = dict(models or {})
        if isinstance(model, str) or model is None:
            self.model_name = model or self.settings.model
        else:
            self.model_name = model.name
            self.model_objects[model.name] = model
        self.registry = load_registry(
            self.workdir,
            agents=agents,
            agents_dirs=agents_dirs,
            home=home,
            load_agent_files=load_agent_files,
            settings=self.settings,
        )
        self.custom_tools = list(tools)
        self.home = home or Path.home()
        # The user's own and a trusted project's hooks (load_settings drops an untrusted
        # project's); a definition's own are added per agent.
        self.hooks = HookRunner.from_table(
            self.settings.hooks,
            "config",
            cwd=str(self.workdir),
            session_id=str(uuid.uuid4()),
            permission_mode=self.settings.permission_mode,
        )
        self.bus = EventBus()
        self.tracker = TaskTracker()
        # The lifetime ledger: totals over every call, the latest agents' rows. Budgets
        # live in each call's own ledger (see _account).
        self.ledger = UsageLedger(prices=self.settings.prices, max_rows=LEDGER_ROWS)
        self.broker = ApprovalBroker(
            approval or default_channel(self.settings),
            bubble_background=self.settings.approval == "bubble",
        )
        self.broker.notify = notification_hook(self.hooks)
        self.session_hooks = SessionHooks(self.hooks)
        # OpenTelemetry (agentcell.worker.tracing.Tracing): given, or from OTEL_*, or off.
        self.tracing = tracing if tracing is not None else tracing_from_env()
        self.pool = pool or WorkerPool(
            max_workers=self.settings.max_workers,
            warm=self.settings.warm_spares,
            heartbeat_timeout=self.settings.heartbeat_timeout_s,
            boot=ChildBoot(),  # (no connection ahead: the parent sends its model requests)
            starters=self.settings.process_starters,
            preload=[*self.settings.preload, *(tracing_preload(self.tracing) or ())],
        )
        self._owns_pool = pool is None
        self.ray = ray_backend(self.settings, self.registry)
        self.runner = self._make_runner()
        self._engines: set[Engine] = set()
        self._handles: set[RunHandle] = set()
        self._main_tools: list[str] = []
        self.background = BackgroundRuns(self._new_task_tool)  # owns every background run
        self._streamed = TaskNursery("streamed runs")  # owns run_stream's runs
        #: The main agent's MCP servers that failed to start in the last run, one line each.
        self.mcp_problems: list[str] = []

    def _make_runner(self) -> Runner:
        runner = Runner(
            pool=self.pool,
            registry=self.registry,
            settings=self.settings,
            broker=self.broker,
            ledger=self.ledger,
            bus=self.bus,
            workdir=str(self.workdir),
            run_dir=str(self.run_dir) if self.run_dir else "",
            model_objects=self.model_objects,
            custom_tools=self.custom_tools,
            task_tool_spec=lambda allowed: task_tool_spec(self.registry, allowed=allowed),
            backends={"ray": self.ray} if self.ray is not None else None,
            hooks=self.hooks,
            home=self.home,
        )
        runner.tracing = self.tracing
        return runner

    # -- lifecycle ---------------------------------------------------------------------
    async def __aenter__(self) -> Orchestrator:
        # Before any child or tool starts: keys leave the environment for memory.
        hold_secrets()
        self._holds_secrets = True
        try:
            await self.background.open()  # entered here, closed by aclose
            await self._streamed.open()
            await self.runner.open()
            if self._owns_pool:
                await self.pool.start()
            if self.ray is not None:
                await self.ray.start()
        except BaseException:
            await self.aclose()
            raise
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        for handle in list(self._handles):
            handle.cancel()
        try:
            await self._streamed.aclose()  # a stream its consumer dropped: its run ends
            await self.session_hooks.end()
            if self.ray is not None:
                await self.ray.close()
            await self.background.close()
            if self._owns_pool:
                await self.pool.close()
            remove_protection_placeholders(self.workdir)  # its sub-agents are gone
            await self.runner.close_shared()  # the provider limits, the model pools
            self.bus.close()  # every events() stream ends
            if self.tracing is not None:
                self.tracing.close()  # what is still buffered goes to the exporter
        finally:
            self._release_secrets()

    def _release_secrets(self) -> None:
        if getattr(self, "_holds_secrets", False):
            self._holds_secrets = False
            release_secrets()

    # -- the main agent ------------------------------------------------------------------
    async def check_setup(self) -> None:
        """Raise ``ModelError`` now for what would fail a run at its start (no model, an
        unknown provider, a missing API key, a base URL with no scheme or host), before
        anything is started or recorded."""
        model = self._main_model()
        try:
            if problem := base_url_problem(model, self.settings):  # OPENAI_BASE_URL=host:1
                raise ModelError(ModelErrorKind.CONFIG, problem)
            check = getattr(model, "check_ready", None)
            if check is not None:
                check()
        finally:
            if model.name not in self.model_objects:
                await model.aclose()

    def cancel(self) -> None:
        """Cancel what runs now (the main agent's turn, direct runs); the pool stays up."""
        for engine in list(self._engines):
            engine.cancel()
        for handle in list(self._handles):
            handle.cancel()

    async def run(
        self,
        prompt: str,
        *,
        session: Session | None = None,
        timeout_s: float | None = None,
        keep_background: bool = False,
    ) -> RunReport:
        """Run the main agent on ``prompt`` until it answers (sub-agents included).

        A run-wide budget (``settings.budgets``) crossed at any point ends the run with
        status ``budget`` and an error naming it; the caller's task is never cancelled.

        ``keep_background`` (a conversation, e.g. ``agentcell chat``): the run ends with
        the main agent's answer while its background sub-agents keep running; their
        results are delivered, once each, into a later run on the same ``session``, and
        whatever still runs is cancelled when the orchestrator closes.
        """
        started = time.perf_counter()
        if refusal := disk_refusal(self.workdir, self.settings, self.record):
            return disk_full_report(refusal, started)  # before any work or record
        session = session if session is not None else Session()
        model = self._main_model()
        # Tasks whose results earlier runs already received are of no further use; the
        # last run's stay readable (orch.tracker, /tasks) until the next one starts.
        self.tracker.release_delivered()
        opening = await self.session_hooks.start()
        submitted = await self.hooks.run("UserPromptSubmit", {"prompt": prompt})
        if submitted.blocked:
            if model.name not in self.model_objects:
                await model.aclose()
            return blocked_report(submitted.reason, started)
        for context in (opening, submitted.context):
            prompt = f"{prompt}\n\n{context}" if context else prompt
        run_dir = self._call_run_dir()
        transcript = main_transcript(run_dir, prompt, self.model_name)
        stops: list[Stop] = []
        account = self._account(run_dir, stops)
        scope = functools.partial(self._main_scope, session, account)
        task_tool = await self.background.task_tool(session, scope, keep_background=keep_background)
        servers = await self._start_main_mcp_servers()
        tools = main_tools(self.custom_tools, servers.tools, task_tool, self.tracker)
        engine = self._main_engine(
            model,
            tools,
            task_tool,
            account,
            run_dir=run_dir,
            transcript=transcript,
            timeout_s=timeout_s,
            keep_background=keep_background,
        )
        stops += [engine.cancel, task_tool.cancel_all]
        # Its MCP servers stay its own: a sub-agent's come from the servers it names.
        self._main_tools = [tool.name for tool in tools if tool not in servers.tools]
        self._engines.add(engine)
        on_event = self._main_events(account.ledger)
        if transcript is not None:
            on_event = tee(on_event, transcript.event)
        try:
            # The main agent's requests count to the provider's limits like a child's.
            gate = request_gate.set(self.runner.limiter)
            try:
                result = await engine.run(prompt, session, on_event=on_event)
            finally:
                request_gate.reset(gate)
        finally:
            await servers.stop()
            self._engines.discard(engine)
            if not keep_background:
                await task_tool.shutdown()
            if model.name not in self.model_objects:  # ours to close; objects are the caller's
                await model.aclose()
            if transcript is not None:
                transcript.messages(session.messages)
        report = run_report(result, account, started, run_dir)
        return finish_record(
            report, transcript, prompt=prompt, model=model.name, summary=self.call_summaries
        )

    def _new_task_tool(self, scope: Callable[[], Scope], nursery: TaskNursery) -> TaskTool:
        return TaskTool(
            registry=self.registry,
            runner=self.runner,
            tracker=self.tracker,
            scope=scope,
            nursery=nursery,
        )

    def _main_engine(
        self,
        model: Model,
        tools: list[Tool],
        task_tool: TaskTool,
        account: RunAccount,
        *,
        run_dir: Path | None,
        transcript: Transcript | None,
        timeout_s: float | None,
        keep_background: bool,
    ) -> Engine:
        """The main agent's engine: its tools, permission and hook policy, and what it
        does with background sub-agents between and after its turns."""
        settings = self.settings
        hooks = self.hooks.for_agent(
            str(self.workdir), settings.permission_mode, str(transcript.path) if transcript else ""
        )
        limits = Limits(max_turns=settings.max_turns, timeout_s=timeout_s)
        # Background results reach the model as a message, not a tool result: same cap.
        delivery = ResultDelivery(limits.max_tool_output_chars, run_dir, self.workdir)
        wait_s = settings.background_wait_s
        finish_hooks = [background_finisher(self.tracker, task_tool, wait_s, delivery)]
        return Engine(
            model,
            tools,
            system_prompt=self._main_system_prompt(),
            hooks=main_hooks(settings, hooks, tools),
            approver=self._main_approver,
            limits=limits,
            workdir=self.workdir,
            run_dir=run_dir,
            agent_id="main",
            turn_hooks=[background_injector(self.tracker, delivery)],
            finish_hooks=[*([] if keep_background else finish_hooks), stop_hook(hooks)],
            stream_watcher=self._start_ahead(account),
            tracer=main_tracer(self.tracing, model=model.name, run_dir=run_dir),
        )

    async def run_stream(
        self, prompt: str, *, session: Session | None = None, timeout_s: float | None = None
    ) -> AsyncIterator[OrchestratorEvent | RunReport]:
        """Run like ``run`` and yield every event of this orchestrator while it runs, then
        the ``RunReport`` as the last item::

            async for item in orch.run_stream("..."):
                if isinstance(item, RunReport): ...  # always last, exactly once

        Leaving the loop early cancels the run (its sub-agents included); so does closing
        the orchestrator, after which the stream ends with a ``RuntimeError`` saying so.
        """
        run = self.run(prompt, session=session, timeout_s=timeout_s)
        # Closed with this generator (its finally cancels and awaits the run), not at GC.
        async with contextlib.aclosing(stream_run(self._streamed, self.events(), run)) as items:
            async for item in items:
                yield item

    async def delegate(
        self, agent: str, prompt: str, *, description: str = "", background: bool = False
    ) -> SubAgentResult:
        """Run one sub-agent directly (no main model), e.g. ``@Explore where is X?``.

        Recorded like ``run`` (a run directory with ``summary.json`` and the sub-agent's
        transcript and output); ``settings.budgets`` apply to this call.
        """
        started = time.perf_counter()
        if refusal := disk_refusal(self.workdir, self.settings, self.record):
            return disk_full_result(refusal, agent, description)  # before any work or record
        run_dir = self._call_run_dir()
        account, handles = self._direct_account(run_dir)
        returned: list[SubAgentResult] = []
        try:
            result = await self._delegate_one(
                agent,
                prompt,
                description=description,
                background=background,
                account=account,
                handles=handles,
            )
            returned.append(result)
            return result
        finally:
            self._write_call_summary(
                account, returned, run_dir, started, prompt=prompt, agent=agent, kind="delegate"
            )

    async def map(
        self,
        agent: str,
        prompts: Iterable[str],
        *,
        concurrency: int = 8,
        description: str = "",
    ) -> list[SubAgentResult]:
        """One sub-agent per prompt over the pool; results in input order, failures
        contained per item (a crashed item is a ``crashed`` result, not an exception).

        One run directory for the whole call; ``settings.budgets`` apply to the call."""
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        items = list(prompts)
        started = time.perf_counter()
        if refusal := disk_refusal(self.workdir, self.settings, self.record):
            return [
                disk_full_result(refusal, agent, description or f"item {i}")
                for i in range(len(items))
            ]
        run_dir = self._call_run_dir()
        account, handles = self._direct_account(run_dir)
        gate = asyncio.Semaphore(concurrency)

        async def one(index: int, prompt: str) -> SubAgentResult:
            async with gate:
                return await self._delegate_one(
                    agent,
                    prompt,
                    description=description or f"item {index}",
                    background=False,
                    account=account,
                    handles=handles,
                )

        returned: list[SubAgentResult] = []
        try:
            returned += await gather_owned(*(one(i, p) for i, p in enumerate(items)))
            return list(returned)
        finally:
            self._write_call_summary(
                account,
                returned,
                run_dir,
                started,
                prompt=f"{len(items)} prompts, e.g.: {items[0]}" if items else "no prompts",
                agent=agent,
                kind="map",
            )

    def events(self) -> EventStream:
        """Every event of every agent from this call on, as an async iterator.

        It is subscribed at once (not at the first read), ends by itself when the
        orchestrator closes, and may be ended early with ``close()``. Its buffer is
        bounded: if the reader falls far behind, text deltas are dropped (counted in
        ``dropped``); every other event is kept.
        """
        return self.bus.stream()

    @property
    def total_usage(self) -> Usage:
        """Tokens over this orchestrator's whole life (every run, delegate and map)."""
        return self.ledger.total

    @property
    def total_cost_usd(self) -> float | None:
        """Dollars over this orchestrator's whole life (None while nothing was priced)."""
        return self.ledger.cost_usd

    # -- internals -----------------------------------------------------------------------
    def _call_run_dir(self) -> Path | None:
        """Where one call is recorded: the directory given to the constructor (every call
        shares it), else a new one per call; None when not recording."""
        if not self.record:
            return None
        return self.run_dir if self.run_dir is not None else new_run_dir(self.workdir)

    def _account(self, run_dir: Path | None, stops: list[Stop]) -> RunAccount:
        """A call's own ledger (its budgets) that also feeds the lifetime one; crossing a
        budget calls every function in ``stops`` with the reason and ``budget``."""

        def exceeded(why: str) -> None:
            for stop in list(stops):
                stop(why, RunStatus.BUDGET)

        ledger = UsageLedger(
            prices=self.settings.prices,
            budgets=self.settings.budgets,
            on_exceeded=exceeded,
            parent=self.ledger,
        )
        return RunAccount(ledger=ledger, run_dir=str(run_dir) if run_dir else "")

    def _direct_account(self, run_dir: Path | None) -> tuple[RunAccount, set[RunHandle]]:
        handles: set[RunHandle] = set()

        def stop(why: str, status: RunStatus) -> None:
            for handle in list(handles):
                handle.cancel(why, status)

        return self._account(run_dir, [stop]), handles

    async def _delegate_one(
        self,
        agent: str,
        prompt: str,
        *,
        description: str,
        background: bool,
        account: RunAccount,
        handles: set[RunHandle],
    ) -> SubAgentResult:
        handle = RunHandle()
        self._handles.add(handle)
        handles.add(handle)
        try:
            return await self.runner.run(
                DelegationRequest(
                    agent_type=agent, prompt=prompt, description=description, background=background
                ),
                self._direct_scope(account),
                handle=handle,
            )
        finally:
            self._handles.discard(handle)
            handles.discard(handle)

    def _write_call_summary(
        self,
        account: RunAccount,
        returned: list[SubAgentResult],
        run_dir: Path | None,
        started: float,
        *,
        prompt: str,
        agent: str,
        kind: str,
    ) -> None:
        if run_dir is not None and self.call_summaries:
            write_call_summary(
                run_dir,
                account,
                returned,
                started,
                kind=kind,
                agent=agent,
                model=self.model_name or "",
                prompt=prompt,
            )

    def _main_system_prompt(self) -> str:
        prompt = MAIN_SYSTEM_PROMPT.format(workdir=self.workdir)
        if self.settings.instruction_files:
            instructions = instructions_prompt(self.workdir, self.home)
            if instructions:
                prompt += "\n\n" + instructions
        return prompt

    def _main_model(self) -> Model:
        if self.model_name is None:
            raise ModelError(
                ModelErrorKind.CONFIG,
                "no model configured: pass --model (e.g. openai:gpt-4o-mini), set "
                "AGENTCELL_MODEL, or set model in agentcell.toml",
            )
        existing = self.model_objects.get(self.model_name)
        if existing is not None:
            return existing
        return resolve_model(
            self.model_name, self.settings.model_options.get(self.model_name.partition(":")[0])
        )

    async def _start_main_mcp_servers(self) -> McpServers:
        """The main agent's MCP servers, started in this process's tree for one run;
        each that fails is logged as one line and the run goes on without it."""
        servers = McpServers(main_mcp_servers(self.settings), workdir=str(self.workdir))
        await servers.start()
        for problem in servers.problems:
            log.warning("%s", problem)
        self.mcp_problems = list(servers.problems)
        return servers

    def _start_ahead(self, account: RunAccount) -> StartAhead | None:
        """The main agent's sub-agent processes start as its task calls are named."""
        backend = self.runner.default_backend()
        if backend is None or not self.settings.start_ahead:
            return None
        return StartAhead(backend, room=account.ledger.subagents_left)

    def _main_scope(self, session: Session, account: RunAccount | None = None) -> Scope:
        return Scope(
            agent_id="main",
            tools=self._main_tools,
            model=self.model_name or "",
            depth=0,
            history=session.completed_turns,
            account=account,
        )

    def _direct_scope(self, account: RunAccount | None = None) -> Scope:
        names = [t.name for t in builtin_tools()] + [t.name for t in self.custom_tools]
        return Scope(
            agent_id="user", tools=names, model=self.model_name or "", depth=0, account=account
        )

    async def _main_approver(self, call: ToolCall, reason: str) -> tuple[bool, str]:
        answer = await self.broker.decide(
            ApprovalQuery(
                agent_id="main",
                agent_type="main",
                tool=call.name,
                arguments=call.arguments,
                reason=reason,
                call_id=call.id,
            )
        )
        return answer.approved, answer.reason

    def _main_events(self, ledger: UsageLedger) -> Any:
        """The main engine's event sink: usage and turns into this run's ledger, then out."""
        publish = self.bus.publish

        def on_event(event: Any) -> None:
            if isinstance(event, UsageUpdate):
                ledger.add_usage("main", "main", event.model, event.usage)
            elif isinstance(event, TurnStarted):
                ledger.add_turn("main", "main")
            publish(AgentActivity(agent_id="main", event=event))

        return on_event


#: Per-agent rows the lifetime ledger keeps; older ones are folded into its totals.
LEDGER_ROWS = 1000

MAIN_SYSTEM_PROMPT = """\
You are the main agent of agentcell. You work in {workdir}.
Use your tools directly for small steps. For well-bounded tasks — research across many
files, independent analyses, anything that can run in parallel — delegate with the task
tool: each sub-agent runs in its own process and returns one concise report. Issue
independent tasks together in one message so they run in parallel. A sub-agent cannot see
this conversation, so give it everything it needs in the prompt. Finish with a clear
answer for the user."""
