"""What reaches a model besides the task: instruction files, effort, the initial prompt,
and definitions given with ``--agents`` — checked on the wire of the local model server,
from real children."""

from __future__ import annotations

import asyncio
import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from agentcell.orchestrator import AgentDefinition, Orchestrator, Settings
from agentcell.orchestrator.cli._display import ProgressView, agent_style
from agentcell.orchestrator.cli._main import cli
from agentcell.orchestrator.definitions._inline import definitions_from_json
from agentcell.orchestrator.delegation._events import SubAgentStarted
from agentcell.protocol import RunStatus
from click.testing import CliRunner
from conftest import SpawnRecorder
from model_servers import Call, ModelServer, Reply
from rich.console import Console


@pytest.fixture
def served(model_server: ModelServer, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModelServer]:
    monkeypatch.setenv("OPENAI_BASE_URL", model_server.openai_base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-prompts-test-key")
    yield model_server


def system_of(body: dict[str, Any]) -> str:
    return next((m["content"] for m in body["messages"] if m["role"] == "system"), "")


async def test_instruction_files_reach_the_main_agent_and_general_agents_not_explore(
    spawned: SpawnRecorder, tmp_path: Path, served: ModelServer
) -> None:
    work, home = tmp_path / "work", tmp_path / "home"
    (home / ".claude").mkdir(parents=True)
    work.mkdir()
    (work / "AGENTS.md").write_text("PROJECT-RULE: run the tests before you answer.\n")
    (home / ".claude" / "CLAUDE.md").write_text("USER-RULE: answer in English.\n")

    def respond(body: dict[str, Any], api: str) -> Reply:
        main = system_of(body).startswith("You are the main agent")
        if main and not any(m["role"] == "tool" for m in body["messages"]):
            return Reply(
                tool_calls=[
                    Call("task", {"subagent_type": "general-purpose", "prompt": "one"}),
                    Call("task", {"subagent_type": "Explore", "prompt": "two"}),
                ]
            )
        return Reply(text="ok")

    served.responder = respond
    orch = Orchestrator(
        settings=Settings(model="openai:test", approval="allow", max_workers=2, warm_spares=0),
        workdir=work,
        home=home,
        record=False,
    )
    async with orch:
        report = await asyncio.wait_for(orch.run("go"), 60)
    assert report.status is RunStatus.COMPLETED, report
    systems = {
        "main" if s.startswith("You are the main agent") else s: s
        for s in (system_of(r.body) for r in served.requests)
    }
    main = systems.pop("main")
    assert "PROJECT-RULE" in main and "USER-RULE" in main
    assert main.index("USER-RULE") < main.index("PROJECT-RULE")  # the user's first
    [general] = [s for s in systems if "PROJECT-RULE" in s]
    assert "USER-RULE" in general and f"Instructions from {work / 'AGENTS.md'}" in general
    [explore] = [s for s in systems if "PROJECT-RULE" not in s]
    assert "USER-RULE" not in explore


async def test_effort_is_openais_reasoning_effort_and_the_initial_prompt_comes_first(
    spawned: SpawnRecorder, tmp_path: Path, served: ModelServer
) -> None:
    served.responder = lambda body, api: Reply(text="ok")
    thinker = AgentDefinition(
        name="thinker",
        description="thinks",
        tools=[],
        model="openai:test",
        effort="max",
        initial_prompt="Read the brief twice.",
    )
    orch = Orchestrator(
        settings=Settings(model="openai:test", approval="allow", warm_spares=0),
        workdir=tmp_path,
        agents=[thinker],
        load_agent_files=False,
        record=False,
    )
    async with orch:
        result = await asyncio.wait_for(orch.delegate("thinker", "solve it"), 60)
    assert result.status is RunStatus.COMPLETED, result
    [request] = served.requests
    assert request.body["reasoning_effort"] == "high"  # OpenAI's highest
    users = [m["content"] for m in request.body["messages"] if m["role"] == "user"]
    assert users == ["Read the brief twice.\n\nsolve it"]


def test_agents_json_takes_the_agent_sdk_shape_and_names_each_problem() -> None:
    [reviewer] = definitions_from_json(
        json.dumps(
            {
                "reviewer": {
                    "description": "Reviews diffs",
                    "prompt": "You review.",
                    "tools": ["Read", "Grep"],
                    "model": "sonnet",
                    "maxTurns": 3,
                }
            }
        )
    )
    assert (reviewer.name, reviewer.system_prompt, reviewer.tools) == (
        "reviewer",
        "You review.",
        ["read_file", "grep"],
    )
    assert (reviewer.model, reviewer.max_turns, reviewer.source) == ("sonnet", 3, "--agents")
    with pytest.raises(ValueError, match="not valid JSON"):
        definitions_from_json("{nope")
    with pytest.raises(ValueError, match="--agents bad: maxTurns"):
        definitions_from_json('{"bad": {"description": "x", "maxTurns": "ten"}}')


def test_agents_flag_registers_temporary_definitions_for_a_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / ".config"))
    from agentcell.orchestrator.cli import _run_cmd

    registered: list[list[str]] = []

    class Recording(Orchestrator):
        def __init__(self, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            registered.append(self.registry.names())

    monkeypatch.setattr(_run_cmd, "Orchestrator", Recording)
    agents = json.dumps({"scout": {"description": "Scouts ahead", "prompt": "You scout."}})
    runner = CliRunner()
    bad = runner.invoke(cli, ["run", "hi", "--model", "scripted:demo", "--agents", "[1]"])
    assert bad.exit_code == 2 and "--agents: give a JSON object" in bad.output
    ok = runner.invoke(
        cli,
        ["run", "hi", "--model", "scripted:demo", "--agents", agents, "--workdir", str(tmp_path)]
        + ["--json", "--approve", "allow"],
    )
    assert ok.exit_code == 0, ok.output
    assert json.loads(ok.stdout)["status"] == "completed"
    assert registered == [["general-purpose", "Explore", "Plan", "scout"]]


def test_a_definitions_colour_styles_its_rows_in_the_live_table() -> None:
    assert agent_style("orange") == "dark_orange"
    assert agent_style("not-a-colour") == "" and agent_style("") == ""
    view = ProgressView(Console(file=io.StringIO(), force_terminal=True), live=False)
    view.on_event(
        SubAgentStarted(
            agent_id="a1",
            agent_type="scout",
            description="",
            background=False,
            depth=1,
            parent_id="main",
            color="cyan",
        )
    )
    assert view.rows["a1"].style == "cyan"


def test_runs_resume_continues_a_recorded_main_session(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agentcell.orchestrator.records._store import list_runs, load_run

    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / ".config"))
    runner = CliRunner()
    common = ["--model", "scripted:demo", "--workdir", str(tmp_path), "--approve", "allow"]
    first = runner.invoke(cli, ["run", "first question", *common, "--json"])
    assert first.exit_code == 0, first.output
    [run] = list_runs(tmp_path)
    again = runner.invoke(cli, ["runs", "resume", run["run_id"], "second question", *common])
    assert again.exit_code == 0, again.output
    newest = list_runs(tmp_path)[0]
    assert newest["run_id"] != run["run_id"]
    _, transcripts = load_run(tmp_path, newest["run_id"])
    [*_, last] = [e for e in transcripts["main"] if e["kind"] == "messages"]
    users = [m["content"] for m in last["messages"] if m["role"] == "user"]
    assert users[0] == "first question" and users[-1] == "second question"
    missing = runner.invoke(cli, ["runs", "resume", "nope", "x", *common])
    assert missing.exit_code == 2 and "no run 'nope'" in missing.output
