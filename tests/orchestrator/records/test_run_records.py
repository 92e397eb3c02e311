"""Every call is recorded: ``delegate()`` and ``map()`` write run directories like
``run()`` does, and ``agentcell runs list`` shows them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agentcell.orchestrator import AgentDefinition, Orchestrator, Settings
from agentcell.orchestrator.cli._main import cli as cli_main
from agentcell.orchestrator.cli._resumed import pin_run_dir
from agentcell.protocol import RunStatus
from click.testing import CliRunner
from conftest import SpawnRecorder

from agentcell.testing import FunctionModel, last_user_text


def chatty_model() -> FunctionModel:
    def fn(messages: list[Any], tools: list[Any]) -> str:
        prompt = last_user_text(messages)
        print(f"stdout of the child working on {prompt}")  # captured, not on our terminal
        return f"answer to {prompt}"

    return FunctionModel(fn, name="function:chatty")


def orchestrator(tmp_path: Path) -> Orchestrator:
    return Orchestrator(
        model="function:chatty",
        settings=Settings(approval="allow", max_workers=4, warm_spares=1),
        workdir=tmp_path,
        agents=[
            AgentDefinition(name="chatty", description="talks", tools=[], model="function:chatty")
        ],
        models={"function:chatty": chatty_model()},
        load_agent_files=False,
    )


def run_dirs(workdir: Path) -> list[Path]:
    root = workdir / ".agentcell" / "runs"
    return sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []


async def test_delegate_and_map_each_write_a_run_record(
    spawned: SpawnRecorder, tmp_path: Path
) -> None:
    async with orchestrator(tmp_path) as orch:
        one = await orch.delegate("chatty", "the question")
        many = await orch.map("chatty", ["a", "b", "c"], concurrency=2)
    assert one.ok and all(r.ok for r in many)

    delegated, mapped = run_dirs(tmp_path)  # one per call, the map's items together
    summary = json.loads((delegated / "summary.json").read_text())
    assert summary["kind"] == "delegate" and summary["status"] == "completed"
    assert summary["final_text"] == "answer to the question"
    assert [s["agent_id"] for s in summary["subagents"]] == [one.agent_id]
    assert summary["usage"]["input_tokens"] == one.usage.input_tokens > 0
    transcript = (delegated / f"{one.agent_id}.jsonl").read_text().splitlines()
    assert json.loads(transcript[0])["kind"] == "start"  # written by the child itself
    output = (delegated / f"{one.agent_id}.stderr.log").read_text()
    assert "stdout of the child working on the question" in output

    summary = json.loads((mapped / "summary.json").read_text())
    assert summary["kind"] == "map" and summary["status"] == "completed"
    assert sorted(s["agent_id"] for s in summary["subagents"]) == sorted(r.agent_id for r in many)
    assert summary["usage"]["input_tokens"] == sum(r.usage.input_tokens for r in many)
    for result in many:
        assert (mapped / f"{result.agent_id}.jsonl").is_file()
        log = (mapped / f"{result.agent_id}.stderr.log").read_text()
        assert f"working on {result.text.removeprefix('answer to ')}" in log

    listed = CliRunner().invoke(cli_main, ["runs", "list", "--json", "--workdir", str(tmp_path)])
    assert listed.exit_code == 0, listed.output
    kinds = {run["run_id"]: run.get("kind") for run in json.loads(listed.output)}
    assert kinds == {delegated.name: "delegate", mapped.name: "map"}


async def test_a_failed_map_item_makes_the_record_partial(
    spawned: SpawnRecorder, tmp_path: Path
) -> None:
    async with orchestrator(tmp_path) as orch:
        results = await orch.map("no-such-agent", ["x", "y"])
    assert all(r.status is RunStatus.ERROR for r in results)
    (record,) = run_dirs(tmp_path)
    summary = json.loads((record / "summary.json").read_text())
    assert summary["status"] == "partial" and summary["error"] == "2 of 2 failed"


async def test_calls_leave_a_summary_kept_by_their_caller_alone(
    spawned: SpawnRecorder, tmp_path: Path
) -> None:
    # A chat session keeps its run folder's summary.json itself: its turns' run,
    # delegate and map calls record their transcripts there but never replace it.
    run_dir = tmp_path / "session"
    run_dir.mkdir()
    kept = '{"kind": "chat", "turns": ["all of them"]}\n'
    (run_dir / "summary.json").write_text(kept)
    orch = orchestrator(tmp_path)
    pin_run_dir(orch, run_dir)
    orch.call_summaries = False
    async with orch:
        report = await orch.run("main turn")
        one = await orch.delegate("chatty", "a direct one")
        many = await orch.map("chatty", ["x", "y"])
    assert report.ok and one.ok and all(r.ok for r in many)
    assert (run_dir / "summary.json").read_text() == kept
    assert (run_dir / "main.jsonl").is_file() and (run_dir / f"{one.agent_id}.jsonl").is_file()
