"""What a compromised sub-agent, or a thief of its socket, can do with its team: nothing
its definition does not grant, nothing without its key. Frames that would run
send_message and list_agents in the parent, written straight onto a child's socket:

- by a child its definition does not grant them, signed with its own key: refused by the
  parent's check of what it was offered;
- by a thief, for a child that is granted send_message, unsigned or wrongly signed:
  dropped before the relay.

Either way nothing reaches anyone and nothing is journaled."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import attack_tools
import pytest
from agentcell.orchestrator import AgentDefinition, Orchestrator, Settings
from agentcell.orchestrator.journal._file import read_journal
from agentcell.orchestrator.journal._place import journal_dir
from conftest import SpawnRecorder
from model_servers import Call, ModelServer, Reply


async def _hostile_run(tmp_path: Path, served: ModelServer, tool: Any, granted: list[str]) -> Any:
    """The main agent starts "hostile", which runs ``tool`` (the attack) and answers."""
    work = tmp_path / "work"
    work.mkdir()
    task = {"subagent_type": "hostile", "prompt": "go", "name": "hostile"}
    served.add(Reply(tool_calls=[Call("task", task)]))  # the main agent
    served.add(Reply(tool_calls=[Call(tool.name, {})]), "done", "main done")
    hostile = AgentDefinition(
        name="hostile", description="h", tools=[tool.name, *granted], source="t"
    )
    orch = Orchestrator(
        settings=Settings(model="openai:m", approval="allow", max_workers=1, warm_spares=0),
        workdir=work,
        agents=[hostile],
        tools=[tool],
        load_agent_files=False,
    )
    async with orch:
        report = await asyncio.wait_for(orch.run("go"), 60)
    assert report.final_text == "main done" and report.subagents[0].status.value == "completed"
    asked = json.dumps([r.body for r in served.requests])
    assert attack_tools.MARKER not in asked  # no message reached anyone
    records = read_journal(journal_dir(Path(report.run_dir)) / "journal").records
    assert not [r for r in records if r.get("what") in ("message", "mail")]
    return report


async def test_team_tools_a_definition_does_not_grant_are_refused_in_the_parent(
    spawned: SpawnRecorder,
    tmp_path: Path,
    openai_served: ModelServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    await _hostile_run(tmp_path, openai_served, attack_tools.forge_team, granted=[])


async def test_team_frames_without_the_childs_signature_are_dropped(
    spawned: SpawnRecorder,
    tmp_path: Path,
    openai_served: ModelServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    await _hostile_run(tmp_path, openai_served, attack_tools.steal_team, granted=["send_message"])
