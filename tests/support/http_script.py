"""A deterministic responder for the local model server: a main agent that delegates a
foreground survey, a background one and a doomed one, and sub-agents that use real tools.

Used in-process (tests/worker/models/test_http_e2e.py) and through the CLI
(tests/orchestrator/cli/test_cli.py).
"""

from __future__ import annotations

import json
from typing import Any

from model_servers import Call, Reply


def _system(body: dict[str, Any]) -> str:
    messages = body.get("messages", [])
    if messages and messages[0].get("role") == "system":
        return str(messages[0]["content"])
    return str(body.get("system", ""))


def _tool_results(body: dict[str, Any]) -> list[str]:
    return [str(m.get("content", "")) for m in body.get("messages", []) if m.get("role") == "tool"]


def _first_user(body: dict[str, Any]) -> str:
    for message in body.get("messages", []):
        if message.get("role") == "user":
            return str(message["content"])
    return ""


def delegating_responder(body: dict[str, Any], api: str) -> Reply:
    system = _system(body)
    results = _tool_results(body)
    if "main agent of agentcell" in system:
        everything = json.dumps(body["messages"])
        if not results:
            return Reply(
                text="Delegating.",
                tool_calls=[
                    Call(
                        "task",
                        {
                            "subagent_type": "Explore",
                            "prompt": "count files",
                            "description": "survey",
                        },
                    ),
                    Call(
                        "task",
                        {
                            "subagent_type": "general-purpose",
                            "prompt": "kill yourself",
                            "description": "doomed",
                        },
                    ),
                    Call(
                        "task",
                        {
                            "subagent_type": "Explore",
                            "prompt": "count files",
                            "description": "in the back",
                            "background": True,
                        },
                    ),
                ],
            )
        if "Background task results" not in everything and "task_wait" not in everything:
            return Reply(tool_calls=[Call("task_wait", {"timeout_s": 60})])
        return Reply(text=f"All done after {len(results)} tool results.")
    prompt = _first_user(body)
    if prompt == "kill yourself":
        if not results:
            # bash's parent is the sub-agent process: this kills the sub-agent itself.
            return Reply(tool_calls=[Call("bash", {"command": "kill -9 $PPID"})])
        return Reply(text="unreachable")
    if not results:
        return Reply(tool_calls=[Call("glob", {"pattern": "*.txt"})])
    files = [line for line in results[0].splitlines() if line.endswith(".txt")]
    return Reply(text=f"found {len(files)} text files")


def fan_out(prompts: list[str], *, background: tuple[str, ...] = ()) -> Reply:
    """The main agent's fan-out: one general-purpose ``task`` per prompt (those named in
    ``background`` in the background)."""
    calls = [
        Call(
            "task",
            {"subagent_type": "general-purpose", "prompt": p, "description": p}
            | ({"background": True} if p in background else {}),
        )
        for p in prompts
    ]
    return Reply(text="Fanning out.", tool_calls=calls)


def count_once(prompt: str) -> Reply:
    """A sub-agent's first step: append its name to counter.txt with bash (the side effect
    a resume must never repeat)."""
    name = prompt.replace(" ", "-")
    return Reply(tool_calls=[Call("bash", {"command": f"echo {name} >> counter.txt"})])
