"""``agentcell chat``'s details, as a person meets them: on a pseudo-terminal (read through
pyte) and through pipes, against a scripted model server on 127.0.0.1.

- a background result is noted, tabled and recorded with the turn whose main agent got it
  (the note used to promise "your next message" while the running turn took it, and the
  tables left background agents out);
- progress lines carry one clock, so their stamps never run backwards;
- a piped script keeps every answer up to its ``/quit``;
- a failed turn shows no answer (it used to show the previous turn's again).
"""

from __future__ import annotations

import json
import re
import subprocess
import threading
import types
from pathlib import Path
from typing import Any

import pytest
from agentcell.orchestrator.cli import _display
from agentcell.orchestrator.cli._display import ProgressView
from agentcell.orchestrator.cli._timeline import write_timeline
from agentcell.orchestrator.delegation._events import (
    SubAgentEnded,
    SubAgentProcess,
    SubAgentStarted,
)
from agentcell.orchestrator.delegation._results import SubAgentResult
from agentcell.protocol import RunStatus
from cli_runner import AGENTCELL, cli_env
from model_servers import Call, ModelServer, Reply
from rich.console import Console
from terminal_util import Screen

RESULTS = "Background task results"
STAMP = re.compile(r"\[\s*(\d+\.\d)s\] a\d+ ")  # a progress line's stamp


def _project(tmp_path: Path) -> Path:
    (tmp_path / "home").mkdir()
    work = tmp_path / "work"
    work.mkdir()
    return work


def _users(body: dict[str, Any]) -> list[str]:
    return [m["content"] or "" for m in body["messages"] if m["role"] == "user"]


def _this_turn(body: dict[str, Any]) -> tuple[str, bool]:
    """The prompt of the turn a main-agent request belongs to, and whether it is the
    turn's first model call (nothing answered since the prompt)."""
    messages = body["messages"]
    at = max(
        i
        for i, m in enumerate(messages)
        if m["role"] == "user" and not (m["content"] or "").startswith(RESULTS)
    )
    fresh = not any(m["role"] == "assistant" for m in messages[at:])
    return messages[at]["content"], fresh


def _background(prompt: str, description: str) -> Reply:
    task = {"subagent_type": "Explore", "prompt": prompt, "description": description}
    return Reply(tool_calls=[Call("task", {**task, "background": True})])


class Scripted:
    """A main agent and its sub-agents, each held until the test releases it."""

    def __init__(self) -> None:
        self.held = {name: threading.Event() for name in ("bg1", "fg", "bg2", "bg3", "final")}
        self.final_asked = threading.Event()

    def __call__(self, body: dict[str, Any], api: str) -> Reply:
        if "main agent of agentcell" not in body["messages"][0]["content"]:
            work = _users(body)[0]
            return Reply(text=f"{work} done", pause_after=1, release=self.held[work])
        prompt, fresh = _this_turn(body)
        delivered = sum(text.startswith(RESULTS) for text in _users(body))
        if prompt.startswith("start ") and fresh:
            name = prompt.split()[1]
            return _background(name, f"{name} work")
        if prompt == "run fg" and fresh:
            task = {"subagent_type": "Explore", "prompt": "fg", "description": "fg work"}
            return Reply(tool_calls=[Call("task", task)])
        if prompt == "slow answer":
            self.final_asked.set()
            return Reply(text="slow done", pause_after=1, release=self.held["final"])
        return Reply(text=f"{prompt}: {delivered} delivered")


def _table(term: Screen, after: str, rows: int) -> list[str]:
    """The agent ids of the sub-agents table printed after the line ``after``, once it
    has ``rows`` rows: the answer line comes first, the table in a later write."""
    screen = term.wait(lambda text: len(_table_rows(text, after)) >= rows, f"{rows} rows")
    return _table_rows(screen, after)


def _table_rows(screen: str, after: str) -> list[str]:
    """The agent ids in the first sub-agents table after the line ``after`` (none yet: [])."""
    if after not in screen:
        return []
    lines = screen[screen.index(after) :].splitlines()
    if "sub-agents" not in lines:
        return []
    start = lines.index("sub-agents") + 2
    rows = []
    for line in lines[start:]:
        if not re.match(r"a\d+ ", line):
            break
        rows.append(line.split()[0] + (" bg" if "(bg)" in line else ""))
    return rows


