"""``agentcell chat``: an interactive session with the main agent.

The main agent keeps its history across turns. ``@agent-name task`` runs that sub-agent
directly (no main model). Ctrl-C cancels the current turn and its foreground sub-agents;
Ctrl-C again (or at the prompt) leaves, with every child process reaped.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

from agentcell.orchestrator._orchestrator import Orchestrator
from agentcell.orchestrator._records import new_run_dir
from agentcell.orchestrator.cli._display import ProgressView, make_console, results_table
from agentcell.orchestrator.config import Settings
from agentcell.orchestrator.delegation import ApprovalChannel, DenyAll, TerminalPrompt
from agentcell.worker import Session
from rich.console import Console
from rich.table import Table

HELP = """\
Type a request for the main agent, or:
  @AGENT TASK     run sub-agent AGENT on TASK directly (e.g. @Explore where is X defined?)
  /tasks          background tasks and their state
  /cancel ID      cancel a background task
  /agents         the sub-agents you can use
  /usage          tokens (and cost) so far, per agent
  /help           this text
  /quit           leave (Ctrl-D works too)
Ctrl-C cancels the current turn; Ctrl-C again leaves."""


class LineReader:
    """Reads lines from stdin on the event loop (no thread), so that the prompt, the
    approval questions and Ctrl-C all cooperate."""

    def __init__(self, out: Console) -> None:
        self.out = out
        self._buffer = b""
        self._lines: asyncio.Queue[bytes | None] = asyncio.Queue()
        self._fd = sys.stdin.fileno()
        os.set_blocking(self._fd, False)
        asyncio.get_running_loop().add_reader(self._fd, self._readable)

    def _readable(self) -> None:
        try:
            data = os.read(self._fd, 4096)
        except BlockingIOError:
            return
        if not data:
            asyncio.get_running_loop().remove_reader(self._fd)
            if self._buffer:
                self._lines.put_nowait(self._buffer)
            self._lines.put_nowait(None)
            return
        self._buffer += data
        *complete, self._buffer = self._buffer.split(b"\n")
        for line in complete:
            self._lines.put_nowait(line)

    async def read_line(self, prompt: str) -> str:
        self.out.print(prompt, end="", markup=False, highlight=False)
        line = await self._lines.get()
        if line is None:
            self._lines.put_nowait(None)  # stay at EOF for later readers
            raise EOFError
        return line.decode(errors="replace").rstrip("\r")

    def stop(self) -> None:
        """End input now: the next read sees EOF."""
        self._lines.put_nowait(None)

    def close(self) -> None:
        asyncio.get_running_loop().remove_reader(self._fd)
        os.set_blocking(self._fd, True)


async def run_chat(settings: Settings, workdir: Path, agents_dirs: Sequence[Path]) -> int:
    console, live = make_console(stderr=False)
    reader = LineReader(console)
    approval: ApprovalChannel
    if settings.approval in ("ask", "bubble"):
        approval = TerminalPrompt(read_line=reader.read_line, out=sys.stdout)
    else:
        approval = DenyAll() if settings.approval == "deny" else _allow()
    orch = Orchestrator(
        settings=settings,
        workdir=workdir,
        agents_dirs=agents_dirs,
        approval=approval,
        run_dir=new_run_dir(workdir),
    )
    session = Session()
    loop = asyncio.get_running_loop()
    turn: asyncio.Task[None] | None = None
    presses = 0  # Ctrl-C presses since the last line was read

    def on_sigint() -> None:
        nonlocal presses
        presses += 1
        if presses == 1:
            if turn is not None and not turn.done():
                console.print("\n[yellow]cancelling this turn… (Ctrl-C again to leave)[/yellow]")
                orch.cancel()
            else:
                console.print("\n[yellow](Ctrl-C again or /quit to leave)[/yellow]")
            return
        console.print("\n[yellow]leaving…[/yellow]")
        if turn is not None:
            turn.cancel()
        reader.stop()

    loop.add_signal_handler(signal.SIGINT, on_sigint)
    console.print(
        f"agentcell chat · model {settings.model or '(none: set --model)'} · {workdir}\n"
        "Type /help for commands.",
        highlight=False,
    )
    try:
        async with orch:
            while True:
                try:
                    line = (await reader.read_line("\nyou> ")).strip()
                except EOFError:
                    break
                presses = 0
                if not line:
                    continue
                if line in ("/quit", "/exit"):
                    break
                if line.startswith("/"):
                    _command(line, orch, console)
                    continue
                turn = asyncio.create_task(_turn(line, orch, session, console, live))
                try:
                    await turn
                except asyncio.CancelledError:
                    if turn.cancelled():
                        break  # a second Ctrl-C: leave
                    raise
                finally:
                    turn = None
    finally:
        loop.remove_signal_handler(signal.SIGINT)
        reader.close()
    console.print("bye: every sub-agent process has been stopped.")
    return 0


async def _turn(
    line: str, orch: Orchestrator, session: Session, console: Console, live: bool
) -> None:
    view = ProgressView(console, live=live, show_main=not line.startswith("@"))
    unsubscribe = orch.bus.subscribe(view.on_event)
    view.start()
    try:
        if line.startswith("@"):
            name, _, task = line[1:].partition(" ")
            if not task.strip():
                console.print("usage: @AGENT TASK (see /agents)")
                return
            if orch.registry.get(name) is None:
                console.print(f"no agent named {name!r}; see /agents", markup=False)
                return
            result = await orch.delegate(name, task.strip(), description=task.strip()[:40])
            view.stop()
            console.print(result.render(), markup=False, highlight=False)
        else:
            report = await orch.run(line, session=session)
            view.stop()
            if report.final_text:
                console.print(f"\n[bold]agent>[/bold] {report.final_text}", highlight=False)
            if not report.ok:
                console.print(f"[red]{report.status.value}: {report.error}[/red]", highlight=False)
            elif report.subagents:
                console.print(results_table(report.subagents))
    finally:
        view.stop()
        unsubscribe()


def _command(line: str, orch: Orchestrator, console: Console) -> None:
    command, _, argument = line.partition(" ")
    if command == "/help":
        console.print(HELP, markup=False, highlight=False)
    elif command == "/tasks":
        records = orch.tracker.records()
        if not records:
            console.print("no background tasks")
        for record in records:
            console.print(record.summary(), markup=False)
    elif command == "/cancel":
        target = orch.tracker.get(argument.strip())
        if target is None:
            console.print(f"no task {argument.strip()!r}; see /tasks", markup=False)
        elif target.controls is None:
            console.print(f"task {target.task_id} has already ended ({target.state.value})")
        else:
            target.controls.cancel()
            console.print(f"cancelling task {target.task_id}")
    elif command == "/agents":
        for definition in orch.registry.definitions():
            console.print(
                f"@{definition.name}: {definition.description.strip()[:100]}", markup=False
            )
    elif command == "/usage":
        table = Table(box=None, pad_edge=False)
        for column in ("agent", "type", "model", "turns", "input", "output", "cost"):
            table.add_column(column)
        for entry in orch.ledger.agents.values():
            cost = f"${entry.cost_usd:.4f}" if entry.cost_usd is not None else ""
            table.add_row(
                entry.agent_id,
                entry.agent_type,
                entry.model,
                str(entry.turns),
                str(entry.usage.input_tokens),
                str(entry.usage.output_tokens),
                cost,
            )
        console.print(table)
        console.print(f"total: {orch.ledger.total.total_tokens} tokens")
    else:
        console.print(f"unknown command {command}; /help lists them", markup=False)


def _allow() -> ApprovalChannel:
    from agentcell.orchestrator.delegation import AllowAll

    return AllowAll()
