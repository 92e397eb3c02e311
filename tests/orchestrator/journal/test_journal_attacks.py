"""What a compromised sub-agent (a real child process running attack_tools) can put in
its run's journal: only its own signed word on its own tool calls, never a frame a
socket thief forged."""

from __future__ import annotations

import asyncio
from pathlib import Path

import attack_tools
import pytest
from agentcell.orchestrator import AgentDefinition, Orchestrator, Settings
from agentcell.orchestrator.journal._file import read_journal
from agentcell.orchestrator.journal._place import journal_dir
from agentcell.protocol import RunStatus
from conftest import SpawnRecorder
from model_servers import Call, ModelServer, Reply


async def test_tool_records_without_the_runs_signature_never_reach_the_journal(
    spawned: SpawnRecorder,
    tmp_path: Path,
    openai_served: ModelServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    work = tmp_path / "work"
    work.mkdir()
    openai_served.add(Reply(tool_calls=[Call("forge_records", {}, id="real-call")]), "done")
    hostile = AgentDefinition(
        name="hostile", description="h", tools=["forge_records"], model="openai:m", source="t"
    )
    run_dir = tmp_path / "run"
    orch = Orchestrator(
        settings=Settings(model="openai:m", approval="allow", max_workers=1, warm_spares=0),
        workdir=work,
        agents=[hostile],
        tools=[attack_tools.forge_records],
        load_agent_files=False,
        run_dir=run_dir,
    )
    async with orch:
        result = await asyncio.wait_for(orch.delegate("hostile", "go"), 60)
    assert result.status is RunStatus.COMPLETED, result.error
    records = read_journal(journal_dir(run_dir) / "journal").records
    tools = [r for r in records if r.get("what") == "tool"]
    # The child's own record of its one call: its start, then its whole result.
    assert [(r["call"], bool(r.get("finished"))) for r in tools] == [
        ("real-call", False),
        ("real-call", True),
    ]
    assert tools[1]["content"] == "written"
    assert attack_tools.MARKER.encode() not in (journal_dir(run_dir) / "journal").read_bytes()
