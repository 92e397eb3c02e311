"""Agents whose model cannot be reached (issue 44, item 7): ``model: sonnet`` in a real
agent file from the corpus, no ``ANTHROPIC_API_KEY``, the main agent on a scripted
OpenAI-compatible server. Before the run, one line names the agent and the fix, and
``task`` does not list it; a call that names it anyway is refused with that line and the
run exits 3. The main agent's own key missing exits 3 too."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from agentcell.orchestrator import AgentDefinition, Settings
from agentcell.orchestrator._reach import Reach, survey
from agentcell.orchestrator.delegation._results import SubAgentResult
from agentcell.protocol import RunStatus
from cli_runner import agentcell, cli_env, project
from http_script import _system, _tool_results
from model_servers import Call, ModelServer, Reply

__all__ = ["project"]  # the fixture

CORPUS = Path("/work/shared/agents-corpus/Yeachan-Heo__oh-my-claudecode/agents/verifier.md")
VERIFIER = """\
---
name: verifier
description: Verification strategy, evidence-based completion checks, test adequacy
model: sonnet
level: 3
disallowedTools: Write, Edit
---

You are Verifier. Ensure completion claims are backed by fresh evidence.
"""
LINE = (
    "left out of this run (model sonnet cannot be reached): verifier; sonnet is "
    "anthropic:claude-sonnet-4-5: ANTHROPIC_API_KEY is not set: export it, or pass "
    "--model-alias sonnet=openai:gpt-test"
)


def _listed(body: dict[str, Any]) -> list[str]:
    (task,) = [t["function"] for t in body["tools"] if t["function"]["name"] == "task"]
    return list(task["parameters"]["properties"]["subagent_type"]["enum"])


def _calls_verifier(body: dict[str, Any], api: str) -> Reply:
    if "main agent of agentcell" not in _system(body) or _tool_results(body):
        return Reply(text="done")
    return Reply(tool_calls=[Call("task", {"subagent_type": "verifier", "prompt": "check"})])


def _with_verifier(project: Path) -> None:
    agents = project / ".claude" / "agents"
    agents.mkdir(parents=True)
    if CORPUS.is_file():  # the real file; its head written out below where it is absent
        shutil.copy(CORPUS, agents / "verifier.md")
    else:
        (agents / "verifier.md").write_text(VERIFIER)


def test_an_agent_whose_model_has_no_key_is_left_out_named_once_and_exits_3(
    project: Path, model_server: ModelServer
) -> None:
    _with_verifier(project)
    model_server.responder = _calls_verifier
    env = cli_env(project, model_server)
    done = agentcell("run", "--model", "openai:gpt-test", "verify it", cwd=project, env=env)
    assert done.returncode == 3, done.stdout + done.stderr
    assert done.stderr.count(LINE) == 2, done.stderr  # before the run, and as its failure
    assert f"agentcell: warning: {LINE}" in done.stderr  # as the command's own lines say it
    assert "Traceback" not in done.stderr
    first = model_server.requests[0].body
    assert "verifier" not in _listed(first) and "Explore" in _listed(first)
    refused = json.dumps(model_server.requests[1].body["messages"])
    assert "verifier cannot run: left out of this run" in refused
    # Mapped by --model-alias: nothing is said, it is listed, and the run exits 0.
    model_server.requests.clear()
    model_server.responder = lambda body, api: Reply(text="done")
    mapped = agentcell(
        "run", "--model", "openai:gpt-test", "--model-alias", "sonnet=openai:gpt-test", "hi",
        cwd=project, env=env,
    )  # fmt: skip
    assert mapped.returncode == 0, mapped.stderr
    assert "left out" not in mapped.stderr
    assert "verifier" in _listed(model_server.requests[0].body)


def test_a_sub_agent_that_failed_on_an_unreachable_model_is_the_runs_failure() -> None:
    """A model override (``model: haiku`` on a task call) reaches the child: the run's end
    names it, with why."""
    reach = Reach(models={"anthropic:claude-haiku-4-5": "ANTHROPIC_API_KEY is not set"})
    failed = SubAgentResult(
        agent_id="a1", agent_type="general-purpose", status=RunStatus.ERROR, text="",
        model="anthropic:claude-haiku-4-5",
    )  # fmt: skip
    fine = SubAgentResult(agent_id="a2", agent_type="x", status=RunStatus.COMPLETED, text="ok")
    assert reach.failures([failed, fine]) == [
        "sub-agent a1 (general-purpose) failed: ANTHROPIC_API_KEY is not set"
    ]
    assert Reach().failures([failed]) == []


async def test_a_hundred_agents_on_one_unreachable_model_make_one_short_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A collection puts a hundred agents on ``sonnet``: the line before the run named all
    (3,900 characters, every run), and a call naming one was told every other name too."""
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    definitions = [
        AgentDefinition(name=f"agent-{i}", description="d", model="sonnet") for i in range(100)
    ]
    reach = Reach()
    (line,) = await survey(reach, definitions, Settings(), main_model=None, model_objects={})
    assert line.startswith(
        "left out of this run (model sonnet cannot be reached): "
        "agent-0, agent-1, agent-2, agent-3, agent-4, agent-5 and 94 more; sonnet is "
    )
    assert len(line) < 300
    assert len(reach.left_out) == 100
    assert reach.left_out["agent-42"].startswith(
        "left out of this run (model sonnet cannot be reached): agent-42; sonnet is "
    )
