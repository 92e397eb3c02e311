"""A built-in tool called directly, with a tool context of a temporary run folder."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agentcell.worker.tools import Tool, ToolContext, ToolOutput


async def call(tool: Tool, ctx: ToolContext, **arguments: Any) -> ToolOutput:
    """Run a tool the way the engine does: JSON arguments parsed, then executed."""
    args = tool.parse_args(json.dumps(arguments))
    result = await tool.execute(args, ctx)
    return result if isinstance(result, ToolOutput) else ToolOutput(result)


def ctx_for(workdir: Path, **kwargs: Any) -> ToolContext:
    return ToolContext(workdir=workdir, **kwargs)
