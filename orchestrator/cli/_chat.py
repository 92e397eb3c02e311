"""``agentcell chat``: an interactive session with the main agent.

The prompt stays usable while a turn runs: ``/tasks``, ``/cancel`` and ``/usage`` answer
at once, background sub-agents keep running across turns and their results reach the
main agent with the next message (once each). ``@agent-name task`` runs that sub-agent
directly (no main model). Ctrl-C cancels the current turn and its foreground sub-agents;
Ctrl-C again (or at an idle prompt) leaves, with every child process reaped. The whole
session is one recorded run: every turn's prompt, answer and sub-agents.
"""

from __future__ import annotations

import asyncio
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec
from agentcell.orchestrator._orchestrator import Orchestrator, RunReport
from agentcell.orchestrator._text import literal, one_line, visible
from agentcell.orchestrator.approvals._channel import (
    AllowAll,
    ApprovalChannel,
    DenyAll,
    TerminalPrompt,
)
from agentcell.orchestrator.cli._chat_turns import (
    TurnBackground,
    running_line,
    turn_results,
    waiting_line,
)
from agentcell.orchestrator.cli._display import ProgressView, results_table
from agentcell.orchestrator.cli._input import ChatCompleter, PlainInput, PromptInput
from agentcell.orchestrator.cli._report import print_diagnostics
from agentcell.orchestrator.cli._resumed import begin_resumed_run, pin_run_dir, resuming_line
from agentcell.orchestrator.config._settings import Settings
from agentcell.orchestrator.definitions._model import AgentDefinition
from agentcell.orchestrator.delegation._events import (
    AgentActivity,
    OrchestratorEvent,
    SubAgentEnded,
)
from agentcell.orchestrator.delegation._results import SubAgentResult
from agentcell.orchestrator.records._store import new_run_dir, subagent_json, write_summary_or_say
from agentcell.orchestrator.telemetry._usage_text import split_counts, usage_split
from agentcell.protocol import RunStatus, TaskNursery, TextDelta, TurnStarted
from agentcell.worker import Redactor, Session
from rich.console import Console
from rich.table import Table

#: /usage: tokens split as billed (cached prompt tokens cost a tenth, or more to write)
COLUMNS = (
    "agent",
    "type",
    "model",
    "turns",
    "input",
    "cache read",
    "cache write",
    "output",
    "cost",
)
COMMANDS = ("/help", "/tasks", "/cancel", "/agents", "/usage", "/quit", "/exit")

HELP = """\
Type a request for the main agent, or:
  @AGENT TASK     run sub-agent AGENT on TASK directly (e.g. @Explore where is X defined?)
  /tasks          background sub-agents and their state (works while a turn runs)
  /cancel ID      cancel a background sub-agent (its id as in /tasks and the tables)
  /agents         the sub-agents you can use
  /usage          tokens (and cost) so far, per agent
  /help           this text
  /quit           leave (Ctrl-D works too)
Tab completes /commands and @agent names; Up and Ctrl-R search your history.
Ctrl-C cancels the current turn; Ctrl-C again leaves."""

EXIT_TERMINATED = 143


class ChatAnswer:
    """The main agent's text as it arrives, a line at a time above the prompt."""

    def __init__(self, console: Console, view: ProgressView | None = None) -> None:
        self.console = console
        self.redact = Redactor.from_env()
        self.shown = False
        self._line = ""
        # The status bar shows the line in progress (and that the agent is working).
        self.view = view
        if view is not None:
            view.answering = ""

    def on_event(self, event: OrchestratorEvent) -> None:
        if not isinstance(event, AgentActivity) or event.agent_id != "main":
            return
        if isinstance(event.event, TextDelta):
            *lines, self._line = (self._line + event.event.text).split("\n")
            for line in lines:
                self._print(line)
        elif isinstance(event.event, TurnStarted) and self._line:
            self._print(self._line)
            self._line = ""
        if self.view is not None:
            self.view.answering = self._line

    def _print(self, line: str) -> None:
        prefix = "" if self.shown else "\nagent> "
        self.shown = True
        self.console.print(literal(prefix + self.redact(line)), soft_wrap=True)

    def finish(self, final_text: str) -> None:
        if self.view is not None:
            self.view.answering = None
        if self._line:
            self._print(self._line)
            self._line = ""
        if not self.shown and final_text:
            for line in final_text.split("\n"):
                self._print(line)


