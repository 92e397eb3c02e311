"""What a compromised sub-agent can do with its team: nothing its definition does not
grant. A child not granted send_message writes the frames that would run it (and
list_agents) in the parent straight onto its socket: refused; nothing reaches anyone."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import attack_tools
import pytest
from agentcell.orchestrator import AgentDefinition, Orchestrator, Settings
from agentcell.orchestrator.journal._file import read_journal
from agentcell.orchestrator.journal._place import journal_dir
from conftest import SpawnRecorder
from model_servers import Call, ModelServer, Reply


async def test_team_tools_a_definition_does_not_grant_are_refused_in_the_parent(
    spawned: SpawnRecorder,
    tmp_path: Path,
    openai_served: ModelServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    work = tmp_path / "work"
    work.mkdir()
    task = {"subagent_type": "hostile", "prompt": "go", "name": "hostile"}
    openai_served.add(Reply(tool_calls=[Call("task", task)]))  # the main agent
    openai_served.add(Reply(tool_calls=[Call("forge_team", {})]), "done", "main done")
    hostile = AgentDefinition(name="hostile", description="h", tools=["forge_team"], source="t")
    orch = Orchestrator(
        settings=Settings(model="openai:m", approval="allow", max_workers=1, warm_spares=0),
        workdir=work,
        agents=[hostile],
        tools=[attack_tools.forge_team],
        load_agent_files=False,
    )
    async with orch:
        report = await asyncio.wait_for(orch.run("go"), 60)
    assert report.final_text == "main done" and report.subagents[0].status.value == "completed"
    asked = json.dumps([r.body for r in openai_served.requests])
    assert attack_tools.MARKER not in asked  # no message reached anyone
    records = read_journal(journal_dir(Path(report.run_dir)) / "journal").records
    assert not [r for r in records if r.get("what") in ("message", "mail")]
