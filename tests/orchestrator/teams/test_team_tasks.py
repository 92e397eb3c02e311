"""The team's shared task list (team_tasks; Claude Code's TaskCreate, TaskUpdate, TaskList
and TaskGet): the board's rules without processes, then a real sub-agent granted
TaskCreate and TaskUpdate in its agent file, with real TaskCreated and TaskCompleted hook
commands that read Claude Code's payload and refuse with exit 2."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import msgspec
import pytest
from agentcell.orchestrator import Orchestrator, Settings
from agentcell.orchestrator.definitions._loader import parse_agent_text
from agentcell.orchestrator.teams._board import TaskBoard, TeamTasksArgs
from conftest import SpawnRecorder
from http_script import _system, _tool_results
from model_servers import Call, ModelServer, Reply


class _Facts:
    def __init__(self) -> None:
        self.facts: list[tuple[str, dict[str, Any]]] = []

    def fact(self, what: str, **fields: Any) -> None:
        self.facts.append((what, fields))


def _args(**fields: Any) -> TeamTasksArgs:
    return msgspec.json.decode(json.dumps(fields), type=TeamTasksArgs)


async def _allow(event: str, payload: dict[str, Any]) -> tuple[bool, str]:
    return False, ""


async def test_the_board_creates_updates_lists_and_journals_every_change() -> None:
    journal = _Facts()
    board = TaskBoard(journal)  # type: ignore[arg-type]
    assert await board.act(_args(action="list"), "lead", _allow) == ("no tasks yet", False)
    assert await board.act(_args(action="create", subject="api"), "lead", _allow) == (
        "created task #1: api",
        False,
    )
    created = await board.act(
        _args(action="create", subject="ui", description="the page", blockedBy=["1"]),
        "lead",
        _allow,
    )
    assert created == ("created task #2: ui", False)
    update = _args(
        action="update", taskId="1", status="in_progress", owner="dev", activeForm="coding"
    )
    assert await board.act(update, "dev", _allow) == (
        "updated #1 [in_progress] api (owner: dev) — coding",
        False,
    )
    listed, _ = await board.act(_args(action="list"), "dev", _allow)
    assert listed.splitlines() == [
        "#1 [in_progress] api (owner: dev) — coding",
        "#2 [pending] ui (blocked by #1)",
    ]
    got, _ = await board.act(_args(action="get", taskId="#2"), "dev", _allow)
    assert got == "#2 [pending] ui (blocked by #1)\nthe page"
    assert [f["task"]["id"] for what, f in journal.facts if what == "team_task"] == ["1", "2", "1"]
    assert journal.facts[-1][1]["task"]["status"] == "in_progress"


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"action": "create"}, "team_tasks create needs a subject"),
        ({"action": "get", "taskId": "9"}, "unknown task id '9' (tasks: #1)"),
        ({"action": "update", "taskId": "1", "blockedBy": ["1"]}, "blockedBy names no other"),
        ({"action": "create", "subject": "x", "blockedBy": ["7"]}, "blockedBy names no other"),
    ],
)
async def test_a_bad_request_is_one_error_and_changes_nothing(
    fields: dict[str, Any], expected: str
) -> None:
    board = TaskBoard()
    await board.act(_args(action="create", subject="one"), "lead", _allow)
    text, error = await board.act(_args(**fields), "lead", _allow)
    assert error and text.startswith(expected), text
    assert [t.subject for t in board.tasks.values()] == ["one"]
    assert board.tasks["1"].blocked_by == []


def test_claude_codes_task_and_team_tools_load_without_a_warning() -> None:
    text = (
        "---\nname: mate\ndescription: m\n"
        "tools: Read, TaskCreate, TaskUpdate, TaskList, TaskGet, SendMessage, TeamCreate, "
        "TeamDelete\n---\nM\n"
    )
    result = parse_agent_text(text, path="mate.md")
    (definition,) = result.definitions
    assert definition.tools == ["read_file", "team_tasks", "send_message", "team_lifecycle"]
    assert [d.level for d in result.diagnostics] == ["info"]
    assert (
        "TeamCreate and TeamDelete are accepted and grant nothing" in result.diagnostics[0].message
    )


HOOK = """\
import json, sys
event = json.load(sys.stdin)
with open(sys.argv[1], "a") as log:
    log.write(json.dumps(event) + "\\n")
if "forbidden" in event["task_subject"]:
    print("no forbidden tasks", file=sys.stderr)
    sys.exit(2)
"""


def _mate_script(body: dict[str, Any], api: str) -> Reply:
    """The main agent starts "mate"; mate creates a task, tries a forbidden one, then
    completes the first and lists the board."""
    results = _tool_results(body)
    if "main agent of agentcell" in _system(body):
        if results:
            return Reply(text="main done")
        return Reply(
            tool_calls=[Call("task", {"subagent_type": "mate", "prompt": "plan", "name": "mate"})]
        )
    steps = [
        {"action": "create", "subject": "write the parser", "description": "in parse.py"},
        {"action": "create", "subject": "a forbidden task"},
        {"action": "update", "taskId": "1", "status": "completed"},
        {"action": "list"},
    ]
    if len(results) < len(steps):
        return Reply(tool_calls=[Call("team_tasks", steps[len(results)])])
    return Reply(text="\n=====\n".join(results))


async def test_a_sub_agent_keeps_the_shared_list_under_real_task_hooks(
    spawned: SpawnRecorder,
    tmp_path: Path,
    openai_served: ModelServer,
) -> None:
    work, hooks_dir = tmp_path / "work", tmp_path / "hooks"
    (work / ".agentcell" / "agents").mkdir(parents=True)
    hooks_dir.mkdir()
    (work / ".agentcell" / "agents" / "mate.md").write_text(
        "---\nname: mate\ndescription: m\ntools: TaskCreate, TaskUpdate, TaskList\n---\nM\n"
    )
    script, log = hooks_dir / "task_hook.py", hooks_dir / "calls.jsonl"
    script.write_text(HOOK)
    command = f"{sys.executable} {script} {log}"
    hooks = {event: [{"command": command}] for event in ("TaskCreated", "TaskCompleted")}
    openai_served.responder = _mate_script
    orch = Orchestrator(
        settings=Settings(
            model="openai:m", approval="allow", max_workers=1, warm_spares=0, hooks=hooks
        ),
        workdir=work,
        record=False,
    )
    async with orch:
        report = await asyncio.wait_for(orch.run("go"), 60)
    assert report.final_text == "main done"
    (mate,) = report.subagents
    created, forbidden, completed, listed = mate.text.split("\n=====\n")
    assert created == "created task #1: write the parser"
    assert forbidden.endswith("\nnot created: a TaskCreated hook refused it: no forbidden tasks")
    assert completed == "updated #1 [completed] write the parser"
    assert listed == "#1 [completed] write the parser"
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert [c["hook_event_name"] for c in calls] == ["TaskCreated", "TaskCreated", "TaskCompleted"]
    first = calls[0]
    assert {k: first[k] for k in ("task_id", "task_subject", "task_description")} == {
        "task_id": "1",
        "task_subject": "write the parser",
        "task_description": "in parse.py",
    }
    assert first["teammate_name"] == "mate" and first["agent_type"] == "mate"
    assert first["agent_id"] == mate.agent_id
    assert calls[2]["task_id"] == "1" and calls[2]["task_subject"] == "write the parser"
