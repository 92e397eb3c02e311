"""``agentcell run``: one run of the main agent, its answer streamed to stdout.

Progress goes to stderr (a live table on a terminal, log lines otherwise). Ctrl-C and
SIGTERM both cancel the run the same way: every sub-agent is stopped, the summary and the
record are written, and the exit code says which signal it was (130, 143).
"""

from __future__ import annotations

import asyncio
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from agentcell.orchestrator._orchestrator import Orchestrator, RunReport
from agentcell.orchestrator._text import literal, visible
from agentcell.orchestrator.approvals._channel import ApprovalChannel, TerminalPrompt
from agentcell.orchestrator.cli._display import ProgressView, make_console
from agentcell.orchestrator.cli._input import PlainInput
from agentcell.orchestrator.cli._pipes import output_failed
from agentcell.orchestrator.cli._report import emit_report, print_diagnostics
from agentcell.orchestrator.cli._resumed import (
    begin_resumed_run,
    failed_resume_line,
    resuming_line,
)
from agentcell.orchestrator.config._settings import Settings
from agentcell.orchestrator.definitions._model import AgentDefinition
from agentcell.orchestrator.delegation._events import AgentActivity, OrchestratorEvent
from agentcell.protocol import TextDelta, TurnStarted
from agentcell.worker import Redactor, Session
from rich.console import Console

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_UNREACHABLE = 0, 1, 2, 3
EXIT_BY_SIGNAL = {signal.SIGINT: 130, signal.SIGTERM: 143}


class AnswerStream:
    """The main agent's text, written as it arrives: to ``out`` (flushed per delta) or,
    with a live table on the same terminal, above the table a line at a time."""

    def __init__(self, out: TextIO, view: ProgressView | None = None) -> None:
        self.out = out
        self.view = view if view is not None and view.live_mode and out.isatty() else None
        self.redact = Redactor.from_env()
        self.written = ""  # everything shown so far
        self._held = ""  # a tail that may be the start of a secret (masked once complete)
        self._line = ""  # the line in progress above a live table
        self.closed = False  # the reader of stdout went away (``| head``): stop writing

    def on_event(self, event: OrchestratorEvent) -> None:
        if not isinstance(event, AgentActivity) or event.agent_id != "main":
            return
        inner = event.event
        if isinstance(inner, TextDelta):
            self._feed(inner.text)
        elif isinstance(inner, TurnStarted) and self.written and not self.written.endswith("\n"):
            self._feed("\n")  # text of an earlier turn stands on its own line

    def _feed(self, text: str) -> None:
        pending = self.redact(self._held + text)
        keep = _secret_prefix_length(pending, self.redact.secrets)
        ready, self._held = pending[: len(pending) - keep], pending[len(pending) - keep :]
        if ready:
            self._write(visible(ready))

    def _write(self, text: str) -> None:
        self.written += text
        if self.view is None:
            if not self.closed:
                self._write_out(text)
            return
        *lines, self._line = (self._line + text).split("\n")
        for line in lines:
            self.view.print_above(line)
        self.view.answering = self._line  # the line in progress, under the table

    def _write_out(self, text: str) -> None:
        try:
            self.out.write(text)
            self.out.flush()
        except OSError as exc:  # only where stdout is not watched (``watch_stdout``)
            self.closed = True
            output_failed(exc)

    def finish(self, final_text: str) -> None:
        """End the answer with a newline; print ``final_text`` if nothing streamed."""
        if self._held:
            self._write(visible(self.redact(self._held)))
            self._held = ""
        if not self.written and final_text:
            self._write(visible(self.redact(final_text)))
        if self.written and not self.written.endswith("\n"):
            self._write("\n")
        if self.view is not None:
            self.view.answering = None
            if self._line:
                self.view.print_above(self._line)
                self._line = ""


def _secret_prefix_length(text: str, secrets: list[str]) -> int:
    """How many characters at the end of ``text`` could begin a secret."""
    longest = 0
    for secret in secrets:
        for size in range(min(len(secret) - 1, len(text)), longest, -1):
            if text.endswith(secret[:size]):
                longest = size
                break
    return longest


def _terminal_approval(
    settings: Settings, view: ProgressView | None
) -> tuple[PlainInput | None, ApprovalChannel | None]:
    """Approvals asked on the terminal, when the settings ask and there is one."""
    if settings.approval not in ("ask", "bubble") or not sys.stdin.isatty():
        return None, None
    reader = PlainInput(out=sys.stderr)
    approval = TerminalPrompt(
        read_line=reader.read_line,
        out=sys.stderr,
        hold=view.hold if view is not None else None,
    )
    return reader, approval


async def _watched(
    orch: Orchestrator,
    prompt: str,
    *,
    session: Session | None,
    timeout_s: float | None,
    answer: AnswerStream | None,
    view: ProgressView | None,
    finishing: str | None = None,
) -> RunReport:
    """The run, its answer streamed and its progress shown while it runs; ``finishing``:
    the resume of that interrupted run instead (``runs resume``)."""
    if answer is not None:
        orch.bus.subscribe(answer.on_event)
    if view is not None:
        orch.bus.subscribe(view.on_event)
        view.start()
    try:
        if finishing is not None:
            return await orch.resume(finishing, timeout_s=timeout_s)
        return await orch.run(prompt, session=session, timeout_s=timeout_s)
    finally:
        if view is not None:
            view.stop()


