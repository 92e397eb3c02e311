"""The main agent of an ``Orchestrator``: its runs, the engine of each, and the task tools
its background sub-agents are started from.

``Orchestrator.run`` and ``check_setup`` are this; the orchestrator holds what it shares
with the sub-agents (``Parts``) and decides where each call is recorded (``Calls``).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agentcell.orchestrator._calls import Calls, Stop
from agentcell.orchestrator._main_run import (
    RunReport,
    blocked_report,
    main_hooks,
    main_mcp_servers,
    main_tools,
    main_transcript,
    main_transcript_path,
    run_report,
    tee,
)
from agentcell.orchestrator._parts import Parts
from agentcell.orchestrator._reach import UnreachableModel
from agentcell.orchestrator.approvals._channel import ApprovalQuery
from agentcell.orchestrator.approvals._hooks import stop_hook
from agentcell.orchestrator.config._load import base_url_problem
from agentcell.orchestrator.definitions._tool_policy import COORDINATION_TOOLS
from agentcell.orchestrator.delegation._events import AgentActivity
from agentcell.orchestrator.delegation._request import RunAccount, Scope
from agentcell.orchestrator.delegation._runner import Runner
from agentcell.orchestrator.journal._journal import Journal
from agentcell.orchestrator.journal._main_model import JournaledModel, main_tool_journal
from agentcell.orchestrator.journal._replay import RunPast, spent_before
from agentcell.orchestrator.prompt._context import instructions_prompt
from agentcell.orchestrator.records._disk import disk_full_report, finish_record
from agentcell.orchestrator.task_tools._background import BackgroundRuns
from agentcell.orchestrator.task_tools._delivery import ResultDelivery
from agentcell.orchestrator.task_tools._journaled_drain import JournaledDrain
from agentcell.orchestrator.task_tools._start_ahead import StartAhead
from agentcell.orchestrator.task_tools._tools import (
    TaskTool,
    background_finisher,
    background_injector,
)
from agentcell.orchestrator.teams._tools import mail_for_main
from agentcell.orchestrator.telemetry._tracing_setup import main_tracer
from agentcell.orchestrator.telemetry._usage import UsageLedger
from agentcell.protocol import TaskNursery, ToolCall, TurnStarted, Usage, UsageUpdate, gather_owned
from agentcell.worker import Engine, Limits, McpServers, Session, Transcript
from agentcell.worker.models import Model, ModelError, ModelErrorKind, request_gate, resolve_model
from agentcell.worker.tools import Tool

log = logging.getLogger("agentcell.orchestrator")


class MainAgent:
    """Runs the main agent, in this process: one engine per run, its tools and hooks, its
    MCP servers, and a ``task`` tool whose background runs ``background`` owns."""

    def __init__(self, parts: Parts, runner: Runner, calls: Calls) -> None:
        self.parts = parts
        self.runner = runner
        self.calls = calls
        self.engines: set[Engine] = set()  # the runs in progress, for cancel()
        self.tool_names: list[str] = []  # the last run's tools, a sub-agent's to narrow
        self.background = BackgroundRuns(self._new_task_tool)  # owns every background run
        #: The main agent's MCP servers that failed to start in the last run, one line each.
        self.mcp_problems: list[str] = []

    async def check_setup(self) -> None:
        """Raise ``ModelError`` now for what would fail a run at its start (see
        ``Orchestrator.check_setup``)."""
        model = self._model()
        try:
            if problem := base_url_problem(model, self.parts.settings):  # OPENAI_BASE_URL=host:1
                raise ModelError(ModelErrorKind.CONFIG, problem)
            check = getattr(model, "check_ready", None)
            if check is not None:
                try:
                    check()
                except ModelError as exc:  # its key is unset: the run exits 3, not 2
                    raise UnreachableModel(exc.kind, str(exc)) from None
        finally:
            if model.name not in self.parts.model_objects:
                await model.aclose()

    def cancel(self) -> None:
        """Cancel the runs in progress (each ends with its answer so far)."""
        for engine in list(self.engines):
            engine.cancel()

    async def run(
        self,
        prompt: str,
        *,
        session: Session | None,
        timeout_s: float | None,
        keep_background: bool,
        past: RunPast | None = None,
    ) -> RunReport:
        """One run of the main agent on ``prompt`` (see ``Orchestrator.run``); with
        ``past``, the resume of a killed run: its journaled prompt, answers and results."""
        parts = self.parts
        started = time.perf_counter()
        if refusal := self.calls.refusal():
            return disk_full_report(refusal, started)  # before any work or record
        session = session if session is not None else Session()
        model = self._model()
        # Tasks whose results earlier runs already received are of no further use; the
        # last run's stay readable (orch.tracker, /tasks) until the next one starts.
        parts.tracker.release_delivered()
        run_dir = self.calls.run_dir()
        if past is None:  # a resume's prompt was submitted before it died
            submitted = await self._submitted(prompt, started, model, run_dir)
            if isinstance(submitted, RunReport):
                return submitted
            prompt = submitted
        transcript = main_transcript(run_dir, prompt, parts.model_name)
        stops: list[Stop] = []
        account = self.calls.account(run_dir, stops, kind="run")
        account.past = past
        carried = _go_on_from(past, account) if past is not None else None
        self._journal_turn(account, prompt, model.name, session, chat=keep_background)
        journaled = JournaledModel(model, account.journal, past.main.answers if past else [])
        scope = functools.partial(self._scope, session, account)
        task_tool = await self.background.task_tool(session, scope, keep_background=keep_background)
        servers, mcp_tools = await self._start_mcp_servers(run_dir)
        tools = main_tools(
            parts.custom_tools, mcp_tools, task_tool, parts.tracker, (account.team, parts.hooks)
        )
        engine = self._engine(
            journaled,  # a Model: its name, stream, aclose
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
        self.tool_names = [tool.name for tool in tools if tool not in mcp_tools]
        self.engines.add(engine)
        on_event = self._events(account)
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
            self.engines.discard(engine)
            if not keep_background:
                await task_tool.shutdown()
            if model.name not in parts.model_objects:  # ours to close; objects are the caller's
                await model.aclose()
            if transcript is not None:
                transcript.messages(session.messages)
        report = run_report(result, account, started, run_dir)
        report.carried_usage = carried
        report = finish_record(
            report, transcript, prompt=prompt, model=model.name, summary=self.calls.summaries
        )
        self.calls.finish(account, report.status.value)
        return report

    def _journal_turn(
        self, account: RunAccount, prompt: str, model: str, session: Session, *, chat: bool
    ) -> None:
        """The run's start in its journal: its prompt, model and session, the run a
        resume resumes, and what it was given in code by name (its resume needs them)."""
        if account.journal is None:
            return
        past = account.past
        given = [t.name for t in self.parts.custom_tools] + sorted(self.parts.model_objects)
        resumes = past.run_id if past is not None else ""
        account.journal.main_turn(prompt, model, session, chat=chat, resumes=resumes, given=given)

    async def _submitted(
        self, prompt: str, started: float, model: Model, run_dir: Path | None
    ) -> str | RunReport:
        """The prompt as the session's and ``UserPromptSubmit`` hooks leave it, or the
        report of a run one of them blocked (``model`` then closed, if it is ours, and the
        run's fresh folder removed: a blocked prompt leaves no record)."""
        parts = self.parts
        opening = await parts.session_hooks.start()
        # The payload names the main transcript this prompt starts, as Claude Code's does.
        hooks = parts.hooks.for_agent(
            str(parts.workdir), parts.settings.permission_mode, main_transcript_path(run_dir)
        )
        submitted = await hooks.run("UserPromptSubmit", {"prompt": prompt})
        if submitted.blocked:
            if model.name not in parts.model_objects:
                await model.aclose()
            if run_dir is not None and run_dir != self.calls.recording.run_dir:
                with contextlib.suppress(OSError):
                    os.rmdir(run_dir)  # empty: quick, and a folder of ours alone
            return blocked_report(submitted.reason, started)
        for context in (opening, submitted.context):
            prompt = f"{prompt}\n\n{context}" if context else prompt
        return prompt

    def _new_task_tool(self, scope: Callable[[], Scope], nursery: TaskNursery) -> TaskTool:
        return TaskTool(
            registry=self.parts.registry,
            runner=self.runner,
            tracker=self.parts.tracker,
            scope=scope,
            nursery=nursery,
            left_out=self.parts.reach.left_out,
            asked_left_out=self.parts.reach.asked,
        )

    def _engine(
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
        parts = self.parts
        settings = parts.settings
        hooks = parts.hooks.for_agent(
            str(parts.workdir), settings.permission_mode, str(transcript.path) if transcript else ""
        )
        limits = Limits(max_turns=settings.max_turns, timeout_s=timeout_s)
        # Background results reach the model as a message, not a tool result: same cap.
        delivery = ResultDelivery(limits.max_tool_output_chars, run_dir, parts.workdir)
        wait_s = settings.background_wait_s
        drain = JournaledDrain(
            parts.tracker,
            account.journal,
            lambda: getattr(model, "replaying", False),
            account.past.deliveries if account.past else None,
        )
        finish_hooks = [background_finisher(parts.tracker, task_tool, wait_s, delivery, drain)]
        return Engine(
            model,
            tools,
            system_prompt=self._system_prompt(),
            hooks=main_hooks(settings, hooks, tools),
            approver=functools.partial(self._approver, account.journal),
            limits=limits,
            workdir=parts.workdir,
            setting=Engine.ToolSetting(run_dir=run_dir, agent_id="main"),
            attached=Engine.Attachments(
                turn_hooks=[
                    background_injector(parts.tracker, delivery, drain),
                    mail_for_main(account.team, lambda: getattr(model, "replaying", False)),
                ],
                finish_hooks=[*([] if keep_background else finish_hooks), stop_hook(hooks)],
                stream_watcher=self._start_ahead(account),
                tracer=main_tracer(parts.tracing, model=model.name, run_dir=run_dir),
                tool_journal=main_tool_journal(
                    account.journal, account.past.main if account.past else None, COORDINATION_TOOLS
                ),
            ),
        )

    def _system_prompt(self) -> str:
        workdir = self.parts.workdir
        prompt = MAIN_SYSTEM_PROMPT.format(workdir=workdir)
        if self.parts.settings.instruction_files:
            instructions = instructions_prompt(workdir, self.parts.home)
            if instructions:
                prompt += "\n\n" + instructions
        return prompt

    def _model(self) -> Model:
        name, settings = self.parts.model_name, self.parts.settings
        if name is None:
            raise ModelError(
                ModelErrorKind.CONFIG,
                "no model configured: pass --model (e.g. openai:gpt-4o-mini), set "
                "AGENTCELL_MODEL, or set model in agentcell.toml",
            )
        existing = self.parts.model_objects.get(name)
        if existing is not None:
            return existing
        return resolve_model(name, settings.model_options.get(name.partition(":")[0]))

    async def _start_mcp_servers(self, run_dir: Path | None) -> tuple[McpServers, list[Tool]]:
        """The main agent's MCP servers and their tools: the shared ones the sub-agents
        use too (``mcp_host/_shared.py``), and those configured ``shared = false``,
        started in this process's tree for this run. Each that fails is logged as one
        line and the run goes on without it. A server's output goes to the record folder
        (``.agentcell/mcp-logs/NAME.log`` for a shared one, ``<run>/main.mcp-NAME.log``),
        as a sub-agent's does; a temp file only without a record."""
        shared = self.runner.shared_mcp
        prefix = str(run_dir / "main.mcp-") if run_dir is not None else ""
        configured = main_mcp_servers(self.parts.settings)
        own = [server for server in configured if server.name not in shared.servers]
        servers = McpServers(own, workdir=str(self.parts.workdir), log_prefix=prefix)
        wanted = [server for server in configured if server.name in shared.servers]
        tools, problems = (await gather_owned(shared.main_tools(wanted), _started(servers)))[0]
        problems += servers.problems
        for problem in problems:
            log.warning("%s", problem)
        self.mcp_problems = problems
        return servers, [*tools, *servers.tools]

    def _start_ahead(self, account: RunAccount) -> StartAhead | None:
        """The main agent's sub-agent processes start as its task calls are named."""
        backend = self.runner.default_backend()
        if backend is None or not self.parts.settings.start_ahead:
            return None
        return StartAhead(backend, room=account.ledger.subagents_left)

    def _scope(self, session: Session, account: RunAccount | None = None) -> Scope:
        return Scope(
            agent_id="main",
            tools=self.tool_names,
            model=self.parts.model_name or "",
            depth=0,
            history=session.completed_turns,
            account=account,
        )

    async def _approver(
        self, journal: Journal | None, call: ToolCall, reason: str
    ) -> tuple[bool, str]:
        answer = await self.parts.broker.decide(
            ApprovalQuery(
                agent_id="main",
                agent_type="main",
                tool=call.name,
                arguments=call.arguments,
                reason=reason,
                call_id=call.id,
            ),
            journal,
        )
        return answer.approved, answer.reason

    def _events(self, account: RunAccount) -> Any:
        """The main engine's event sink: usage and turns into this run's ledger (and
        journal), then out."""
        publish = self.parts.bus.publish
        ledger, journal = account.ledger, account.journal

        def on_event(event: Any) -> None:
            if isinstance(event, UsageUpdate):
                ledger.add_usage("main", "main", event.model, event.usage)
                if journal is not None:
                    journal.charged("main", event.model, event.usage)
            elif isinstance(event, TurnStarted):
                ledger.add_turn("main", "main")
            publish(AgentActivity(agent_id="main", event=event))

        return on_event


def _go_on_from(past: RunPast, account: RunAccount) -> Usage:
    """A resume goes on from the killed run: its team's messages and tasks, its spend."""
    if account.team is not None:
        account.team.restore(past.team)
    return _carry_spend(past, account.ledger)


def _carry_spend(past: RunPast, ledger: UsageLedger) -> Usage:
    """The killed run's spending its resume does not repeat, charged to the resume's
    ledger first (its budgets count it)."""
    carried = Usage()
    for agent_id, agent_type, model, usage in spent_before(past):
        ledger.add_usage(agent_id, agent_type, model, usage)
        carried = carried + usage
    return carried


MAIN_SYSTEM_PROMPT = """\
You are the main agent of agentcell. You work in {workdir}.
Use your tools directly for small steps. For well-bounded tasks — research across many
files, independent analyses, anything that can run in parallel — delegate with the task
tool: each sub-agent runs in its own process and returns one concise report. Issue
independent tasks together in one message so they run in parallel. A sub-agent cannot see
this conversation, so give it everything it needs in the prompt. Finish with a clear
answer for the user."""


async def _started(servers: McpServers) -> tuple[list[Tool], list[str]]:
    """``servers`` started (their tools and problems stay on them)."""
    await servers.start()
    return [], []
