"""Text from a model, a tool, a file or a user comes out of every renderer literally:
never parsed as Rich markup, control characters shown (``\\e``), never executed."""

from __future__ import annotations

import asyncio
import io
import json
import re
from pathlib import Path

import pytest
from agentcell.orchestrator import Orchestrator
from agentcell.orchestrator._text import one_line, visible
from agentcell.orchestrator.approvals._channel import ApprovalQuery, TerminalPrompt, question_text
from agentcell.orchestrator.approvals._question import flat
from agentcell.orchestrator.cli._agents_cmd import list_agents, show_agent
from agentcell.orchestrator.cli._chat import Chat, ChatAnswer, ChatRecord
from agentcell.orchestrator.cli._display import ProgressView, results_table
from agentcell.orchestrator.cli._report import emit_report
from agentcell.orchestrator.cli._runs_cmd import show_recorded
from agentcell.orchestrator.config._settings import Settings
from agentcell.orchestrator.definitions._model import AgentDefinition
from agentcell.orchestrator.delegation._events import (
    AgentActivity,
    SubAgentEnded,
    SubAgentProcess,
    SubAgentStarted,
)
from agentcell.orchestrator.delegation._results import SubAgentResult
from agentcell.protocol import (
    Notice,
    RunFinished,
    RunResult,
    RunStatus,
    TextDelta,
    ToolStarted,
)
from hypothesis import given
from hypothesis import strategies as st
from rich.console import Console

# What breaks terminals and markup parsers, mixed with arbitrary text.
NASTY = [
    "[bold]",
    "[/oops]",
    "[completed]",
    "[/]",
    "[link=http://x]",
    "\\[escaped]",
    "\x1b[31m",
    "\x1b[2J",
    "\x1b]0;title\x07",
    "\x1b[1A",
    "\r",
    "\b",
    "\x00",
    "\x7f",
    "\x9b",
    "\u202e",
    "\u200b",
    "漢字",
    "👩‍💻",
    "e\u0301",
    "\t",
    "\n",
]
texts = st.lists(st.sampled_from(NASTY) | st.text(max_size=6), max_size=12).map("".join)

CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202e\u200b]")


def console() -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, width=100_000, color_system=None, highlight=False), out


def assert_safe(output: str) -> None:
    """Nothing a terminal would execute: no ESC, no CR, no backspace, no bidi override."""
    found = CONTROL.findall(output)
    assert not found, f"raw control characters reached the terminal: {found!r}"


def test_visible_names_every_control_and_keeps_the_rest() -> None:
    assert visible("a\x1b[31mb\r\x00\u202e[bold]\tc\n") == "a\\e[31mb\\r\\x00\\u202e[bold]\tc\n"
    assert one_line("one two three four five", 12) == "one two…"
    assert one_line("short", 12) == "short"


@given(texts, texts)
def test_progress_view_shows_text_literally(description: str, tool_args: str) -> None:
    con, out = console()
    view = ProgressView(con, live=False)
    view.on_event(SubAgentStarted("a1", "Explore", description, False, 1, "main"))
    view.on_event(SubAgentProcess("a1", 123))
    view.on_event(AgentActivity("a1", ToolStarted(call_id="c1", name="grep", arguments=tool_args)))
    view.on_event(AgentActivity("a1", Notice(message=description)))
    result = SubAgentResult(
        agent_id="a1",
        agent_type="Explore",
        description=description,
        status=RunStatus.ERROR,
        error=tool_args,
    )
    view.on_event(SubAgentEnded("a1", result))
    con.print(view.render())
    con.print(results_table([result]))
    for line in view.status_lines():
        con.print(line, markup=False)
    text = out.getvalue()
    assert_safe(text)
    assert one_line(description) in text
    assert one_line(description, 28) in text
    assert one_line(tool_args, 70) in text
    assert one_line(tool_args) in text


@given(texts, texts)
def test_the_report_and_the_answer_are_literal(final_text: str, error: str) -> None:
    import contextlib

    from agentcell.orchestrator import RunReport
    from agentcell.protocol import Usage

    con, out = console()
    captured = io.StringIO()
    report = RunReport(
        status=RunStatus.ERROR,
        final_text=final_text,
        error=error,
        usage=Usage(),
        cost_usd=None,
        duration_ms=1.0,
        run_dir="",
        subagents=[],
        main=RunResult(status=RunStatus.ERROR),
    )
    with contextlib.redirect_stdout(captured):
        emit_report(report, con, as_json=False, quiet=False)
    stdout = captured.getvalue()
    assert_safe(stdout + out.getvalue())
    if final_text:
        assert stdout == visible(final_text) + "\n"
    assert one_line(error) in " ".join(out.getvalue().split())