class ChatRecord:
    """The session's one run record: ``summary.json`` rewritten after every turn."""

    def __init__(self, run_dir: Path, model: str) -> None:
        self.run_dir = run_dir
        self.model = model
        self.started = time.perf_counter()
        self.turns: list[dict[str, Any]] = []
        self.results: dict[str, SubAgentResult] = {}

    def on_event(self, event: OrchestratorEvent) -> None:
        if isinstance(event, SubAgentEnded):
            self.results[event.result.agent_id] = event.result

    def turn(
        self,
        prompt: str,
        *,
        kind: str,
        status: RunStatus,
        text: str,
        error: str,
        subagents: Sequence[SubAgentResult],
        background: Sequence[str] = (),
        started_at: float = 0.0,
    ) -> None:
        """``subagents``: those whose results the turn got (background ones that ended in
        time included); ``background``: the background sub-agents the turn started;
        ``started_at``: when it began (``time.time()``: the timeline draws its bounds)."""
        self.turns.append(
            {
                "turn": len(self.turns) + 1,
                "kind": kind,
                "prompt": prompt,
                "started_at": started_at or time.time(),
                "ended_at": time.time(),
                "status": status.value,
                "final_text": text,
                "error": error,
                "subagents": [r.agent_id for r in subagents],
                "background": list(background),
            }
        )

    def write(self, orch: Orchestrator) -> None:
        last = self.turns[-1] if self.turns else {}
        write_summary_or_say(
            self.run_dir,
            {
                "kind": "chat",
                "status": last.get("status", "completed"),
                "final_text": last.get("final_text", ""),
                "error": last.get("error", ""),
                "usage": msgspec.to_builtins(orch.ledger.total),  # cache counts too
                "cost_usd": orch.ledger.cost_usd,
                "duration_ms": round((time.perf_counter() - self.started) * 1000, 1),
                "run_dir": str(self.run_dir),
                "model": self.model,
                "prompt": self.turns[0]["prompt"] if self.turns else "",
                "turns": self.turns,
                "subagents": [subagent_json(r) for r in self.results.values()],
            },
        )


