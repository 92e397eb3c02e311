"""``interrupt: true``: a message that cannot wait. The recipient's model call in flight
(here one that would never end) is cancelled in its own process, the turn is dropped, and
its next request carries the message at once."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

from agentcell.orchestrator import AgentDefinition
from conftest import SpawnRecorder
from http_script import _system, _tool_results
from model_servers import Call, ModelServer, Reply
from team_script import run_team

LISTENER = AgentDefinition(name="listener", description="l", tools=[])


class _Script:
    """Main → "listener" in the background; the main agent's message (interrupt) goes out
    only once the listener's first request is hanging."""

    def __init__(self) -> None:
        self.hanging = threading.Event()
        self.listener: list[dict[str, Any]] = []

    def __call__(self, body: dict[str, Any], api: str) -> Reply:
        results = _tool_results(body)
        if "main agent of agentcell" in _system(body):
            if not results:
                task = {"subagent_type": "listener", "prompt": "listen", "name": "listener"}
                return Reply(tool_calls=[Call("task", {**task, "background": True})])
            if len(results) == 1:
                message = {"to": "listener", "message": "stop and read this", "interrupt": True}
                call = Call("send_message", message)
                return Reply(tool_calls=[call], pause_after=0, release=self.hanging)
            if "Background task results" in json.dumps(body["messages"][-1]):
                return Reply(text="main done")
            return Reply(text="waiting")
        self.listener.append(body)
        if "stop and read this" in json.dumps(body["messages"]):
            return Reply(text="heard it")
        self.hanging.set()
        return Reply(hang=True)


async def test_an_interrupting_message_cancels_the_recipients_model_call_and_is_read_at_once(
    spawned: SpawnRecorder, tmp_path: Path, openai_served: ModelServer
) -> None:
    script = openai_served.responder = _Script()
    report = await run_team(tmp_path / "work", [LISTENER])
    assert report.final_text == "main done", report
    (listener,) = report.subagents
    assert listener.status.value == "completed" and listener.text == "heard it"
    hung, read = script.listener
    assert "stop and read this" not in json.dumps(hung["messages"])
    last = read["messages"][-1]
    assert last["role"] == "user" and "stop and read this" in last["content"]
    assert [m["role"] for m in read["messages"][1:]] == ["user", "user"]  # the turn dropped


class _Late:
    """A message sent while the recipient's final answer is on its way: the answer is held
    until the main agent has sent it (its next request shows the send's result)."""

    def __init__(self) -> None:
        self.asked, self.sent = threading.Event(), threading.Event()
        self.late: list[dict[str, Any]] = []

    def __call__(self, body: dict[str, Any], api: str) -> Reply:
        results = _tool_results(body)
        if "main agent of agentcell" in _system(body):
            if not results:
                task = {"subagent_type": "listener", "prompt": "listen", "name": "late"}
                return Reply(tool_calls=[Call("task", {**task, "background": True})])
            if len(results) == 1:
                message = {"to": "late", "message": "one more thing"}
                call = Call("send_message", message)
                return Reply(tool_calls=[call], pause_after=0, release=self.asked)
            self.sent.set()
            if "Background task results" in json.dumps(body["messages"][-1]):
                return Reply(text="main done")
            return Reply(text="waiting")
        self.late.append(body)
        if "one more thing" in json.dumps(body["messages"]):
            return Reply(text="read it too")
        self.asked.set()
        return Reply(text="first answer", pause_after=0, release=self.sent)


async def test_a_message_that_comes_while_the_final_answer_is_written_is_read_not_lost(
    spawned: SpawnRecorder, tmp_path: Path, openai_served: ModelServer
) -> None:
    script = openai_served.responder = _Late()
    report = await run_team(tmp_path / "work", [LISTENER])
    assert report.final_text == "main done", report
    (late,) = report.subagents
    assert late.text == "read it too"  # one more turn, with the message, after its answer
    first, second = script.late
    assert [m["role"] for m in second["messages"][1:]] == ["user", "assistant", "user"]
    assert "one more thing" in second["messages"][-1]["content"]
