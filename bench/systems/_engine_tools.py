"""The bench tools as agentcell tools (used by agentcell and the baselines on its engine)."""

from __future__ import annotations

from bench.tools import crunch, probe
from worker.tools import Tool, function_tool

PROBE: Tool = function_tool(probe, read_only=True, concurrency_safe=True)
CRUNCH: Tool = function_tool(crunch, read_only=True, concurrency_safe=True)
TOOLS: list[Tool] = [PROBE, CRUNCH]
