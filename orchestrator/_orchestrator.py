"""``Orchestrator``: the Python API around the main agent, its sub-agents and their processes.

async with Orchestrator(model="openai:gpt-4o-mini") as orch:
    report = await orch.run("Find every TODO and summarise them")
    one = await orch.delegate("Explore", "Where is the config loaded?")
    many = await orch.map("Explore", prompts, concurrency=32)
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncIterator, Iterable, Sequence
from pathlib import Path
from typing import Any

import msgspec
from agentcell.orchestrator._records import new_run_dir, subagent_json, write_summary
from agentcell.orchestrator.backends import WorkerPool
from agentcell.orchestrator.config import Settings
from agentcell.orchestrator.definitions import AgentDefinition, AgentRegistry
from agentcell.orchestrator.delegation import (
    AgentActivity,
    AllowAll,
    ApprovalBroker,
    ApprovalChannel,
    ApprovalQuery,
    DelegationRequest,
    DenyAll,
    EventBus,
    OrchestratorEvent,
    RunHandle,
    Runner,
    Scope,
    SubAgentEnded,
    SubAgentResult,
    TaskControlTool,
    TaskStatusTool,
    TaskTool,
    TaskTracker,
    TaskWaitTool,
    TerminalPrompt,
    UsageLedger,
    background_finisher,
    background_injector,
    task_tool_spec,
)
from agentcell.protocol import RunResult, RunStatus, ToolCall, TurnStarted, Usage, UsageUpdate
from agentcell.worker import (
    Engine,
    Limits,
    PermissionPolicy,
    Redactor,
    Session,
    Transcript,
    hold_secrets,
    release_secrets,
)
from agentcell.worker.models import Model, ModelError, ModelErrorKind, resolve_model
from agentcell.worker.tools import Tool, builtin_tools


@dataclasses.dataclass(slots=True)
class RunReport:
    """What one main-agent run produced (the CLI's ``--json`` object)."""

    status: RunStatus
    final_text: str
    error: str
    usage: Usage
    cost_usd: float | None
    duration_ms: float
    run_dir: str
    subagents: list[SubAgentResult]
    main: RunResult

    @property
    def ok(self) -> bool:
        return self.status is RunStatus.COMPLETED


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
    ) -> None:
        self.settings = settings or Settings()
        self.workdir = Path(workdir).resolve()
        self.run_dir = Path(run_dir).resolve() if run_dir is not None else None
        self.record = record
        self.model_objects: dict[str, Model] = dict(models or {})
        if isinstance(model, str) or model is None:
            self.model_name = model or self.settings.model
        else:
            self.model_name = model.name
            self.model_objects[model.name] = model
        if load_agent_files:
            self.registry = AgentRegistry.load(
                self.workdir, home=home, extra_dirs=[Path(d) for d in agents_dirs]
            )
        else:
            self.registry = AgentRegistry.builtin()
        for definition in agents:
            self.registry.add(definition)
        self.custom_tools = list(tools)
        self.bus = EventBus()
        self.tracker = TaskTracker()
        self.ledger = UsageLedger(
            prices=self.settings.prices,
            budgets=self.settings.budgets,
            on_exceeded=self._budget_exceeded,
        )
        self.broker = ApprovalBroker(
            approval or _default_channel(self.settings),
            bubble_background=self.settings.approval == "bubble",
        )
        self.pool = pool or WorkerPool(
            max_workers=self.settings.max_workers,
            warm=self.settings.warm_spares,
            heartbeat_timeout=self.settings.heartbeat_timeout_s,
        )
        self._owns_pool = pool is None
        self.runner = Runner(
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
            task_tool_spec=lambda: task_tool_spec(self.registry),
        )
        self._results: list[SubAgentResult] = []
        self._engines: set[Engine] = set()
        self._handles: set[RunHandle] = set()
        self._budget_error: str | None = None
        self._main_tools: list[str] = []
        self.bus.subscribe(self._collect)

    # -- lifecycle ---------------------------------------------------------------------
    async def __aenter__(self) -> Orchestrator:
        # Before any child or tool starts: keys leave the environment for memory.
        hold_secrets()
        self._holds_secrets = True
        try:
            if self._owns_pool:
                await self.pool.start()
        except BaseException:
            self._release_secrets()
            raise
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        for handle in list(self._handles):
            handle.cancel()
        try:
            if self._owns_pool:
                await self.pool.close()
        finally:
            self._release_secrets()

    def _release_secrets(self) -> None:
        if getattr(self, "_holds_secrets", False):
            self._holds_secrets = False
            release_secrets()

    # -- the main agent ------------------------------------------------------------------
    def cancel(self) -> None:
        """Cancel what runs now (the main agent's turn, direct runs); the pool stays up."""
        for engine in list(self._engines):
            engine.cancel()
        for handle in list(self._handles):
            handle.cancel()

    async def run(
        self, prompt: str, *, session: Session | None = None, timeout_s: float | None = None
    ) -> RunReport:
        """Run the main agent on ``prompt`` until it answers (sub-agents included)."""
        started = time.perf_counter()
        session = session if session is not None else Session()
        first = len(self._results)
        model = self._main_model()
        transcript = self._main_transcript(prompt)
        task_tool = TaskTool(
            registry=self.registry,
            runner=self.runner,
            tracker=self.tracker,
            scope=lambda: self._main_scope(session),
        )
        tools: list[Tool] = [*builtin_tools(), *self.custom_tools]
        tools += [
            task_tool,
            TaskStatusTool(self.tracker),
            TaskWaitTool(self.tracker),
            TaskControlTool(self.tracker),
        ]
        settings = self.settings
        engine = Engine(
            model,
            tools,
            system_prompt=MAIN_SYSTEM_PROMPT.format(workdir=self.workdir),
            hooks=[
                PermissionPolicy(
                    settings.permission_mode,
                    allow=settings.allow_rules,
                    deny=settings.deny_rules,
                    ask=settings.ask_rules,
                )
            ],
            approver=self._main_approver,
            limits=Limits(max_turns=settings.max_turns, timeout_s=timeout_s),
            workdir=self.workdir,
            run_dir=self.run_dir,
            agent_id="main",
            turn_hooks=[background_injector(self.tracker)],
            finish_hooks=[background_finisher(self.tracker, task_tool, settings.background_wait_s)],
        )
        self._main_tools = [tool.name for tool in tools]
        self._engines.add(engine)
        on_event = self._main_event
        if transcript is not None:
            on_event = _tee(self._main_event, transcript.event)
        try:
            result = await engine.run(prompt, session, on_event=on_event)
        finally:
            self._engines.discard(engine)
            await task_tool.shutdown()
            if model.name not in self.model_objects:  # ours to close; objects are the caller's
                await model.aclose()
            if transcript is not None:
                transcript.messages(session.messages)
        status, error = result.status, result.error
        if self._budget_error is not None and status is not RunStatus.COMPLETED:
            status, error = RunStatus.BUDGET, self._budget_error
        report = RunReport(
            status=status,
            final_text=result.text,
            error=error,
            usage=self.ledger.total,
            cost_usd=self.ledger.cost_usd,
            duration_ms=(time.perf_counter() - started) * 1000,
            run_dir=str(self.run_dir) if self.run_dir else "",
            subagents=self._results[first:],
            main=result,
        )
        if transcript is not None:
            transcript.result(result)
            transcript.close()
            assert self.run_dir is not None
            write_summary(self.run_dir, report_json(report, prompt=prompt, model=model.name))
        return report

    async def delegate(
        self, agent: str, prompt: str, *, description: str = "", background: bool = False
    ) -> SubAgentResult:
        """Run one sub-agent directly (no main model), e.g. ``@Explore where is X?``."""
        handle = RunHandle()
        self._handles.add(handle)
        try:
            return await self.runner.run(
                DelegationRequest(
                    agent_type=agent, prompt=prompt, description=description, background=background
                ),
                self._direct_scope(),
                handle=handle,
            )
        finally:
            self._handles.discard(handle)

    async def map(
        self,
        agent: str,
        prompts: Iterable[str],
        *,
        concurrency: int = 8,
        description: str = "",
    ) -> list[SubAgentResult]:
        """One sub-agent per prompt over the pool; results in input order, failures
        contained per item (a crashed item is a ``crashed`` result, not an exception)."""
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        gate = asyncio.Semaphore(concurrency)

        async def one(index: int, prompt: str) -> SubAgentResult:
            async with gate:
                return await self.delegate(
                    agent, prompt, description=description or f"item {index}"
                )

        return list(await asyncio.gather(*(one(i, p) for i, p in enumerate(prompts))))

    def events(self) -> AsyncIterator[OrchestratorEvent]:
        """Live events of every agent from now on."""
        return self.bus.stream()

    # -- internals -----------------------------------------------------------------------
    def _main_transcript(self, prompt: str) -> Transcript | None:
        if not self.record:
            return None
        if self.run_dir is None:
            self.run_dir = new_run_dir(self.workdir)
            self.runner.run_dir = str(self.run_dir)
        transcript = Transcript(self.run_dir / "main.jsonl", "main", redact=Redactor.from_env())
        transcript.write("start", agent_type="main", model=self.model_name, prompt=prompt)
        return transcript

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

    def _main_scope(self, session: Session) -> Scope:
        return Scope(
            agent_id="main",
            tools=self._main_tools,
            model=self.model_name or "",
            depth=0,
            history=session.completed_turns,
        )

    def _direct_scope(self) -> Scope:
        names = [t.name for t in builtin_tools()] + [t.name for t in self.custom_tools]
        return Scope(agent_id="user", tools=names, model=self.model_name or "", depth=0)

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

    def _main_event(self, event: Any) -> None:
        if isinstance(event, UsageUpdate):
            self.ledger.add_usage("main", "main", event.model, event.usage)
        elif isinstance(event, TurnStarted):
            self.ledger.add_turn("main", "main")
        self.bus.publish(AgentActivity(agent_id="main", event=event))

    def _collect(self, event: OrchestratorEvent) -> None:
        if isinstance(event, SubAgentEnded):
            self._results.append(event.result)

    def _budget_exceeded(self, why: str) -> None:
        self._budget_error = why
        for record in self.tracker.running():
            if isinstance(record.controls, RunHandle):
                record.controls.cancel(why, RunStatus.BUDGET)
        for handle in list(self._handles):
            handle.cancel(why, RunStatus.BUDGET)
        for engine in list(self._engines):
            engine.cancel()


