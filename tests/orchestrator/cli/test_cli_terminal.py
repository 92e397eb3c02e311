"""``agentcell chat`` and ``run`` the way a person uses them: on a pseudo-terminal, against a
local model server speaking the real OpenAI wire format, asserting what the screen shows."""

from __future__ import annotations

import json
import re
import signal
import threading
from pathlib import Path
from typing import Any

import pytest
from agentcell.orchestrator.cli._timeline import write_timeline
from agentcell.worker.child import _proc
from cli_runner import assert_gone, cli_env, project
from model_servers import Call, ModelServer, Reply
from terminal_util import Screen

__all__ = ["project"]  # the fixture (tests/support/cli_runner.py)

ODD_ANSWER = "[/oops] and [bold]not bold[/bold], [completed] \x1b[31mred"


def _last_user(body: dict[str, Any]) -> str:
    return next(m["content"] for m in reversed(body["messages"]) if m["role"] == "user")


def _is_main(body: dict[str, Any]) -> bool:
    return "main agent of agentcell" in body["messages"][0]["content"]


def _background_deliveries(body: dict[str, Any]) -> int:
    return sum(
        1
        for m in body["messages"]
        if m["role"] == "user" and "Background task results" in (m["content"] or "")
    )


def chat_responder(body: dict[str, Any], api: str) -> Reply:
    last = _last_user(body)
    fresh = body["messages"][-1]["role"] == "user"
    if not _is_main(body):
        return Reply(hang=True) if last == "hang" else Reply(text=f"explored: {last}")
    if last == "odd please":
        return Reply(text=ODD_ANSWER)
    if last == "second turn":
        return Reply(text="the second answer")
    if last == "run echo please":
        if fresh:
            return Reply(tool_calls=[Call("bash", {"command": "echo approved-42"})])
        result = [m for m in body["messages"] if m["role"] == "tool"][-1]["content"]
        return Reply(text=f"bash said: {result.strip()}")
    if last == "start a survey":
        if fresh:
            task = {
                "subagent_type": "Explore",
                "prompt": "hang",
                "description": "slow one",
                "background": True,
            }
            return Reply(tool_calls=[Call("task", task)])
        return Reply(text="the survey runs in the background")
    if last == "something slow":
        if fresh:
            task = {"subagent_type": "Explore", "prompt": "hang", "description": "slow fg"}
            return Reply(tool_calls=[Call("task", task)])
        return Reply(text="unexpected")
    if "Background task results" in last or _background_deliveries(body):
        return Reply(text=f"delivered {_background_deliveries(body)} time(s)")
    return Reply(text="ok")


def _chat(project: Path, server: ModelServer, *extra: str) -> Screen:
    server.responder = chat_responder
    env = cli_env(project, server)
    return Screen(["chat", "--model", "openai:gpt-test", *extra], project, env)


def test_chat_shows_markup_literally_and_records_every_turn(
    project: Path, model_server: ModelServer
) -> None:
    term = _chat(project, model_server)
    try:
        term.expect("you>")
        term.send("odd please\n")
        term.expect("agent> [/oops] and [bold]not bold[/bold], [completed] \\e[31mred")
        term.send("second turn\n")
        term.expect("agent> the second answer")
        term.send("@nosuch look\n")
        term.expect("no agent named 'nosuch'; see /agents")
        term.send("/quit\n")
        screen = term.expect("bye")
        assert term.close() == 0
    finally:
        term.kill()
    assert "Traceback" not in screen
    assert "agent  type" not in screen  # no (empty) table for a turn without sub-agents
    # One recorded run for the whole session, every turn in it.
    (run_dir,) = [p for p in (project / ".agentcell" / "runs").iterdir() if p.is_dir()]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["kind"] == "chat"
    assert [t["prompt"] for t in summary["turns"]] == ["odd please", "second turn"]
    assert [t["final_text"] for t in summary["turns"]] == [ODD_ANSWER, "the second answer"]
    main = (run_dir / "main.jsonl").read_text()
    assert main.count('"kind":"start"') == 2


