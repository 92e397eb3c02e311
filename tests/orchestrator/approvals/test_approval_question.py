"""The approval question cannot be painted, and "always" widens nothing.

The question is built by the parent from what it knows (the pipe's agent, the tools it
gave that agent), one field a line with control characters written out. The attacks come
from real sub-agent processes: a child that sends crafted approval requests over its own
signed pipe (tests/support/approval_screen_script.py, on a pseudo-terminal read through pyte), and
real bash calls from scripted models for the scope of "always".
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import terminal_util
from agentcell.orchestrator import AgentDefinition, Orchestrator, Settings
from agentcell.orchestrator.approvals._channel import TerminalPrompt
from agentcell.protocol import RunStatus
from cli_runner import cli_env, project
from conftest import SpawnRecorder
from model_servers import Call, ModelServer, Reply
from places import SUPPORT
from terminal_util import Screen

__all__ = ["project"]  # the fixture (tests/support/cli_runner.py)

SCRIPT = SUPPORT / "approval_screen_script.py"


def test_a_painted_reason_or_tool_name_cannot_hide_the_real_command(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(terminal_util, "AGENTCELL", sys.executable)  # run the script
    env = cli_env(project, PYTHONPATH=str(SCRIPT.parent))
    term = Screen([str(SCRIPT), str(project)], project, env)
    try:
        screen = term.expect("allow? [y]es / [n]o / [a]lways for bash:")
        lines = screen.splitlines()
        [asked] = [i for i, line in enumerate(lines) if line.endswith("wants to run bash:")]
        assert lines[asked] == "hostile (a1) wants to run bash:"
        assert lines[asked + 1] == "    rm -rf ~/project"  # the real command, next line
        # The reason is one visible line below it; no line of the screen begins with the
        # fake question, nor shows the fake command as if it were one.
        [why] = [line for line in lines if line.startswith("  why it asks:")]
        assert why.startswith("  why it asks: " + "\\n" * 30 + "main agent wants")
        assert not any(line.startswith("main agent wants") for line in lines)
        assert "    git status" not in lines
        term.send("n\n")
        screen = term.expect("RESULT completed")
        # The tool name with newlines never reached the screen: refused, not asked.
        assert screen.count("allow? [y]es") == 1, screen
        assert "first=False second=False" in screen
        assert "names no valid tool" in screen
        assert term.close() == 0
    finally:
        term.kill()


# -- "always" is the asking agent's ------------------------------------------------------


def _outputs(body: dict[str, Any]) -> list[str]:
    return [m["content"] for m in body["messages"] if m["role"] == "tool"]


def three_askers(body: dict[str, Any], api: str) -> Reply:
    """The main agent starts A, A again, then B, then runs bash itself; each sub-agent
    runs one bash command."""
    outputs = _outputs(body)
    system = body["messages"][0]["content"]
    if not system.startswith("main agent"):
        prompt = next(m["content"] for m in body["messages"] if m["role"] == "user")
        if not outputs:
            return Reply(tool_calls=[Call("bash", {"command": f"echo {prompt}-ran"})])
        return Reply(text=outputs[0])
    steps = [
        Call("task", {"subagent_type": "alpha", "prompt": "one"}),
        Call("task", {"subagent_type": "alpha", "prompt": "two"}),
        Call("task", {"subagent_type": "beta", "prompt": "three"}),
        Call("bash", {"command": "echo main-ran"}),
    ]
    if len(outputs) < len(steps):
        return Reply(tool_calls=[steps[len(outputs)]])
    return Reply(text="\n#####\n".join(outputs))


@pytest.fixture
def served(model_server: ModelServer, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModelServer]:
    monkeypatch.setenv("OPENAI_BASE_URL", model_server.openai_base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-approval-test-key")
    yield model_server


def _agent(name: str) -> AgentDefinition:
    return AgentDefinition(
        name=name,
        description=name,
        system_prompt=f"You are {name}.",
        tools=["bash"],
        model="openai:test",
        source="test",
    )


async def test_always_for_one_agent_type_allows_neither_another_nor_the_main_agent(
    spawned: SpawnRecorder, tmp_path: Path, served: ModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    served.responder = three_askers
    import agentcell.orchestrator._main_agent as main_agent_module

    monkeypatch.setattr(main_agent_module, "MAIN_SYSTEM_PROMPT", "main agent in {workdir}")
    asked: list[str] = []

    async def answer(question: str) -> str:
        asked.append(question)
        return "a" if len(asked) == 1 else "y"  # "always" for the first asker only

    prompt = TerminalPrompt(read_line=answer)
    orch = Orchestrator(
        settings=Settings(model="openai:test", max_workers=2, warm_spares=0),
        workdir=tmp_path,
        agents=[_agent("alpha"), _agent("beta")],
        load_agent_files=False,
        record=False,
        approval=prompt,
    )
    async with orch:
        report = await asyncio.wait_for(orch.run("go"), 90)
    assert report.status is RunStatus.COMPLETED, report
    assert all(s.status is RunStatus.COMPLETED for s in report.subagents)
    outputs = report.final_text.split("\n#####\n")
    assert [o for o in outputs if "-ran" in o] and "main-ran" in outputs[-1]
    whos = [next(line for line in q.splitlines() if "wants to run" in line) for q in asked]
    # alpha asked once (its second run was allowed by "always"); beta and the main agent
    # were each asked: alpha's "always" widened neither.
    assert [w.split(" (")[0].split(" wants")[0] for w in whos] == [
        "alpha",
        "beta",
        "main agent",
    ], whos
    assert "[a]lways allows bash to alpha sub-agents only" in asked[0]
    assert "[a]lways allows bash to the main agent only" in asked[2]


def test_only_a_tool_the_parent_gave_that_agent_can_be_asked_about() -> None:
    from agentcell.orchestrator.approvals._question import refused_tool
    from agentcell.protocol import AgentSpec, McpServer, RemoteTool

    spec = AgentSpec(
        agent_id="a1",
        agent_type="alpha",
        prompt="p",
        tools=["bash"],
        remote_tools=[RemoteTool(name="task", description="", parameters={})],
        mcp_servers=[McpServer(name="files", command="server")],
    )
    for given in ("bash", "task", "mcp__files__read"):
        assert refused_tool(given, spec) == "", given
    for other in ("read_file", "mcp__other__read", "mcp__files", "bash\n", "bash ", "", "b\x1b"):
        assert refused_tool(other, spec), repr(other)
