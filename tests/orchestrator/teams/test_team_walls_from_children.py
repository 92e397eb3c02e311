"""The team's walls as a real sub-agent meets them: its send_message calls, through its
pipe, to an unknown agent, over the size cap, into a full mailbox, past its rate, and
from its own sub-agent to a cousin out of reach — each refused with the words that name
the cause (and the setting), nothing delivered."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

from agentcell.orchestrator import AgentDefinition
from agentcell.orchestrator.config._settings import TeamSettings
from conftest import SpawnRecorder
from http_script import _first_user, _system, _tool_results
from model_servers import Call, ModelServer, Reply
from team_script import run_team

PROBES = [
    {"to": "nobody", "message": "hi"},
    {"to": "sink", "message": "x" * 101},
    {"to": "sink", "message": "one"},
    {"to": "sink", "message": "two"},
    {"to": "sink", "message": "three"},  # the sink has 2 unread: its mailbox is full
    {"to": "sink", "message": "four"},  # the prober's 4th in the window: over its rate
]


class _Script:
    def __init__(self) -> None:
        self.done = threading.Event()  # the sink answers once the prober has finished
        self.prober: list[dict[str, Any]] = []

    def __call__(self, body: dict[str, Any], api: str) -> Reply:
        results = _tool_results(body)
        prompt = _first_user(body)
        if "main agent of agentcell" in _system(body):
            if results:
                return Reply(text="main done")
            calls = [
                Call("task", {"subagent_type": "sink", "prompt": "sink", "name": "sink",
                              "background": True}),
                Call("task", {"subagent_type": "prober", "prompt": "probe", "name": "prober"}),
            ]  # fmt: skip
            return Reply(tool_calls=calls)
        if prompt == "sink":
            return Reply(text="sink done", pause_after=0, release=self.done)
        if prompt == "reach":  # the prober's own sub-agent, messaging its parent's sibling
            if not results:
                return Reply(tool_calls=[Call("send_message", {"to": "sink", "message": "hi"})])
            return Reply(text=results[-1])
        self.prober.append(body)
        if len(results) < len(PROBES):
            return Reply(tool_calls=[Call("send_message", PROBES[len(results)])])
        if len(results) == len(PROBES):
            return Reply(tool_calls=[Call("task", {"subagent_type": "inner", "prompt": "reach"})])
        self.done.set()
        return Reply(text="probed")


async def test_a_sub_agents_messages_meet_every_wall(
    spawned: SpawnRecorder, tmp_path: Path, openai_served: ModelServer
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    script = openai_served.responder = _Script()
    teams = TeamSettings(message_max_bytes=100, mailbox_max=2, messages_per_window=3)
    agents = [
        AgentDefinition(name="sink", description="s", tools=[]),
        AgentDefinition(name="prober", description="p", tools=["send_message", "task"]),
        AgentDefinition(name="inner", description="i", tools=["send_message"]),
    ]
    report = await run_team(work, agents, max_workers=3, max_depth=2, teams=teams)
    assert report.final_text == "main done", report
    said = _tool_results(script.prober[-1])
    unknown, large, one, two, full, fast, inner = said
    assert "'nobody' is no agent of this run. Running in your reach: main, sink." in unknown
    assert "101 bytes and the limit is 100 ([teams] message_max_bytes)" in large
    assert "sent to sink" in one and "sent to sink" in two
    assert "it has 2 unread messages, the limit ([teams] mailbox_max)" in full
    assert "sent 3 messages in the last 10 s" in fast and "messages_per_window" in fast
    assert "not sent: 'sink' is not in your reach" in inner  # a cousin
    sink = next(sub for sub in report.subagents if sub.name == "sink")
    assert sink.text == "sink done"
    assert "three" not in json.dumps(said[:4]) and sum("x" * 101 in s for s in said) == 0
