"""A tool and a model for the Python-version tests (tests/house/test_pythons.py), sent to the
sub-agent's child by reference: a child imports this module, so it stays small."""

from __future__ import annotations

import json
import os
import sys

from agentcell.protocol import Message
from agentcell.worker.models import ToolSpec
from agentcell.worker.models._base import ModelResponse
from agentcell.worker.tools import function_tool

from agentcell.testing import reply, tool_call, tool_results


async def async_library_seen() -> str:
    """What httpcore asks on every lock use: which async library runs this call."""
    import sniffio  # not at the top: the import in the child is what is tested

    return json.dumps(
        {
            "library": sniffio.current_async_library(),
            "pid": os.getpid(),
            "python": list(sys.version_info[:3]),
        }
    )


async_library = function_tool(async_library_seen, name="async_library")


def ask_the_async_library(messages: list[Message], tools: list[ToolSpec]) -> ModelResponse | str:
    """Calls async_library once, then answers with exactly what it gave back."""
    results = tool_results(messages)
    if not results:
        return reply("", tool_call("async_library"))
    return results[0].content