def test_chat_asks_for_approval_in_the_prompt(project: Path, model_server: ModelServer) -> None:
    term = _chat(project, model_server)
    try:
        term.expect("you>")
        term.send("run echo please\n")
        screen = term.expect("allow? [y]es / [n]o / [a]lways for bash:")
        assert "main agent wants to run bash:\n    echo approved-42\n" in screen, screen[:2000]
        term.send("y\n")
        term.expect("agent> bash said: approved-42")
        term.send("/quit\n")
        term.expect("bye")
        assert term.close() == 0
    finally:
        term.kill()
    # The history keeps what was typed for the conversation, not the answers.
    history = (project.parent / "home" / ".agentcell" / "chat_history").read_text()
    entries = [line[1:] for line in history.splitlines() if line.startswith("+")]
    assert entries == ["run echo please", "/quit"]


def test_chat_background_tasks_across_turns_with_tasks_and_cancel(
    project: Path, model_server: ModelServer
) -> None:
    term = _chat(project, model_server)
    pids: list[int] = []
    try:
        term.expect("you>")
        term.send("start a survey\n")
        screen = term.expect("agent> the survey runs in the background")
        pids = [int(p) for p in re.findall(r'"slow one": started in process (\d+)', screen)]
        (agent_id,) = set(re.findall(r'(a\d+) Explore "slow one": queued', screen))
        # The turn is over; the sub-agent runs on, under the same id everywhere.
        term.expect(f"{agent_id} Explore slow one: running")  # the status bar
        term.send("/tasks\n")
        term.expect(f'task {agent_id} [running] Explore "slow one"')
        term.send(f"/cancel {agent_id}\n")
        term.expect(f"cancelling {agent_id}")
        term.expect(f"background {agent_id} Explore ended (cancelled)")
        assert_gone(pids)
        term.send("what happened\n")
        term.expect("agent> delivered 1 time(s)")
        term.send("and now\n")
        term.expect_count("agent> delivered 1 time(s)", 2)  # once, never again
        # Delivered in "what happened", released when the next turn started (a long
        # chat keeps no finished task records in memory; the run record keeps them).
        term.send("/tasks\n")
        term.expect("no background tasks")
        term.send("/quit\n")
        term.expect("bye")
        assert term.close() == 0
    finally:
        term.kill()
        for pid in pids:
            _proc.kill_session(pid)


def test_chat_commands_answer_while_a_turn_runs_and_ctrl_c_cancels_it(
    project: Path, model_server: ModelServer
) -> None:
    term = _chat(project, model_server)
    pids: list[int] = []
    try:
        term.expect("you>")
        term.send("something slow\n")
        screen = term.expect('"slow fg": started in process')
        pids = [int(p) for p in re.findall(r'"slow fg": started in process (\d+)', screen)]
        term.send("/usage\n")  # answered now, while the turn runs
        screen = term.expect("total: ")
        # the model by its full name, as configured (the API's answer names it bare)
        assert re.search(r"main +main +openai:gpt-test ", screen), screen[-2000:]
        term.send("another question\n")
        term.expect("the main agent is still on your last message")
        term.send("\x03")  # Ctrl-C: cancels the turn, not the program
        term.expect("cancelling this turn")
        term.expect("cancelled: ")
        assert_gone(pids)
        term.send("/quit\n")
        term.expect("bye")
        assert term.close() == 0
        # The chat's timeline marks the cancelled turn in a row of turns.
        (run_dir,) = [p for p in (project / ".agentcell" / "runs").iterdir() if p.is_dir()]
        page = write_timeline(project, run_dir.name, None).read_text()
        (turn,) = re.findall(r'<span class="turn [^"]*"[^>]*>([^<]*)</span>', page)
        assert turn == "⊘1 cancelled", page
        assert 'title="turn 1 (main cancelled) ' in page
    finally:
        term.kill()
        for pid in pids:
            _proc.kill_session(pid)


