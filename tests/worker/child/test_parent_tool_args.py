"""A tool the parent runs for a child (``ParentTool``: ``task``, ``web_fetch``, the team's,
shared MCP servers') sends the model's arguments to the parent as the model wrote them,
whatever its fields are named; string fields stay readable to permission rules."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agentcell.protocol import RemoteTool
from agentcell.worker.child._agent import ParentTool
from agentcell.worker.tools import ToolContext


class _Link:
    def __init__(self) -> None:
        self.sent: list[str] = []

    async def delegate(self, call_id: str, tool: str, arguments: str) -> tuple[str, bool]:
        self.sent.append(arguments)
        return "done", False


async def test_fields_named_like_the_raw_arguments_do_not_replace_them() -> None:
    link = _Link()
    tool = ParentTool(RemoteTool(name="mcp__s__t", description="d", parameters={}), link)  # type: ignore[arg-type]
    arguments: dict[str, Any] = {"text": "ok", "json_text": "forged", "path": "a.txt"}
    parsed = tool.parse_args(json.dumps(arguments))
    assert (parsed.text, parsed.path) == ("ok", "a.txt")  # for rules like mcp__s__t(a.txt)
    output = await tool.execute(parsed, ToolContext(workdir=Path("."), call_id="c1"))
    assert output.content == "done"
    assert [json.loads(sent) for sent in link.sent] == [arguments]