class Chat:
    def __init__(
        self, orch: Orchestrator, console: Console, view: ProgressView, record: ChatRecord
    ) -> None:
        self.orch = orch
        self.console = console
        self.view = view
        self.record = record
        self.session = Session()
        #: The session's turns (and ``@agent`` runs beside one), open while it converses:
        #: leaving cancels and awaits each, however the session ends.
        self.turns = TaskNursery("the chat's turns")
        self.turn: asyncio.Task[None] | None = None
        self.presses = 0  # Ctrl-C presses since the last line
        self.leaving = False
        self.exit_code = 0

    def say(self, text: str, style: str = "") -> None:
        self.console.print(literal(text, style=style), soft_wrap=True)

    @property
    def busy(self) -> bool:
        return self.turn is not None and not self.turn.done()

    # -- input ---------------------------------------------------------------------------
    def on_line(self, line: str) -> None:
        self.presses = 0
        if not line:
            return
        if line in ("/quit", "/exit"):
            self.leaving = True
        elif line.startswith("/"):
            self.command(line)
        elif self.busy and line.startswith("@"):
            self.say(f"running {line.partition(' ')[0]} beside this turn; its answer follows")
            self.turns.start(self._turn(line), name="beside")  # a direct run of its own
        elif self.busy:
            self.say(
                "the main agent is still on your last message: wait, or Ctrl-C to cancel it "
                "(/tasks, /cancel and /usage work meanwhile)",
                "yellow",
            )
        else:
            self.turn = self.turns.start(self._turn(line), name="turn")

    def on_interrupt(self) -> None:
        """Ctrl-C: cancel the turn; a second press (or one at an idle prompt) leaves."""
        self.presses += 1
        if self.presses == 1 and self.busy:
            self.say("\ncancelling this turn… (Ctrl-C again to leave)", "yellow")
            self.orch.cancel()
        elif self.presses == 1:
            self.say("\n(Ctrl-C again or /quit to leave)", "yellow")
        else:
            self.say("\nleaving…", "yellow")
            self.leaving = True

    # -- turns ---------------------------------------------------------------------------
    async def _turn(self, line: str) -> None:
        try:
            if line.startswith("@"):
                await self._direct(line)
            else:
                await self._main(line)
        except Exception as exc:  # e.g. a model error: one line, the session goes on
            self.say(f"error: {exc}", "red")
        finally:
            self.record.write(self.orch)

    async def _direct(self, line: str) -> None:
        name, _, task = line[1:].partition(" ")
        task = task.strip()
        if not task:
            self.say("usage: @AGENT TASK (see /agents)")
            return
        definition = self.orch.registry.get(name)
        if definition is None:
            self.say(f"no agent named {name!r}; see /agents")
            return
        started_at = time.time()
        result = await self.orch.delegate(definition.name, task, description=one_line(task, 40))
        self.say(result.render(for_model=False))
        self.record.turn(
            line,
            started_at=started_at,
            kind="direct",
            status=result.status,
            text=result.text,
            error=result.error,
            subagents=[result],
        )

    async def _main(self, line: str) -> None:
        answer = ChatAnswer(self.console, self.view)
        background = TurnBackground(self.orch.tracker)
        background.begin()
        started_at = time.time()
        unsubscribe = self.orch.bus.subscribe(answer.on_event)
        try:
            report: RunReport = await self.orch.run(
                line, session=self.session, keep_background=True
            )
        finally:
            unsubscribe()
            self.view.answering = None  # however the turn ended
        answer.finish(report.final_text)
        if not report.ok:
            self.say(f"{report.status.value}: {report.error}", "red")
        foreground = [r for r in report.subagents if not r.background]
        got = turn_results(foreground, background.delivered())
        if got:
            self.console.print(results_table(got, width=self.console.width))
        started = background.started()
        for record in started:
            if not record.state.terminal:
                self.say(running_line(record))
        for record in background.waiting():
            self.say(waiting_line(record))
        self.record.turn(
            line,
            started_at=started_at,
            kind="main",
            status=report.status,
            text=report.final_text,
            error=report.error,
            subagents=got,
            background=[record.task_id for record in started],
        )

    def on_event(self, event: OrchestratorEvent) -> None:
        if isinstance(event, SubAgentEnded) and event.result.background and not self.leaving:
            result = event.result
            note = f"background {result.agent_id} {result.agent_type} ended ({result.status.value})"
            if not self.busy:  # the next main turn's first model call gets it
                note += "; the main agent gets its result with your next message to it"
            self.say(note)  # while a turn runs, its end says which turn got the result

    # -- commands ------------------------------------------------------------------------
    def command(self, line: str) -> None:
        command, _, argument = line.partition(" ")
        argument = argument.strip()
        orch = self.orch
        if command == "/help":
            self.say(HELP)
        elif command == "/tasks":
            records = orch.tracker.records()
            if not records:
                self.say("no background tasks")
            for record in records:
                self.say(record.summary())
        elif command == "/cancel":
            self._cancel(argument)
        elif command == "/agents":
            for definition in orch.registry.definitions():
                self.say(f"@{definition.name}: {one_line(definition.description, 100)}")
        elif command == "/usage":
            self._usage()
        else:
            self.say(f"unknown command {command}; /help lists them")

    def _cancel(self, task_id: str) -> None:
        if not task_id:
            self.say("usage: /cancel ID (see /tasks)")
            return
        target = self.orch.tracker.get(task_id)
        if target is None:
            foreground = task_id in self.view.rows and self.view.rows[task_id].ended is None
            hint = (
                f"{task_id} runs in the foreground of this turn: Ctrl-C cancels the turn"
                if foreground
                else f"no background sub-agent {task_id!r}; see /tasks"
            )
            self.say(hint)
        elif target.controls is None:
            self.say(f"{target.task_id} has already ended ({target.state.value})")
        else:
            target.controls.cancel()
            self.say(f"cancelling {target.task_id}")

    def _usage(self) -> None:
        table = Table(box=None, pad_edge=False)
        for column in COLUMNS:
            table.add_column(column, no_wrap=True)
        for entry in self.orch.ledger.agents.values():
            cost = f"${entry.cost_usd:.4f}" if entry.cost_usd is not None else ""
            table.add_row(
                literal(entry.agent_id),
                literal(entry.agent_type),
                literal(entry.model),
                str(entry.turns),
                *map(str, split_counts(entry.usage)),
                cost,
            )
        self.console.print(table)
        total = self.orch.ledger.total
        self.say(f"total: {total.total_tokens} tokens ({usage_split(total)})")


def _approval(settings: Settings, ask: Any) -> ApprovalChannel:
    if settings.approval in ("ask", "bubble"):
        return TerminalPrompt(read_line=ask, out=sys.stdout)
    return DenyAll() if settings.approval == "deny" else AllowAll()


