"""Live progress on stderr: one line per agent, updated in place on a terminal (rich),
plain log lines otherwise (a pipe, a log file, ``NO_COLOR``)."""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Iterable, Iterator

from agentcell.orchestrator._text import literal, one_line, plural
from agentcell.orchestrator.delegation._events import (
    AgentActivity,
    OrchestratorEvent,
    SubAgentEnded,
    SubAgentProcess,
    SubAgentStarted,
)
from agentcell.orchestrator.delegation._results import SubAgentResult
from agentcell.protocol import (
    Notice,
    RunFinished,
    RunStatus,
    ToolStarted,
    TurnStarted,
    UsageUpdate,
)
from agentcell.worker import Redactor
from rich.color import Color, ColorParseError
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

_STATE_STYLE = {
    "queued": "dim",
    "running": "cyan",
    "completed": "green",
    "error": "red",
    "crashed": "bold red",
    "timeout": "yellow",
    "cancelled": "yellow",
    "max_turns": "yellow",
    "budget": "yellow",
    "denied": "red",
}

#: Characters of a child's text on one progress line (a notice may be a frame long).
LOG_LINE_CHARS = 2000


#: Claude Code's agent colours that Rich spells otherwise.
_COLOR_NAMES = {"orange": "dark_orange", "pink": "hot_pink", "purple": "medium_purple"}


def agent_style(color: str) -> str:
    """A definition's ``color`` as a Rich style ("" for none, or one Rich cannot show)."""
    name = _COLOR_NAMES.get(color.strip().lower(), color.strip().lower())
    if not name:
        return ""
    try:
        Color.parse(name)
    except ColorParseError:
        return ""
    return name


@dataclasses.dataclass(slots=True)
class Row:
    agent_id: str
    agent_type: str
    description: str = ""
    state: str = "queued"
    background: bool = False
    pid: int | None = None
    turns: int = 0
    tokens: int = 0
    last_tool: str = ""
    queued: float = dataclasses.field(default_factory=time.monotonic)
    started: float | None = None  # when it got its process
    ended: float | None = None
    note: str = ""
    style: str = ""  # the agent type in the definition's colour

    @property
    def waited(self) -> float:
        """Waiting for a free process."""
        return (self.started or self.ended or time.monotonic()) - self.queued

    @property
    def running(self) -> float:
        """In its process."""
        if self.started is None:
            return 0.0
        return (self.ended or time.monotonic()) - self.started


