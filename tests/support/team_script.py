"""A scripted team for the local model server: the main agent starts "waiter" and
"writer" side by side; the writer messages the waiter while the waiter's bash waits for a
file the script writes only once the writer has its send_message result; the waiter then
messages the main agent. Used in-process and through the CLI (killed and resumed)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from http_script import _first_user, _system, _tool_results
from model_servers import Call, Reply

WAIT_FOR_GO = "while [ ! -f go ]; do sleep 0.05; done; echo ready"


def user_texts(body: dict[str, Any]) -> list[str]:
    return [str(m["content"]) for m in body["messages"] if m["role"] == "user"]


class TeamScript:
    """Main → "waiter" and "writer" side by side. The writer messages the waiter while
    the waiter's bash waits for a file the script writes only once the writer has its
    send_message result; the waiter then messages the main agent."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.bodies: dict[str, list[dict[str, Any]]] = {"main": [], "wait": [], "write": []}

    def __call__(self, body: dict[str, Any], api: str) -> Reply:
        results = _tool_results(body)
        if "main agent of agentcell" in _system(body):
            self.bodies["main"].append(body)
            if results:
                return Reply(text="all done")
            return Reply(
                tool_calls=[
                    Call("task", {"subagent_type": "waiter", "prompt": "wait", "name": "waiter"}),
                    Call("task", {"subagent_type": "writer", "prompt": "write", "name": "writer"}),
                ]
            )
        prompt = _first_user(body)
        self.bodies[prompt].append(body)
        if prompt == "write":
            if not results:
                message = {"to": "waiter", "message": "hello from the writer"}
                return Reply(tool_calls=[Call("send_message", message)])
            (self.work / "go").write_text("")
            return Reply(text="writer done")
        if len(results) == 0:
            return Reply(tool_calls=[Call("bash", {"command": WAIT_FOR_GO})])
        if len(results) == 1:
            message = {"to": "main", "message": "the waiter heard the writer"}
            return Reply(tool_calls=[Call("send_message", message)])
        return Reply(text="waiter done")


#: The two agent files the script's sub-agents are, for a project folder.
AGENT_FILES = {
    "waiter.md": "---\nname: waiter\ndescription: w\ntools: Bash, SendMessage\n---\nW\n",
    "writer.md": "---\nname: writer\ndescription: w\ntools: SendMessage\n---\nW\n",
}


def team_project(tmp_path: Path) -> Path:
    """A project folder (``work``, its ``home`` beside it) holding the two agent files."""
    (tmp_path / "home").mkdir()
    work = tmp_path / "work"
    agents = work / ".agentcell" / "agents"
    agents.mkdir(parents=True)
    for name, text in AGENT_FILES.items():
        (agents / name).write_text(text)
    return work


async def run_team(work: Path, agents: list[Any], *, max_workers: int = 2, **settings: Any) -> Any:
    """One ``run("go")`` of an orchestrator on ``openai:m`` (the served model) with these
    agents only, approvals allowed, no warm spares; its report."""
    from agentcell.orchestrator import Orchestrator, Settings

    work.mkdir(exist_ok=True)
    record = settings.pop("record", False)
    orch = Orchestrator(
        settings=Settings(
            model="openai:m", approval="allow", max_workers=max_workers, warm_spares=0, **settings
        ),
        workdir=work,
        agents=agents,
        load_agent_files=False,
        record=record,
    )
    async with orch:
        return await asyncio.wait_for(orch.run("go"), 120)


def _team_agents() -> list[Any]:
    from agentcell.orchestrator import AgentDefinition

    return [
        AgentDefinition(name="waiter", description="w", tools=["bash", "send_message"]),
        AgentDefinition(name="writer", description="w", tools=["send_message"]),
    ]


#: The script's two sub-agents, defined in code (AGENT_FILES are the same as files).
TEAM_AGENTS = _team_agents()
