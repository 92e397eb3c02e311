"""Model functions for the tracing tests' sub-agents (dill sends them by reference)."""

from __future__ import annotations

from agentcell.protocol import Message
from agentcell.worker.models import ModelResponse, ToolSpec
from agentcell.worker.testing import reply, tool_call, tool_results


def read_notes_then_answer(messages: list[Message], tools: list[ToolSpec]) -> ModelResponse | str:
    """Reads notes.txt (one execute_tool span), then answers with what it read."""
    results = tool_results(messages)
    if not results:
        return reply("reading", tool_call("read_file", path="notes.txt"))
    return f"notes: {results[0].content.strip()}"
