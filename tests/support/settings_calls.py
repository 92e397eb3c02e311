"""Claude Code settings files through a real sub-agent: a scripted run of tool calls and its
report."""

from __future__ import annotations

from typing import Any

from model_servers import Call, Reply

SEP = "\n=====\n"


def calls_then_report(calls: list[tuple[str, dict[str, Any]]]) -> Any:
    def respond(body: dict[str, Any], api: str) -> Reply:
        outputs = [m["content"] for m in body["messages"] if m["role"] == "tool"]
        if len(outputs) < len(calls):
            name, arguments = calls[len(outputs)]
            return Reply(tool_calls=[Call(name, arguments)])
        return Reply(text=SEP.join(outputs))

    return respond