class ProgressView:
    """Subscribe ``view.on_event`` to an orchestrator's bus; ``start``/``stop`` around a run."""

    def __init__(self, console: Console, *, live: bool, show_main: bool = True) -> None:
        self.console = console
        self.redact = Redactor.from_env()
        self.live_mode = live
        self.rows: dict[str, Row] = {}
        if show_main:
            main = Row("main", "main", "the main agent", state="running")
            main.started = main.queued
            self.rows["main"] = main
        self._live: Live | None = None
        self._holds = 0
        # The log's one clock (since the run, or the chat session, began): each agent's
        # own age made the stamps of agents started at different times run backwards.
        self.began = time.monotonic()
        #: The main agent's answer line in progress, while it streams (None: not answering).
        #: Shown under the table and in chat's status bar: text arrives as it is made,
        #: not a whole line at a time, and a long line shows that the agent is working.
        self.answering: str | None = None

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> None:
        if self.live_mode and self._live is None and self._holds == 0:
            # Transient: the table is gone when the view stops (the report prints the
            # final one), and never drawn twice. stdout and stderr are left alone: the
            # answer streams to stdout, and a question writes to the terminal itself.
            self._live = Live(
                get_renderable=self.render,
                console=self.console,
                refresh_per_second=8,
                transient=True,
                redirect_stdout=False,
                redirect_stderr=False,
            )
            self._live.start()

    def stop(self, status: RunStatus | None = None) -> None:
        """Stop drawing; ``status`` is how the main agent ended (else what its events said)."""
        main = self.rows.get("main")
        if main is not None and main.ended is None:
            main.ended = time.monotonic()
            if status is not None:
                main.state = status.value
        self._stop_live()

    def _stop_live(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None

    @contextlib.contextmanager
    def hold(self) -> Iterator[None]:
        """No redrawing while a question is open (the table would draw over it)."""
        self._holds += 1
        was_live = self._live is not None
        self._stop_live()
        try:
            yield
        finally:
            self._holds -= 1
            if was_live and self._holds == 0:
                self.start()

    def print_above(self, text: str) -> None:
        """A line of output above the live table (or just a line, without one)."""
        self.console.print(literal(text), soft_wrap=True)

    # -- events ----------------------------------------------------------------------------
    def on_event(self, event: OrchestratorEvent) -> None:
        if isinstance(event, SubAgentStarted):
            row = Row(
                event.agent_id,
                event.agent_type,
                event.description,
                background=event.background,
                style=agent_style(event.color),
            )
            self.rows[event.agent_id] = row
            self._log(row, "queued" + (" (background)" if event.background else ""))
        elif isinstance(event, SubAgentProcess):
            row = self._row(event.agent_id)
            row.pid, row.state, row.started = event.pid, "running", time.monotonic()
            where = f" on node {literal(event.node)}" if event.node else ""
            self._log(row, f"started in process {event.pid}{where}")
        elif isinstance(event, SubAgentEnded):
            self._ended(event.result)
        elif isinstance(event, AgentActivity):
            self._activity(event)

    def _activity(self, activity: AgentActivity) -> None:
        row = self.rows.get(activity.agent_id)
        if row is None:
            return
        event = activity.event
        if isinstance(event, TurnStarted):
            row.turns = event.turn
        elif isinstance(event, UsageUpdate):
            row.tokens += event.usage.total_tokens
        elif isinstance(event, ToolStarted):
            row.last_tool = event.name
            if activity.agent_id != "main" or event.name != "task":
                self._log(row, f"→ {event.name} {one_line(event.arguments, 70)}")
        elif isinstance(event, Notice):
            row.note = event.message
            self._log(row, event.message)
        elif isinstance(event, RunFinished) and activity.agent_id == "main":
            row.state = event.result.status.value
            row.ended = time.monotonic()

    def _ended(self, result: SubAgentResult) -> None:
        row = self._row(result.agent_id, result)
        row.state = result.status.value
        row.ended = time.monotonic()
        row.turns = result.turns or row.turns
        row.tokens = result.usage.total_tokens or row.tokens
        detail = f"{result.status.value} in {result.duration_ms / 1000:.1f} s"
        if result.status is not RunStatus.COMPLETED:
            detail += f": {result.error}"
        self._log(row, detail)

    def _row(self, agent_id: str, result: SubAgentResult | None = None) -> Row:
        row = self.rows.get(agent_id)
        if row is None:
            row = Row(
                agent_id,
                result.agent_type if result else "?",
                result.description if result else "",
            )
            self.rows[agent_id] = row
        return row

    def _log(self, row: Row, text: str) -> None:
        if self.live_mode:
            return
        who = row.agent_id if row.agent_id == "main" else f"{row.agent_id} {row.agent_type}"
        if row.description:
            who += f' "{one_line(row.description)}"'
        self.console.print(
            literal(
                self.redact(
                    f"[{time.monotonic() - self.began:6.1f}s] {who}: "
                    f"{one_line(text[: 4 * LOG_LINE_CHARS], LOG_LINE_CHARS)}"
                )
            ),
            highlight=False,
            soft_wrap=True,
        )

    # -- rendering -------------------------------------------------------------------------
    def render(self) -> RenderableType:
        table = self._table()
        line = self._answer_line(self.console.width)
        return table if line is None else Group(table, literal(line, style="dim"))

    def _answer_line(self, width: int) -> str | None:
        """The tail of the line in progress that fits ``width``, after ``agent> `` (what
        the finished lines start with too, in a chat)."""
        if self.answering is None:
            return None
        text = one_line(self.redact(self.answering)) or "…"
        room = max(10, width - 9)
        return "agent> " + (text if len(text) <= room else "…" + text[-(room - 1) :])

    def _table(self) -> Table:
        table = Table(box=None, pad_edge=False, expand=False, show_edge=False)
        for name, justify in (
            ("agent", "left"),
            ("type", "left"),
            ("task", "left"),
            ("state", "left"),
            ("turns", "right"),
            ("last tool", "left"),
            ("wait", "right"),
            ("time", "right"),
            ("tokens", "right"),
        ):
            table.add_column(name, justify=justify, no_wrap=True)  # type: ignore[arg-type]
        for row in self.rows.values():
            state = row.state + (" (bg)" if row.background else "")
            table.add_row(
                literal(row.agent_id),
                literal(row.agent_type, style=row.style),
                literal(self.redact(one_line(row.description, 28))),
                literal(state, style=_STATE_STYLE.get(row.state, "")),
                str(row.turns),
                literal(row.last_tool),
                f"{row.waited:.1f}s" if row.agent_id != "main" else "",
                f"{row.running:.1f}s",
                _tokens(row.tokens),
            )
        return table

    def status_lines(self) -> list[str]:
        """The sub-agents still going, one plain line each (chat's status bar)."""
        lines = []
        for row in self.rows.values():
            if row.agent_id == "main" or row.ended is not None:
                continue
            where = f"running {row.running:.0f}s" if row.started else f"queued {row.waited:.0f}s"
            tool = f", last tool {one_line(row.last_tool)}" if row.last_tool else ""
            line = f"{row.agent_id} {row.agent_type} {one_line(row.description, 28)!s}: "
            lines.append(self.redact(line + where + f", {plural(row.turns, 'turn')}{tool}"))
        answer = self._answer_line(self.console.width)
        return lines if answer is None else [*lines, answer]


#: The process columns, left out on a narrow terminal (``runs show`` has them all).
_PROCESS_COLUMNS = ("pid", "peak RSS", "exit", "sandbox")


def results_table(results: Iterable[SubAgentResult], *, width: int | None = None) -> Table:
    """The per-sub-agent table printed after a run. Below 110 columns of ``width`` the
    process columns are left out, so that the rest is not cut to "…"; a ``node`` column
    (the Ray node each ran on) when any ran on another machine."""
    results = list(results)
    redact = Redactor.from_env()
    narrow = width is not None and width < 110
    on_nodes = any(r.node for r in results)
    table = Table(title="sub-agents", title_justify="left", box=None, pad_edge=False)
    names = ["agent", "type", "task", "status", "turns", "tools", "wait", "time", "tokens"]
    if not narrow:
        names += _PROCESS_COLUMNS
    if on_nodes:
        names.append("node")
    for name in names:
        table.add_column(name, no_wrap=True)
    for r in results:
        exit_text = r.signal or ("" if r.exit_code is None else str(r.exit_code))
        cells: list[Text | str] = [
            literal(r.agent_id),
            literal(r.agent_type + (" (bg)" if r.background else "")),
            literal(redact(one_line(r.description, 28))),
            Text(r.status.value, style=_STATE_STYLE.get(r.status.value, "")),
            str(r.turns),
            str(r.tool_calls),
            f"{r.queued_ms / 1000:.1f}s",
            f"{(r.duration_ms - r.queued_ms) / 1000:.1f}s",
            _tokens(r.usage.total_tokens),
        ]
        if not narrow:
            cells += [
                str(r.pid or ""),
                f"{r.peak_rss_bytes / 2**20:.0f} MiB" if r.peak_rss_bytes else "",
                literal(exit_text),
                literal(_sandbox_cell(r.sandbox)),
            ]
        if on_nodes:
            cells.append(literal(r.node or "this machine"))
        table.add_row(*cells)
    return table


def _sandbox_cell(sandbox: str) -> str:
    """The mode alone: "!" when the child said something was missing, "?" when it ended
    before saying what it applied (the whole text is in --json and the record)."""
    mode = sandbox.replace(",", " ").split(" ", 1)[0]
    if "missing:" in sandbox:
        return mode + "!"
    if "not confirmed" in sandbox:
        return mode + "?"
    return mode


def _tokens(n: int) -> str:
    return f"{n / 1000:.1f}k" if n >= 1000 else str(n)


def make_console(*, stderr: bool = True, force_plain: bool = False) -> tuple[Console, bool]:
    """A console for progress, and whether it can update lines in place."""
    console = Console(stderr=stderr, highlight=False)
    if not console.is_terminal:
        # A log file or a pipe has no width: do not fold lines (or tables) at 80 columns.
        console = Console(stderr=stderr, highlight=False, width=160)
    live = console.is_terminal and not console.no_color and not force_plain
    return console, live


def output_console() -> Console:
    """A console for a command's output on stdout: the terminal's width on a terminal;
    in a pipe or a file, no width at all, so nothing wraps mid-word or mid-row."""
    console = Console(highlight=False)
    if not console.is_terminal:
        console = Console(highlight=False, width=100_000, no_color=True)
    return console
