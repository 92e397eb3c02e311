"""Model functions and tools for sub-agents in end-to-end tests.

Kept in a small module: dill sends module-level functions by reference, so a child
imports this module — and it should be cheap to import.
"""

from __future__ import annotations

import ctypes
import os
import signal
import time

from protocol import Message, ToolMessage, UserMessage
from worker.models import ModelResponse, ToolSpec
from worker.testing import last_user_text, reply, tool_call, tool_results
from worker.tools import function_tool


def answer_prompt(messages: list[Message], tools: list[ToolSpec]) -> str:
    return f"answer to: {last_user_text(messages)}"


def gate_then_answer(messages: list[Message], tools: list[ToolSpec]) -> ModelResponse | str:
    if not tool_results(messages):
        return reply("", tool_call("wait_at_gate"))
    return f"done: {_first_user_text(messages)}"


def steerable(messages: list[Message], tools: list[ToolSpec]) -> ModelResponse | str:
    """Waits at the gate once, then reports every user message it has seen."""
    if not any(isinstance(m, ToolMessage) for m in messages):
        return reply("", tool_call("wait_at_gate"))
    users = [m.content for m in messages if isinstance(m, UserMessage)]
    return " | ".join(users)


def call_tool_named_in_prompt(
    messages: list[Message], tools: list[ToolSpec]
) -> ModelResponse | str:
    """Calls the tool the prompt names (e.g. "segfault"), then reports what came back."""
    results = tool_results(messages)
    if not results:
        return reply("", tool_call(last_user_text(messages)))
    return f"after {results[0].name}: {results[0].content}"


def run_echo(messages: list[Message], tools: list[ToolSpec]) -> ModelResponse | str:
    """Runs one harmless bash command (which asks for approval), then reports."""
    results = tool_results(messages)
    if not results:
        return reply("", tool_call("bash", command="echo approved"))
    return f"bash said: {results[0].content.strip()}"


def raise_error(messages: list[Message], tools: list[ToolSpec]) -> str:
    raise ValueError("the model exploded")


def forge_task_call(messages: list[Message], tools: list[ToolSpec]) -> ModelResponse | str:
    """Calls `task` whether or not it was offered, then reports the tool result."""
    results = tool_results(messages)
    if not results:
        return reply("", tool_call("task", subagent_type="leaf", prompt="deeper work"))
    return f"task said: {results[0].content}"


def tool_names(messages: list[Message], tools: list[ToolSpec]) -> str:
    return ",".join(t.name for t in tools)


def _first_user_text(messages: list[Message]) -> str:
    for message in messages:
        if isinstance(message, UserMessage):
            return message.content
    return ""


# Tools are made with function_tool(fn) rather than as decorators, so that each function
# stays importable under its own name (dill sends it by reference).


def crash_with_segfault() -> str:
    """Crash the process with a segmentation fault."""
    ctypes.string_at(0)
    return "unreachable"


def crash_with_sigkill() -> str:
    """Kill the process as the OOM killer would."""
    os.kill(os.getpid(), signal.SIGKILL)
    return "unreachable"


async def block_the_loop() -> str:
    """A badly behaved tool: blocks the event loop forever."""
    time.sleep(3600)  # noqa: ASYNC251 - the point of the test
    return "unreachable"


segfault = function_tool(crash_with_segfault, name="segfault")
sigkill = function_tool(crash_with_sigkill, name="sigkill")
block_loop = function_tool(block_the_loop, name="block_loop")