def _resumed_run_dir(
    orch: Orchestrator,
    workdir: Path,
    resumed_from: str | None,
    session: Session | None,
    console: Console,
    *,
    quiet: bool,
) -> Path | None:
    """A resume's own run folder, made (and named on stderr) before the run starts."""
    if not resumed_from or session is None:
        return None
    run_dir = begin_resumed_run(orch, workdir, resumed_from, session)
    if not quiet:
        console.print(literal(resuming_line(resumed_from, run_dir), style="dim"))
    return run_dir


async def run_once(
    prompt: str,
    settings: Settings,
    *,
    workdir: Path,
    agents_dirs: tuple[Path, ...],
    agents: Sequence[AgentDefinition] = (),
    timeout_s: float | None,
    as_json: bool,
    quiet: bool,
    session: Session | None = None,
    resumed_from: str | None = None,
) -> int:
    """``resumed_from``: the recorded run ``session`` is from (``runs resume``); with no
    ``session``, the interrupted run this one finishes (``prompt`` is its prompt)."""
    finishing = resumed_from if session is None else None
    console, live = make_console()
    view = None if quiet else ProgressView(console, live=live)
    reader, approval = _terminal_approval(settings, view)
    # No run directory yet: it is made when the run starts, after the checks above.
    orch = Orchestrator(
        settings=settings,
        workdir=workdir,
        agents_dirs=agents_dirs,
        agents=agents,
        approval=approval,
    )
    answer = None if as_json else AnswerStream(sys.stdout, view)
    interrupts = _Interrupts(orch, console)
    try:
        with interrupts:
            # Setup errors (no model, unknown provider, missing key) end here: exit 2, and
            # no run directory (it is made when the run starts).
            await orch.check_setup()
            left_out = await orch.leave_out_unreachable()  # before the keys are held
            if not quiet:
                print_diagnostics(orch, console, left_out)
            run_dir = _resumed_run_dir(orch, workdir, resumed_from, session, console, quiet=quiet)
            if finishing is not None and not quiet:
                console.print(literal(f"finishing interrupted run {finishing}"), style="dim")
            async with orch:
                report = await _watched(
                    orch,
                    prompt,
                    session=session,
                    timeout_s=timeout_s,
                    answer=answer,
                    view=view,
                    finishing=finishing,
                )
    except asyncio.CancelledError:
        console.print("interrupted; every sub-agent process was stopped", style="yellow")
        return EXIT_BY_SIGNAL[interrupts.received or signal.SIGINT]
    finally:
        if reader is not None:
            reader.close()
    if answer is not None:
        answer.finish(report.final_text)
    emit_report(
        report,
        console,
        as_json=as_json,
        quiet=quiet,
        prompt=prompt,
        model=orch.model_name or "",
        answer_shown=answer is not None,
        extra={"resumed_from": resumed_from} if resumed_from else None,
    )
    if resumed_from and run_dir is not None and not report.ok and not quiet:
        console.print(literal(failed_resume_line(resumed_from, run_dir), style="red"))
    if interrupts.received is not None:
        return EXIT_BY_SIGNAL[interrupts.received]
    if unreached := orch.reach.failures(report.subagents):
        for line in unreached:
            console.print(literal(f"agentcell: error: {line}", style="red"), soft_wrap=True)
        return EXIT_UNREACHABLE
    return EXIT_OK if report.ok else EXIT_FAILED


class _Interrupts:
    """SIGINT and SIGTERM while a run is on: the first cancels every sub-agent (said once,
    on stderr), a second stops waiting for that clean cancel."""

    def __init__(self, orch: Orchestrator, console: Console) -> None:
        self.orch = orch
        self.console = console
        self.received: signal.Signals | None = None
        task = asyncio.current_task()
        assert task is not None
        self._task = task

    def __enter__(self) -> _Interrupts:
        loop = asyncio.get_running_loop()
        for signum in EXIT_BY_SIGNAL:
            loop.add_signal_handler(signum, self._on_signal, signum)
        return self

    def __exit__(self, *exc: object) -> None:
        loop = asyncio.get_running_loop()
        for signum in EXIT_BY_SIGNAL:
            loop.remove_signal_handler(signum)

    def _on_signal(self, signum: signal.Signals) -> None:
        if self.received is not None:  # a second signal: stop waiting for a clean cancel
            self._task.cancel()
            return
        self.received = signum
        what = "interrupted" if signum is signal.SIGINT else "terminated"
        hint = " (Ctrl-C again to force)" if signum is signal.SIGINT else ""
        self.console.print(f"\n{what}: cancelling every sub-agent…{hint}", style="yellow")
        self.orch.cancel()
