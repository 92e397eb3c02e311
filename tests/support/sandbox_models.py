"""Model functions for the sandbox tests (sent to children by reference, like child_models)."""

from __future__ import annotations

from agentcell.protocol import Message, ToolMessage
from agentcell.worker.models import ToolSpec
from agentcell.worker.models._base import ModelResponse

from agentcell.testing import reply, tool_call, tool_results


def write_pid_then_wait(messages: list[Message], tools: list[ToolSpec]) -> ModelResponse | str:
    """Writes its own process id (bash's parent) to victim.pid, then waits at the gate."""
    done = [m.name for m in messages if isinstance(m, ToolMessage)]
    if not done:
        return reply("", tool_call("bash", command="echo $PPID > victim.pid"))
    if done == ["bash"]:
        return reply("", tool_call("wait_at_gate"))
    return "still here"


def signal_the_pid(messages: list[Message], tools: list[ToolSpec]) -> ModelResponse | str:
    """Tries to signal (and then kill) the process whose id is in victim.pid."""
    results = tool_results(messages)
    if not results:
        command = "kill -0 $(cat victim.pid) && echo SIGNALLED; kill -9 $(cat victim.pid)"
        return reply("", tool_call("bash", command=command))
    return results[0].content