@given(texts)
def test_the_chat_answer_and_approval_questions_are_literal(text: str) -> None:
    con, out = console()
    answer = ChatAnswer(con)
    for piece in (text[: len(text) // 2], text[len(text) // 2 :]):
        answer.on_event(AgentActivity("main", TextDelta(text=piece)))
    answer.finish(text)
    shown = out.getvalue()
    assert_safe(shown)
    assert " ".join(visible(text).split()) in " ".join(shown.split())

    question = question_text(
        ApprovalQuery("a2", "Explore", "bash", json.dumps({"command": text}), reason=text)
    )
    assert_safe(question.replace("\n", " "))
    assert "Explore (a2) wants to run bash:" in question
    # Every field on one line of its own, whatever the text holds (newlines included).
    assert question.count("\n") == (5 if text else 4) and f"\n    {flat(text)}\n" in question
    assert question.endswith("allow? [y]es / [n]o / [a]lways for bash: ")


async def test_an_approval_question_holds_the_live_display_and_takes_one_answer() -> None:
    con, _ = console()
    view = ProgressView(con, live=True)
    view.start()
    asked: list[str] = []
    live_while_asking: list[bool] = []

    async def read_line(prompt: str) -> str:
        asked.append(prompt)
        live_while_asking.append(view._live is not None)
        return "y"

    prompt = TerminalPrompt(read_line=read_line, out=io.StringIO(), hold=view.hold)
    try:
        answer = await prompt.ask(
            ApprovalQuery("main", "main", "bash", '{"command":"rm -rf build"}', "ask rule")
        )
        assert answer.approved
        assert live_while_asking == [False]  # nothing redraws over the question
        assert view._live is not None  # and it draws again after the answer
        assert "rm -rf build" in asked[0] and "[y]es / [n]o / [a]lways for bash" in asked[0]
    finally:
        view.stop()


@given(texts)
def test_chat_commands_show_names_and_descriptions_literally(text: str) -> None:
    asyncio.run(_chat_commands(text))


async def _chat_commands(text: str) -> None:
    con, out = console()
    definition = AgentDefinition(
        name="odd", description=text or "x", system_prompt="", tools=[], source="test"
    )
    orch = Orchestrator(
        settings=Settings(model="scripted:echo"),
        agents=[definition],
        load_agent_files=False,
        record=False,
    )
    orch.tracker.start("odd", text, task_id="a7")
    chat = Chat(orch, con, ProgressView(con, live=False), ChatRecord(Path("."), ""))
    for command in ("/agents", "/tasks", f"/cancel {text}", f"/nosuch{text}"):
        chat.command(command.replace("\n", " "))
    shown = out.getvalue()
    assert_safe(shown)
    assert f"@odd: {one_line(text or 'x', 100)}" in shown
    assert one_line(text) in " ".join(shown.split())


@given(texts)
def test_recorded_runs_and_agent_files_are_shown_literally(text: str) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        _records_and_agents(Path(tmp), text)


def _records_and_agents(root: Path, text: str) -> None:
    import contextlib

    text = "say " + text  # a record's prompt is never empty

    run = root / ".agentcell" / "runs" / "20260101-000000-abcd"
    run.mkdir(parents=True)
    sub = {
        "agent_id": "a1",
        "agent_type": "Explore",
        "description": text,
        "status": "completed",
        "final_text": text,
        "error": "",
        "usage": {"input_tokens": 1, "output_tokens": 2},
        "duration_ms": 10,
        "turns": 1,
        "tool_calls": 1,
    }
    summary = {"status": "completed", "prompt": text, "final_text": text, "subagents": [sub]}
    (run / "summary.json").write_text(json.dumps(summary))
    lines = [
        {"kind": "start", "agent_type": "Explore", "prompt": text, "model": text},
        {"kind": "event", "event": {"kind": "tool_start", "name": text, "arguments": text}},
        {"kind": "messages", "messages": [{"role": "user", "content": text}]},
    ]
    (run / "a1.jsonl").write_text("\n".join(json.dumps(ln) for ln in lines) + "\n")
    agents = root / ".claude" / "agents"
    agents.mkdir(parents=True)
    (agents / "odd.md").write_text(
        f"---\nname: odd\ndescription: {json.dumps(text + ' [bold]x[/oops]')}\n---\n{text}\n"
    )
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        show_recorded(root, run.name, as_json=False)
        show_recorded(root, run.name, "a1", as_json=False)
        list_agents(root, (), as_json=False)
        show_agent("odd", root, (), as_json=False)
    shown = buffer.getvalue()
    assert_safe(shown)
    flat = " ".join(shown.split())
    assert f"prompt: {one_line(text)}" in flat
    assert "[bold]x[/oops]" in flat


def test_the_main_row_says_how_the_main_agent_ended() -> None:
    con, _ = console()
    view = ProgressView(con, live=False)
    view.on_event(AgentActivity("main", RunFinished(result=RunResult(status=RunStatus.CANCELLED))))
    view.stop()
    assert view.rows["main"].state == "cancelled"
    quiet = ProgressView(con, live=False)
    quiet.stop(RunStatus.TIMEOUT)
    assert quiet.rows["main"].state == "timeout"


def test_the_table_shows_queue_wait_and_running_time_apart() -> None:
    con, out = console()
    con.print(
        results_table(
            [
                SubAgentResult(
                    agent_id="a1",
                    agent_type="Explore",
                    description="job",
                    status=RunStatus.COMPLETED,
                    duration_ms=3500,
                    queued_ms=1000,
                    turns=1,
                    tool_calls=1,
                )
            ]
        )
    )
    header, row = [line.split() for line in out.getvalue().splitlines()[1:3]]
    assert row[header.index("wait")] == "1.0s" and row[header.index("time")] == "2.5s"
    rendered = SubAgentResult(
        agent_id="a1", agent_type="Explore", status=RunStatus.COMPLETED, turns=1, tool_calls=1
    ).render()
    assert "1 turn, 1 tool call," in rendered


def test_the_table_names_each_sub_agents_node_when_any_ran_on_a_cluster() -> None:
    def result(agent_id: str, node: str) -> SubAgentResult:
        return SubAgentResult(
            agent_id=agent_id, agent_type="Explore", status=RunStatus.COMPLETED, node=node
        )

    con, out = console()
    con.print(results_table([result("a1", "10.0.0.7"), result("a2", "")]))
    header, first, second = [line.split() for line in out.getvalue().splitlines()[1:4]]
    assert header[-1] == "node" and first[-1] == "10.0.0.7" and second[-2:] == ["this", "machine"]
    con, out = console()
    con.print(results_table([result("a1", "")]))
    assert "node" not in out.getvalue()  # all here: no column


def test_a_narrow_terminal_gets_the_table_without_the_process_columns() -> None:
    result = SubAgentResult(
        agent_id="a1", agent_type="Explore", description="a job", status=RunStatus.COMPLETED
    )
    narrow = Console(file=io.StringIO(), width=80, color_system=None)
    narrow.print(results_table([result], width=80))
    header = narrow.file.getvalue().splitlines()[1]  # type: ignore[attr-defined]
    assert header.split() == [
        "agent",
        "type",
        "task",
        "status",
        "turns",
        "tools",
        "wait",
        "time",
        "tokens",
    ]
    wide, out = console()
    wide.print(results_table([result], width=160))
    assert out.getvalue().splitlines()[1].split()[-5:] == ["pid", "peak", "RSS", "exit", "sandbox"]


def test_a_secret_split_across_streamed_deltas_is_still_masked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from agentcell.orchestrator.cli._run_cmd import AnswerStream

    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret-value-123456")
    out = io.StringIO()
    stream = AnswerStream(out)
    for piece in ("the key is sk-sec", "ret-value-12", "3456 and \x1b[2J done"):
        stream.on_event(AgentActivity("main", TextDelta(text=piece)))
        assert "sk-sec" not in out.getvalue()
    stream.finish("")
    assert out.getvalue() == "the key is [REDACTED] and \\e[2J done\n"


def test_a_childs_long_notice_is_one_capped_line() -> None:
    """A child's notice may be a frame long (16 MiB): the progress log shows its head."""
    con, out = console()
    view = ProgressView(con, live=False)
    view.on_event(SubAgentStarted("a1", "Explore", "d", False, 1, "main"))
    view.on_event(AgentActivity("a1", Notice(message="word " * 200_000)))
    [line] = [ln for ln in out.getvalue().splitlines() if "word" in ln]
    assert len(line) < 2_100 and line.endswith("…")