def test_chat_completes_commands_and_agent_names(project: Path, model_server: ModelServer) -> None:
    term = _chat(project, model_server)
    try:
        term.expect("you>")
        term.send("@Expl\t")
        term.expect("you> @Explore")
        term.send(" where is it\n")
        term.expect("explored: where is it")
        term.send("/ta\t")
        term.expect("you> /tasks")
        term.send("\n")
        term.expect("no background tasks")
        term.send("\x12@Ex")  # Ctrl-R: search the history
        term.expect("@Explore where is it")
        term.send("\x07")  # Ctrl-G: leave the search
        term.send("\x04")  # Ctrl-D on an empty line: leave
        term.expect("bye")
        assert term.close() == 0
    finally:
        term.kill()


def test_run_asks_under_the_live_table(project: Path, model_server: ModelServer) -> None:
    model_server.responder = chat_responder
    env = cli_env(project, model_server)
    env.pop("NO_COLOR")  # colours on: the live table draws
    term = Screen(
        ["run", "--model", "openai:gpt-test", "--approve", "ask", "run echo please"], project, env
    )
    try:
        term.expect("main agent wants to run bash:")
        screen = term.expect("allow? [y]es / [n]o / [a]lways for bash:")
        assert "\n    echo approved-42\n" in screen
        term.send("y\n")
        screen = term.expect("completed in")
        assert "bash said: approved-42" in screen
        # The question is still there, whole: nothing was drawn over it.
        assert "  allow? [y]es / [n]o / [a]lways for bash: y" in screen
        assert term.close() == 0
    finally:
        term.kill()


@pytest.mark.parametrize("live", [True, False], ids=["live-table", "plain"])
def test_an_approval_answer_typed_on_a_terminal_shows_once(
    project: Path, model_server: ModelServer, live: bool
) -> None:
    model_server.responder = chat_responder
    env = cli_env(project, model_server)
    if live:
        env.pop("NO_COLOR")  # colours on: the live table draws
    term = Screen(
        ["run", "--model", "openai:gpt-test", "--approve", "ask", "run echo please"], project, env
    )
    try:
        term.expect("allow? [y]es / [n]o / [a]lways for bash:")
        term.send("y\n")  # the terminal echoes it; the program must not write it again
        term.expect("completed in")
        assert term.close() == 0
        lines = term.lines()
        (asked,) = [i for i, line in enumerate(lines) if "[a]lways for bash:" in line]
        assert lines[asked].endswith("for bash: y")
        assert lines[asked + 1].strip() != "y", "\n".join(lines[asked - 2 : asked + 4])
        assert sum(line.strip() == "y" for line in lines) == 0
    finally:
        term.kill()


def two_jobs_responder(body: dict[str, Any], api: str) -> Reply:
    last = _last_user(body)
    fresh = body["messages"][-1]["role"] == "user"
    if _is_main(body):
        if last == "two jobs" and fresh:
            calls = [
                Call(
                    "task",
                    {
                        "subagent_type": "general-purpose",
                        "prompt": f"job {n}",
                        "description": f"job {n}",
                        "background": True,
                    },
                )
                for n in ("one", "two")
            ]
            return Reply(tool_calls=calls)
        return Reply(text="both started")
    if fresh:
        return Reply(tool_calls=[Call("bash", {"command": f"echo {last.split()[1]}-ran"})])
    result = [m for m in body["messages"] if m["role"] == "tool"][-1]["content"]
    return Reply(text=f"{last} said {result.strip()}")


