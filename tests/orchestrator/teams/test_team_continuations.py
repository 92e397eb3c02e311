"""A message to an ended sub-agent: it goes on (a new run of its recorded session, in
the background, under its name) with the message as its next turn, and its answer reaches
the sender — only from the main agent or an agent granted no more than it; otherwise the
main agent gets the message. At most ``[teams] max_continuations`` per run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from agentcell.orchestrator import AgentDefinition
from agentcell.orchestrator.config._settings import TeamSettings
from agentcell.orchestrator.teams._mail import Team, grants_within
from agentcell.orchestrator.teams._roster import Member
from conftest import SpawnRecorder
from http_script import _first_user, _system, _tool_results
from model_servers import Call, ModelServer, Reply
from team_script import run_team

GRANTS = {
    "tools": ["read_file", "bash"],
    "sandbox": "workspace",
    "network": False,
    "mcp_servers": [],
}


@pytest.mark.parametrize(
    ("narrow", "within"),
    [
        ({}, True),
        ({"tools": ["read_file"]}, True),
        ({"tools": ["read_file", "write_file"]}, False),
        ({"sandbox": "read-only"}, True),
        ({"sandbox": "off"}, False),
        ({"network": True}, False),
        ({"network": ["example.com"]}, False),
        ({"mcp_servers": ["github"]}, False),
    ],
)
def test_grants_within_compares_tools_sandbox_network_and_servers(
    narrow: dict[str, Any], within: bool
) -> None:
    assert grants_within(GRANTS | narrow, GRANTS) is within
    assert not grants_within({}, GRANTS) and not grants_within(GRANTS, {})  # unknown: never


class _Starter:
    def __init__(self, refusal: str = "") -> None:
        self.started: list[tuple[str, str]] = []
        self.refusal = refusal

    def __call__(self, sender: Member, recipient: Member, text: str) -> str:
        self.started.append((sender.agent_id, recipient.agent_id))
        return self.refusal


def _team(max_continuations: int = 8) -> tuple[Team, _Starter]:
    team = Team(TeamSettings(max_continuations=max_continuations))
    team.starter = starter = _Starter()
    for agent_id, grants in (("a1", GRANTS), ("a2", GRANTS | {"network": True})):
        team.join(agent_id, agent_id.replace("a", "n"), "t", "main", None)  # type: ignore[arg-type]
        team.roster.members[agent_id].grants = grants
    team.roster.ended("a1", "completed")
    return team, starter


def test_an_agent_granted_more_does_not_continue_an_ended_one_the_main_agent_is_told() -> None:
    team, starter = _team()
    text, error = team.send("a2", "n1", "continue, and tell me what you read")
    assert not error and starter.started == []
    assert "you are granted more than it" in text and "the main agent got the message" in text
    (for_main,) = team.for_main()
    assert "(for n1 (a1), which has ended" in for_main and "tell me what you read" in for_main


def test_continuations_are_capped_and_a_refused_start_is_said() -> None:
    team, starter = _team(max_continuations=1)
    assert "goes on in the background" in team.send("main", "n1", "one")[0]
    team.roster.ended("a1", "completed")  # (its continuation is another agent; say it ended)
    text, _ = team.send("main", "a1", "two")
    assert "this run has continued 1 ended agents, the limit ([teams] max_continuations)" in text
    team, starter = _team()
    starter.refusal = "the orchestrator is closing"
    text, _ = team.send("main", "n1", "three")
    assert text == "not delivered to n1 (a1): it has ended, and the orchestrator is closing"
    assert team.continuations == 0


class _Script:
    def __init__(self) -> None:
        self.continued: list[dict[str, Any]] = []
        self.main: list[dict[str, Any]] = []

    def __call__(self, body: dict[str, Any], api: str) -> Reply:
        results = _tool_results(body)
        if "main agent of agentcell" in _system(body):
            self.main.append(body)
            if not results:
                task = {"subagent_type": "alpha", "prompt": "first", "name": "alpha"}
                return Reply(tool_calls=[Call("task", task)])
            if len(results) == 1:
                message = {"to": "alpha", "message": "one more thing"}
                return Reply(tool_calls=[Call("send_message", message)])
            if "Background task results" not in json.dumps(body["messages"][-1]):
                return Reply(text="waiting for alpha")
            return Reply(text="main done")
        if "one more thing" in json.dumps(body["messages"]):
            self.continued.append(body)
            return Reply(text="alpha second answer")
        assert _first_user(body) == "first"
        return Reply(text="alpha first answer")


async def test_a_message_to_an_ended_sub_agent_continues_it_and_its_answer_comes_back(
    spawned: SpawnRecorder, tmp_path: Path, openai_served: ModelServer
) -> None:
    script = openai_served.responder = _Script()
    alpha = AgentDefinition(name="alpha", description="a", tools=["read_file"])
    report = await run_team(tmp_path / "work", [alpha], record=True)
    assert report.final_text == "main done", report
    first, second = report.subagents
    # The name went on with its session: the continuation is another agent, named alpha.
    assert (first.name, second.name) == ("alpha", "alpha") and first.agent_id != second.agent_id
    sent = _tool_results(script.main[2])[-1]
    assert sent.startswith(f"alpha ({first.agent_id}) had ended: it goes on in the background")
    (continued,) = script.continued
    history = [(m["role"], m.get("content")) for m in continued["messages"][1:]]
    assert history[:2] == [("user", "first"), ("assistant", "alpha first answer")]
    assert history[2][0] == "user" and "one more thing" in history[2][1]
    assert "a message from the main agent" in history[2][1]
    assert "alpha second answer" in json.dumps(script.main[-1]["messages"][-1])


class _Controls:
    def __init__(self) -> None:
        self.messages: list[str] = []

    def message(self, text: str, message_id: str, *, interrupt: bool = False) -> None:
        self.messages.append(text)

    def cancel(self, reason: str = "") -> None: ...


def test_a_continuations_answer_goes_to_its_sender_or_if_that_ended_to_the_main_agent() -> None:
    team = Team(TeamSettings())
    sender = _Controls()
    team.join("a1", "asker", "t", "main", sender)  # type: ignore[arg-type]
    team.join("a3", "answerer", "t", "main", _Controls())  # type: ignore[arg-type]
    team.reply("a3", "a1", "the answer")
    assert len(sender.messages) == 1 and "a message from answerer (a3)" in sender.messages[0]
    team.roster.ended("a1", "completed")
    team.reply("a3", "a1", "a later answer")
    (for_main,) = team.for_main()
    assert "a later answer" in for_main and len(sender.messages) == 1
