"""A scripted team for the local model server: the main agent starts "waiter" and
"writer" side by side; the writer messages the waiter while the waiter's bash waits for a
file the script writes only once the writer has its send_message result; the waiter then
messages the main agent. Used in-process and through the CLI (killed and resumed)."""

from __future__ import annotations

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