def _note(screen: str, agent_id: str) -> str:
    return next(line for line in screen.splitlines() if line.startswith(f"background {agent_id} "))


def test_a_background_result_belongs_to_the_turn_that_got_it(
    tmp_path: Path, model_server: ModelServer
) -> None:
    work = _project(tmp_path)
    script = Scripted()
    model_server.responder = script
    term = Screen(["chat", "--model", "openai:gpt-test"], work, cli_env(work, model_server))
    try:
        term.expect("you>")
        term.send("start bg1\n")
        term.expect('a1 Explore "bg1 work" runs on in the background')
        # It ends while the next turn runs: that turn's next model call gets it.
        term.send("run fg\n")
        term.expect('a2 Explore "fg work": started in process')
        script.held["bg1"].set()
        term.expect("background a1 Explore ended (completed)")
        script.held["fg"].set()
        screen = term.expect("agent> run fg: 1 delivered")
        assert "next message" not in _note(screen, "a1"), _note(screen, "a1")
        assert _table(term, "agent> run fg", 2) == ["a2", "a1 bg"]

        # It ends between turns: the next message takes it, as the note says.
        term.send("start bg2\n")
        term.expect('a3 Explore "bg2 work" runs on in the background')
        script.held["bg2"].set()
        screen = term.expect("background a3 Explore ended (completed)")
        term.expect("the main agent gets its result with your next message")
        term.send("idle\n")
        screen = term.expect("agent> idle: 2 delivered")
        assert _table(term, "agent> idle", 1) == ["a3 bg"]

        # It ends during the turn's last model call: too late for it, so the next one.
        term.send("start bg3\n")
        term.expect('a4 Explore "bg3 work" runs on in the background')
        term.send("slow answer\n")
        assert script.final_asked.wait(60)
        script.held["bg3"].set()
        term.expect("background a4 Explore ended (completed)")
        script.held["final"].set()
        screen = term.expect("a4 Explore ended too late for this turn")
        assert "next message" not in _note(screen, "a4")
        assert "sub-agents" not in screen[screen.index("agent> slow done") :]
        term.send("last\n")
        screen = term.expect("agent> last: 3 delivered")
        assert _table(term, "agent> last", 1) == ["a4 bg"]
        term.send("/quit\n")
        term.expect("bye")
        assert term.close() == 0
    finally:
        for held in script.held.values():
            held.set()
        term.kill()
    (run_dir,) = [p for p in (work / ".agentcell" / "runs").iterdir() if p.is_dir()]
    turns = json.loads((run_dir / "summary.json").read_text())["turns"]
    assert [(t["prompt"], t["subagents"], t["background"]) for t in turns] == [
        ("start bg1", [], ["a1"]),
        ("run fg", ["a2", "a1"], []),
        ("start bg2", [], ["a3"]),
        ("idle", ["a3"], []),
        ("start bg3", [], ["a4"]),
        ("slow answer", [], []),
        ("last", ["a4"], []),
    ]
    shown = subprocess.run(
        [AGENTCELL, "runs", "show", run_dir.name],
        cwd=work,
        env=cli_env(work),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "started in the background: a1" in shown.stdout, shown.stdout + shown.stderr


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def monotonic(self) -> float:
        return self.now


def _result(agent_id: str) -> SubAgentResult:
    return SubAgentResult(
        agent_id=agent_id, agent_type="Explore", description="", status=RunStatus.COMPLETED
    )


def test_progress_stamps_share_one_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """An agent asked for late (a second turn's) used to be stamped from its own start,
    so its lines read earlier than the lines printed before them."""
    clock = _Clock()
    monkeypatch.setattr(_display, "time", types.SimpleNamespace(monotonic=clock.monotonic))
    console = Console(width=200, record=True, force_terminal=False, no_color=True)
    view = ProgressView(console, live=False, show_main=False)
    for at, event in [
        (101.0, SubAgentStarted("a1", "Explore", "early", True, 1, "main")),
        (104.0, SubAgentProcess("a1", 4242)),
        (106.0, SubAgentStarted("a2", "Explore", "late", False, 1, "main")),
        (107.0, SubAgentProcess("a2", 4343)),
        (108.0, SubAgentEnded("a1", _result("a1"))),
        (109.0, SubAgentEnded("a2", _result("a2"))),
    ]:
        clock.now = at
        view.on_event(event)
    stamps = [float(s) for s in STAMP.findall(console.export_text())]
    assert stamps == [1.0, 4.0, 6.0, 7.0, 8.0, 9.0]


def _piped_chat(
    work: Path, env: dict[str, str], script: str, *model: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [AGENTCELL, "chat", *(model or ("--model", "scripted:echo"))],
        input=script,
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )


def test_piped_progress_runs_forward_across_turns(
    tmp_path: Path, model_server: ModelServer
) -> None:
    work = _project(tmp_path)
    script = Scripted()
    for name in ("bg1", "fg"):  # nothing held: the lines come as the agents go
        script.held[name].set()
    model_server.responder = script
    env = cli_env(work, model_server)
    chat = _piped_chat(work, env, "start bg1\nrun fg\nidle\n/quit\n", "--model", "openai:m")
    assert chat.returncode == 0, chat.stderr
    stamps = [float(s) for s in STAMP.findall(chat.stdout)]
    assert len(stamps) >= 6, chat.stdout  # queued, started, ended: two agents
    assert stamps == sorted(stamps), chat.stdout


def test_a_piped_script_keeps_every_answer_up_to_its_quit(tmp_path: Path) -> None:
    """A direct ``@agent`` line right before ``/quit`` (and no last newline) used to run
    beside the turn still going, and the ``/quit`` cancelled it."""
    work = _project(tmp_path)
    chat = _piped_chat(work, cli_env(work), "hello\n@Explore look around\n/quit")
    assert chat.returncode == 0, chat.stderr
    assert "agent> echo: hello" in chat.stdout, chat.stdout
    assert "echo: look around" in chat.stdout and "[completed] Explore" in chat.stdout
    assert "agent_id:" not in chat.stdout  # the model's line for continuing it: not shown
    (run_dir,) = [p for p in (work / ".agentcell" / "runs").iterdir() if p.is_dir()]
    turns = json.loads((run_dir / "summary.json").read_text())["turns"]
    assert [(t["kind"], t["status"]) for t in turns] == [
        ("main", "completed"),
        ("direct", "completed"),
    ]


def test_piped_input_is_written_after_its_prompt_so_output_starts_on_its_own_line(
    tmp_path: Path,
) -> None:
    work = _project(tmp_path)
    chat = _piped_chat(work, cli_env(work), "hello\n@Explore look \x1b[31maround\n/quit\n")
    assert chat.returncode == 0, chat.stderr
    lines = chat.stdout.splitlines()
    assert "you> hello" in lines and "you> /quit" in lines, chat.stdout
    # Written out as it came, a control character shown, never sent to the terminal.
    assert "you> @Explore look \\e[31maround" in lines and "\x1b" not in chat.stdout
    assert not [line for line in lines if line.startswith("you> ") and "[" in line[5:9]]


def test_a_failed_turn_shows_no_answer(tmp_path: Path, model_server: ModelServer) -> None:
    work = _project(tmp_path)
    model_server.add(Reply(text="the first answer"), Reply(status=400, error_message="nope"))
    env = cli_env(work, model_server)
    chat = _piped_chat(work, env, "hello\nagain\n/usage\n/quit\n", "--model", "openai:m")
    assert chat.returncode == 0, chat.stderr
    assert chat.stdout.count("the first answer") == 1, chat.stdout
    # /usage names the model in full (the server's answer names it "m")
    assert re.search(r"^main +main +openai:m +2 ", chat.stdout, re.M), chat.stdout
    assert "error: " in chat.stdout and "nope" in chat.stdout
    (run_dir,) = [p for p in (work / ".agentcell" / "runs").iterdir() if p.is_dir()]
    turns = json.loads((run_dir / "summary.json").read_text())["turns"]
    assert [t["final_text"] for t in turns] == ["the first answer", ""]
    # Its timeline: a row of turns (the failed one marked), a dashed line on each lane
    # where the second began, the main lane labelled once, the last axis label inside.
    page = write_timeline(work, run_dir.name, None).read_text()
    marks = re.findall(r'<span class="turn [^"]*"[^>]*>([^<]*)</span>', page)
    assert marks == ["1", "✕2 error"], marks
    assert page.count('<span class="edge"') == 1  # one lane (main), one boundary
    assert re.search(r'data-agent="main"><div class="label"[^>]*>main</div>', page), page
    assert re.search(r'<span class="last" style="left:100%">', page)