def _tee(first: Any, second: Any) -> Any:
    def both(event: Any) -> None:
        first(event)
        second(event)

    return both


def report_json(report: RunReport, *, prompt: str = "", model: str = "") -> dict[str, Any]:
    """The ``--json`` object (and ``summary.json``)."""
    return {
        "status": report.status.value,
        "final_text": report.final_text,
        "error": report.error,
        "usage": msgspec.to_builtins(report.usage),
        "cost_usd": report.cost_usd,
        "duration_ms": round(report.duration_ms, 1),
        "run_dir": report.run_dir,
        "model": model,
        "prompt": prompt,
        "subagents": [subagent_json(r) for r in report.subagents],
    }


def _default_channel(settings: Settings) -> ApprovalChannel:
    if settings.approval == "allow":
        return AllowAll()
    if settings.approval == "deny":
        return DenyAll()
    import sys

    if sys.stdin.isatty():
        return TerminalPrompt()
    return DenyAll("no terminal to ask on, so approvals are denied (use --approve allow or deny)")


MAIN_SYSTEM_PROMPT = """\
You are the main agent of agentcell. You work in {workdir}.
Use your tools directly for small steps. For well-bounded tasks — research across many
files, independent analyses, anything that can run in parallel — delegate with the task
tool: each sub-agent runs in its own process and returns one concise report. Issue
independent tasks together in one message so they run in parallel. A sub-agent cannot see
this conversation, so give it everything it needs in the prompt. Finish with a clear
answer for the user."""
