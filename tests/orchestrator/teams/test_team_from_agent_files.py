"""A team as Claude Code users write one: the agent-teams plugin's own files
(``../shared/agents-corpus``, wshobson/agents) copied into a project's ``.claude/agents/``
load without a warning, and a team lead started from them runs two teammates against a
scripted model: it fills the shared task list, each teammate (the second named with a
suffix) takes its task, reports to the lead by message and completes it."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from agentcell.orchestrator import Orchestrator, Settings
from agentcell.orchestrator.definitions._loader import load_agent_file
from conftest import SpawnRecorder
from http_script import _first_user, _system, _tool_results
from model_servers import Call, ModelServer, Reply
from places import SHARED

TEAM_FILES = SHARED / "agents-corpus" / "wshobson__agents" / "plugins" / "agent-teams" / "agents"


@pytest.fixture
def team_files() -> Path:
    if not (TEAM_FILES / "team-lead.md").is_file():
        pytest.skip(f"agent corpus not found at {TEAM_FILES} (it is not part of the repository)")
    return TEAM_FILES


def _task(number: int) -> dict[str, Any]:
    return {"subagent_type": "team-implementer", "prompt": f"task {number}", "name": "impl"}


def _lead(body: dict[str, Any]) -> Reply:
    results = _tool_results(body)
    if not results:
        subjects = ("parser", "printer")
        return Reply(
            tool_calls=[Call("team_tasks", {"action": "create", "subject": s}) for s in subjects]
        )
    if len(results) == 2:
        return Reply(tool_calls=[Call("task", _task(1)), Call("task", _task(2))])
    if len(results) == 4:
        return Reply(tool_calls=[Call("team_tasks", {"action": "list"})])
    return Reply(text=results[-1])


def _implementer(body: dict[str, Any]) -> Reply:
    results = _tool_results(body)
    number = _first_user(body).split()[-1]
    if not results:
        update = {"action": "update", "taskId": number, "status": "in_progress"}
        return Reply(tool_calls=[Call("team_tasks", update)])
    if len(results) == 1:
        done = {"action": "update", "taskId": number, "status": "completed"}
        message = {"to": "lead", "message": f"task {number} is done"}
        return Reply(tool_calls=[Call("send_message", message), Call("team_tasks", done)])
    return Reply(text=f"finished task {number}")


class _Script:
    def __init__(self) -> None:
        self.lead_bodies: list[dict[str, Any]] = []

    def __call__(self, body: dict[str, Any], api: str) -> Reply:
        system = _system(body)
        if "main agent of agentcell" in system:
            if _tool_results(body):
                return Reply(text="main done")
            lead = {"subagent_type": "team-lead", "prompt": "build it", "name": "lead"}
            return Reply(tool_calls=[Call("task", lead)])
        if "expert team orchestrator" in system:
            self.lead_bodies.append(body)
            return _lead(body)
        return _implementer(body)


async def test_a_team_lead_runs_two_teammates_from_the_plugins_own_files(
    spawned: SpawnRecorder, tmp_path: Path, openai_served: ModelServer, team_files: Path
) -> None:
    work = tmp_path / "work"
    agents = work / ".claude" / "agents"
    agents.mkdir(parents=True)
    for name in ("team-lead.md", "team-implementer.md"):
        shutil.copy(team_files / name, agents / name)
        warnings = [d for d in load_agent_file(agents / name).diagnostics if d.level != "info"]
        assert warnings == [], warnings
    script = openai_served.responder = _Script()
    aliases = {"fable": "openai:m", "opus": "openai:m"}  # the files' models, served here
    orch = Orchestrator(
        settings=Settings(
            model="openai:m",
            approval="allow",
            max_workers=3,
            warm_spares=0,
            max_depth=2,
            aliases=aliases,
        ),
        workdir=work,
        record=False,
    )
    async with orch:
        report = await asyncio.wait_for(orch.run("build the feature"), 120)
    assert report.final_text == "main done", report
    by_name = {sub.name: sub for sub in report.subagents}
    assert set(by_name) == {"lead", "impl", "impl-2"}  # the second "impl" got a suffix
    assert by_name["lead"].text == "#1 [completed] parser\n#2 [completed] printer"
    # Both reports reached the lead, by message, before its next model request.
    last = json.dumps(script.lead_bodies[-2]["messages"])
    for teammate, number in (("impl", 1), ("impl-2", 2)):
        agent_id = by_name[teammate].agent_id
        assert f"a message from {teammate} ({agent_id}), a team-implementer" in last
        assert f"task {number} is done" in last


def test_every_team_file_of_the_corpus_loads_without_a_warning(team_files: Path) -> None:
    """Both team plugins of the corpus (agent-teams, and izteam's team): their
    SendMessage, Task* and Team* tools map, fable is an alias, and Claude Code's LSP (which
    agentcell lacks) is an info, not a warning."""
    izteam = SHARED / "agents-corpus" / "izzzzzi__izteam" / "plugins" / "team" / "agents"
    files = sorted([*team_files.glob("*.md"), *izteam.glob("*.md")])
    assert len(files) >= 12
    for path in files:
        result = load_agent_file(path)
        assert result.definitions, path
        noisy = [d.message for d in result.diagnostics if d.level != "info"]
        assert noisy == [], (path.name, noisy)
