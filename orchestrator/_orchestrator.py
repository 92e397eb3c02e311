"""``Orchestrator``: the Python API around the main agent, its sub-agents and their processes.

async with Orchestrator(model="openai:gpt-4o-mini") as orch:
    report = await orch.run("Find every TODO and summarise them")
    one = await orch.delegate("Explore", "Where is the config loaded?")
    many = await orch.map("Explore", prompts, concurrency=32)

The class is a facade: what it is made of is built by ``_parts``; the main agent's runs
are ``_main_agent.MainAgent``'s, ``delegate`` and ``map`` are ``_direct_runs.DirectRuns``';
where each call is recorded and what it may spend is ``_calls.Calls``'.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterable, Sequence
from pathlib import Path
from typing import Any

from agentcell.orchestrator._calls import Calls
from agentcell.orchestrator._direct_runs import DirectRuns
from agentcell.orchestrator._main_agent import MainAgent
from agentcell.orchestrator._main_run import RunReport, load_registry, ray_backend
from agentcell.orchestrator._parts import (
    Parts,
    approval_broker,
    chosen_model,
    configured_hooks,
    subagent_runner,
    worker_pool,
)
from agentcell.orchestrator._reach import Reach, survey
from agentcell.orchestrator._run_stream import stream_run
from agentcell.orchestrator.approvals._channel import ApprovalChannel
from agentcell.orchestrator.approvals._hooks import SessionHooks
from agentcell.orchestrator.backends._forkserver import WorkerPool
from agentcell.orchestrator.config._sandbox_policy import check_sandbox
from agentcell.orchestrator.config._settings import Settings
from agentcell.orchestrator.definitions._model import AgentDefinition
from agentcell.orchestrator.delegation._events import EventBus, EventStream, OrchestratorEvent
from agentcell.orchestrator.delegation._results import SubAgentResult
from agentcell.orchestrator.mcp_host._shared import SHARED_LOGS
from agentcell.orchestrator.task_tools._tracker import TaskTracker
from agentcell.orchestrator.telemetry._tracing_setup import tracing_from_env
from agentcell.orchestrator.telemetry._usage import UsageLedger
from agentcell.protocol import TaskNursery, Usage
from agentcell.worker import Session, hold_secrets, release_secrets, remove_protection_placeholders
from agentcell.worker.models import Model
from agentcell.worker.tools import Tool


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
        # What it was given, resolved.
        self.settings = settings or Settings()
        check_sandbox(self.settings)
        self.workdir = Path(workdir).resolve()
        self.run_dir = Path(run_dir).resolve() if run_dir is not None else None
        self.record = record
        self.call_summaries = True  # False: the caller keeps summary.json (chat's turns)
        self.model_name, self.model_objects = chosen_model(model, models, self.settings)
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
        # The services every agent shares.
        self.hooks = configured_hooks(self.settings, self.workdir)
        self.bus = EventBus()
        self.tracker = TaskTracker()
        # The lifetime ledger: totals over every call, the latest agents' rows. Budgets
        # live in each call's own ledger (see Calls.account).
        self.ledger = UsageLedger(prices=self.settings.prices, max_rows=LEDGER_ROWS)
        self.broker = approval_broker(self.settings, approval, self.hooks)
        self.session_hooks = SessionHooks(self.hooks)
        self.reach = Reach()  # the agents left out for want of a model (see check_setup)
        # OpenTelemetry (agentcell.worker.tracing.Tracing): given, or from OTEL_*, or off.
        self.tracing = tracing if tracing is not None else tracing_from_env()
        # Where sub-agents run, and what runs them.
        self.pool = pool or worker_pool(self.settings, self.tracing)
        self._owns_pool = pool is None
        self.ray = ray_backend(self.settings, self.registry)
        parts = self._parts()
        self.runner = subagent_runner(parts, self.pool, self.ray, self.run_dir)
        if record:  # its shared MCP servers' logs: beside the runs, in the record folder
            self.runner.shared_mcp.log_dir = SHARED_LOGS
        # Its calls: the main agent's runs, and the caller's own sub-agent runs.
        calls = Calls(
            self, self.settings, self.ledger, workdir=self.workdir, model_name=self.model_name
        )
        self._calls = calls
        self._main = MainAgent(parts, self.runner, calls)
        self.background = self._main.background  # owns every background run
        self._direct = DirectRuns(self.runner, calls, self.custom_tools, self.model_name)
        self._streamed = TaskNursery("streamed runs")  # owns run_stream's runs

    def _parts(self) -> Parts:
        """What was built, as the main agent and the runner take it."""
        return Parts(
            settings=self.settings,
            workdir=self.workdir,
            home=self.home,
            model_name=self.model_name,
            model_objects=self.model_objects,
            custom_tools=self.custom_tools,
            registry=self.registry,
            hooks=self.hooks,
            session_hooks=self.session_hooks,
            broker=self.broker,
            bus=self.bus,
            tracker=self.tracker,
            ledger=self.ledger,
            tracing=self.tracing,
            reach=self.reach,
        )

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
        self._direct.cancel()
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
            self._calls.close()  # the journals of run folders its calls shared
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
        await self._main.check_setup()

    async def leave_out_unreachable(self) -> list[str]:
        """Leave the agents whose model cannot be reached (no alias maps it, its key
        variable is unset) out of ``task``'s list; one line per such model, with the fix.
        Before the orchestrator opens: the keys leave the environment then."""
        return await survey(
            self.reach,
            self.registry.definitions(),
            self.settings,
            main_model=self.model_name,
            model_objects=self.model_objects,
        )

    def cancel(self) -> None:
        """Cancel what runs now (the main agent's turn, direct runs); the pool stays up."""
        self._main.cancel()
        self._direct.cancel()

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
        return await self._main.run(
            prompt, session=session, timeout_s=timeout_s, keep_background=keep_background
        )

    async def resume(self, run_id: str, *, timeout_s: float | None = None) -> RunReport:
        """Finish a run whose orchestrator died (``runs list`` says ``interrupted``),
        from its journal, as a new run that names it: completed sub-agents deliver their
        journaled results, in-flight ones go on from their last journaled turn in fresh
        processes, and no journaled model request or tool call is made again.

        ``LookupError`` (one line) for a run that is still going, ended, or has no
        journal. The orchestrator needs the custom tools and model objects the run had.
        """
        from agentcell.orchestrator._resume_run import resume_run

        return await resume_run(self._main, self.workdir, run_id, timeout_s=timeout_s)

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

    @property
    def mcp_problems(self) -> list[str]:
        """The main agent's MCP servers that failed to start in the last run, one line each."""
        return self._main.mcp_problems

    # -- the caller's own sub-agents -------------------------------------------------------
    async def delegate(
        self, agent: str, prompt: str, *, description: str = "", background: bool = False
    ) -> SubAgentResult:
        """Run one sub-agent directly (no main model), e.g. ``@Explore where is X?``.

        Recorded like ``run`` (a run directory with ``summary.json`` and the sub-agent's
        transcript and output); ``settings.budgets`` apply to this call.
        """
        return await self._direct.delegate(
            agent, prompt, description=description, background=background
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
        return await self._direct.map(
            agent, prompts, concurrency=concurrency, description=description
        )

    # -- what it saw ---------------------------------------------------------------------
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


#: Per-agent rows the lifetime ledger keeps; older ones are folded into its totals.
LEDGER_ROWS = 1000