def test_chat_asks_background_questions_one_at_a_time(
    project: Path, model_server: ModelServer
) -> None:
    model_server.responder = two_jobs_responder
    env = cli_env(project, model_server)
    term = Screen(["chat", "--model", "openai:gpt-test", "--approve", "bubble"], project, env)
    try:
        term.expect("you>")
        term.send("two jobs\n")
        term.expect("agent> both started")
        # Both sub-agents ask; one question is open, the other waits its turn.
        screen = term.expect("allow? [y]es / [n]o / [a]lways for bash:")
        assert screen.count("wants to run bash:") == 1
        first = re.findall(r"general-purpose \((a\d+), background\) wants to run bash:", screen)
        assert len(first) == 1
        term.send("y\n")
        screen = term.expect_count("wants to run bash:", 2)
        second = re.findall(r"general-purpose \((a\d+), background\) wants to run bash:", screen)
        assert len(set(second)) == 2
        term.send("n\n")
        term.expect_count("ended (completed)", 2)
        term.send("/quit\n")
        term.expect("bye")
        assert term.close() == 0
    finally:
        term.kill()
    (run_dir,) = [p for p in (project / ".agentcell" / "runs").iterdir() if p.is_dir()]
    subagents = json.loads((run_dir / "summary.json").read_text())["subagents"]
    texts = sorted(s["final_text"] for s in subagents)
    assert any("-ran" in t for t in texts)  # the one allowed ran
    assert any("the user said no" in t for t in texts)  # the other was refused


def test_chat_leaves_on_sigterm_with_exit_143(project: Path, model_server: ModelServer) -> None:
    term = _chat(project, model_server)
    pids: list[int] = []
    try:
        term.expect("you>")
        term.send("something slow\n")
        screen = term.expect('"slow fg": started in process')
        pids = [int(p) for p in re.findall(r'"slow fg": started in process (\d+)', screen)]
        term.signal(signal.SIGTERM)
        term.expect("terminated: cancelling every sub-agent")
        term.expect("bye")
        assert term.close() == 143
        assert_gone(pids)
    finally:
        term.kill()
        for pid in pids:
            _proc.kill_session(pid)
    (run_dir,) = [p for p in (project / ".agentcell" / "runs").iterdir() if p.is_dir()]
    assert json.loads((run_dir / "summary.json").read_text())["kind"] == "chat"


def test_a_prompt_read_from_the_terminal_says_how_to_end_it(project: Path) -> None:
    # `run -` on a terminal used to wait without a word.
    env = cli_env(project)
    term = Screen(["run", "--model", "scripted:echo", "-"], project, env)
    try:
        term.expect("reading the prompt from the terminal; end it with Ctrl-D")
        term.send("hello from the keyboard\n\x04")
        term.expect("hello from the keyboard", timeout=60)
        assert term.close() == 0
    finally:
        term.kill()


@pytest.mark.parametrize("terminal", ["answering", "silent", "PROMPT_TOOLKIT_NO_CPR"])
def test_chat_streams_the_answer_on_a_terminal_without_cursor_reports(
    project: Path, model_server: ModelServer, terminal: str
) -> None:
    """Issue 44: on a terminal that never answers a cursor position request (some CI and
    editor terminals) the answer in progress stayed unseen until the turn ended, and
    prompt_toolkit put a WARNING line in the conversation."""
    release = threading.Event()
    model_server.responder = lambda body, api: Reply(
        text="the first line\nStreaming-head of a line that goes on",
        chunk_size=4,
        pause_after=12,
        release=release,
    )
    env = cli_env(project, model_server)
    if terminal == "PROMPT_TOOLKIT_NO_CPR":
        env["PROMPT_TOOLKIT_NO_CPR"] = "1"
    args = ["chat", "--model", "openai:gpt-test"]
    term = Screen(args, project, env, answers=terminal == "answering")
    try:
        term.expect("you>")
        term.send("hello\r")
        # Held mid-line: the finished line above the prompt, the line in progress under it.
        screen = term.wait(lambda text: "Streaming-head" in text, "the line in progress")
        assert "agent> the first line" in screen
        release.set()
        term.expect("Streaming-head of a line that goes on\n")
        term.send("/quit\r")
        term.expect("bye")
        assert term.close() == 0
        assert "WARNING" not in term.text()
    finally:
        release.set()
        term.kill()