async def run_chat(
    settings: Settings,
    workdir: Path,
    agents_dirs: Sequence[Path],
    *,
    agents: Sequence[AgentDefinition] = (),
    session: Session | None = None,
    resumed_from: str | None = None,
) -> int:
    console = Console(highlight=False)
    terminal = sys.stdin.isatty() and sys.stdout.isatty()
    view = ProgressView(console, live=False, show_main=False)
    prompt_input: PromptInput | None = None
    plain_input: PlainInput | None = None
    orch_box: list[Orchestrator] = []
    if terminal:
        prompt_input = PromptInput(
            completer=ChatCompleter(
                COMMANDS, lambda: orch_box[0].registry.names() if orch_box else []
            ),
            status=view.status_lines,
            history_file=Path.home() / ".agentcell" / "chat_history",
        )
        ask = prompt_input.ask
    else:

        async def ask(question: str) -> str:
            assert plain_input is not None
            return await plain_input.ask(question)

    orch = Orchestrator(
        settings=settings,
        workdir=workdir,
        agents_dirs=agents_dirs,
        agents=agents,
        approval=_approval(settings, ask),
    )
    orch_box.append(orch)
    # A setup error (no model, unknown provider, missing key) ends the command here:
    # exit 2, and no run directory.
    await orch.check_setup()
    left_out = await orch.leave_out_unreachable()  # before the keys are held
    print_diagnostics(orch, console, left_out)  # the agent files' warnings: once
    if not terminal:
        plain_input = PlainInput(out=sys.stdout)
    record = _open_record(orch, workdir, resumed_from, session)
    run_dir = record.run_dir
    chat = Chat(orch, console, view, record)
    if session is not None:  # `agentcell runs resume RUN_ID`: go on from a recorded session
        chat.session = session
    for listener in (view.on_event, record.on_event, chat.on_event):
        orch.bus.subscribe(listener)

    loop = asyncio.get_running_loop()

    def wake_input() -> None:
        if prompt_input is not None:
            app = prompt_input.session.app
            if app.is_running:
                app.exit(exception=EOFError())
        elif plain_input is not None:
            plain_input.stop()

    _handle_signals(loop, chat, orch, wake_input)
    _greet(chat, settings, workdir, resumed_from)
    try:
        async with orch:
            await _converse(chat, orch, prompt_input, plain_input)
    finally:
        loop.remove_signal_handler(signal.SIGINT)
        loop.remove_signal_handler(signal.SIGTERM)
        if plain_input is not None:
            plain_input.close()
        record.write(orch)
    chat.say(f"bye: every sub-agent process has been stopped. record: {run_dir}")
    return chat.exit_code


def _greet(chat: Chat, settings: Settings, workdir: Path, resumed_from: str | None) -> None:
    resuming = resuming_line(resumed_from, chat.record.run_dir) + "\n" if resumed_from else ""
    chat.say(
        f"agentcell chat · model {visible(settings.model or '?')} · {workdir}\n{resuming}"
        "Type /help for commands."
    )


def _open_record(
    orch: Orchestrator, workdir: Path, resumed_from: str | None, session: Session | None
) -> ChatRecord:
    """The session's run folder, made once setup has passed: a resume's marked as one.
    Its summary.json is the session's: the turns' own calls write none."""
    orch.call_summaries = False
    if resumed_from and session is not None:
        run_dir = begin_resumed_run(orch, workdir, resumed_from, session)
    else:
        run_dir = new_run_dir(workdir)
        pin_run_dir(orch, run_dir)
    return ChatRecord(run_dir, orch.model_name or "")


def _handle_signals(
    loop: asyncio.AbstractEventLoop, chat: Chat, orch: Orchestrator, wake_input: Any
) -> None:
    """SIGINT and SIGTERM from outside the terminal (on a terminal, Ctrl-C is a key)."""

    def on_sigint() -> None:
        chat.on_interrupt()
        if chat.leaving:
            wake_input()

    def on_sigterm() -> None:
        chat.exit_code = EXIT_TERMINATED
        chat.leaving = True
        chat.say("\nterminated: cancelling every sub-agent…", "yellow")
        orch.cancel()
        wake_input()

    loop.add_signal_handler(signal.SIGINT, on_sigint)
    loop.add_signal_handler(signal.SIGTERM, on_sigterm)


async def _converse(
    chat: Chat,
    orch: Orchestrator,
    prompt_input: PromptInput | None,
    plain_input: PlainInput | None,
) -> None:
    """Read and run lines until the user leaves or the input ends; then the turns still
    running are finished (the input ended) or cancelled (the user left, or reading
    failed) — either way awaited before this returns."""
    async with chat.turns:
        finished = False  # the input ended (a pipe, Ctrl-D): the turns still running finish
        try:
            if prompt_input is not None:
                with prompt_input:
                    await _loop(chat, prompt_input.read)
            else:
                assert plain_input is not None
                # Piped input is a script: each line waits for the turn before it (a pipe
                # has nobody to tell "wait", and a /quit after a prompt must not drop its
                # answer).
                await _loop(chat, plain_input.read, one_turn_at_a_time=True)
            finished = not chat.leaving
        finally:
            if not finished:  # the user left, or reading failed: stop the turns first
                orch.cancel()  # (a run's engine stops at this, not at a task's cancel)
                await chat.turns.aclose()


async def _loop(chat: Chat, read: Any, *, one_turn_at_a_time: bool = False) -> None:
    while not chat.leaving:
        if one_turn_at_a_time and chat.turn is not None and not chat.turn.done():
            await asyncio.gather(chat.turn, return_exceptions=True)
            continue  # leaving may have been asked for meanwhile (Ctrl-C, SIGTERM)
        try:
            line = (await read()).strip()
        except EOFError:
            break
        except KeyboardInterrupt:
            chat.on_interrupt()
            continue
        chat.on_line(line)
