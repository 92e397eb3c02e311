"""Model functions and tools for sub-agents in end-to-end tests.

Kept in a small module: dill sends module-level functions by reference, so a child
imports this module — and it should be cheap to import.
"""

from __future__ import annotations

import ctypes
import os
import signal
import time

from agentcell.protocol import Message, ToolMessage, UserMessage
from agentcell.worker.models import ToolSpec
from agentcell.worker.models._base import ModelResponse
from agentcell.worker.tools import function_tool

from agentcell.testing import last_user_text, reply, tool_call, tool_results


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


def delegate_to_each_word(messages: list[Message], tools: list[ToolSpec]) -> ModelResponse | str:
    """Calls `task` once per word of the prompt (the word is the agent type), then reports
    each result's first line."""
    results = tool_results(messages)
    if not results:
        calls = [
            tool_call("task", subagent_type=w, prompt="deeper")
            for w in last_user_text(messages).split()
        ]
        return reply("", *calls)
    return "\n".join(r.content.splitlines()[0] for r in results)


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


def attack_paths(messages: list[Message], tools: list[ToolSpec]) -> ModelResponse | str:
    """Tries every file tool on paths outside its workdir, then reports each result."""
    results = tool_results(messages)
    if not results:
        return reply(
            "",
            tool_call("read_file", path="../secret.txt"),
            tool_call("read_file", path="/etc/passwd"),
            tool_call("read_file", path="link-out/secret.txt"),
            tool_call("read_file", path="/proc/self/root/etc/passwd"),
            tool_call("write_file", path="../planted.txt", content="x"),
            tool_call("edit_file", path="../secret.txt", old_string="top", new_string="no"),
            tool_call("glob", pattern="*.txt", path=".."),
            tool_call("grep", pattern="top", path=".."),
        )
    return "\n".join(f"{r.name}|{r.is_error}|{r.content[:120]}" for r in results)


def search_for_prompt(messages: list[Message], tools: list[ToolSpec]) -> ModelResponse | str:
    """Greps and globs the whole workdir for the prompt, then names .agentcell/ explicitly."""
    results = tool_results(messages)
    if not results:
        token = last_user_text(messages)
        return reply(
            "",
            tool_call("grep", pattern=token),
            tool_call("glob", pattern="**/*.jsonl"),
            tool_call("grep", pattern=token, path=".agentcell"),
            tool_call("glob", pattern=".agentcell/**/*.jsonl"),
        )
    return "\n".join(f"{r.name}|{r.content}" for r in results)


def run_env(messages: list[Message], tools: list[ToolSpec]) -> ModelResponse | str:
    """Runs `env` in bash and returns its output verbatim."""
    results = tool_results(messages)
    if not results:
        return reply("", tool_call("bash", command="env"))
    return results[0].content


def write_a_file(messages: list[Message], tools: list[ToolSpec]) -> ModelResponse | str:
    """Writes the file the prompt names (or nothing for 'nothing'), then says where it is."""
    prompt = last_user_text(messages)
    results = tool_results(messages)
    if prompt != "nothing" and not results:
        return reply("", tool_call("write_file", path=prompt, content=f"made by {prompt}\n"))
    return f"cwd files: {sorted(os.listdir('.'))}"


def call_the_named_tool_twice(
    messages: list[Message], tools: list[ToolSpec]
) -> ModelResponse | str:
    """Calls the tool named in the prompt (no arguments) on every turn, forever."""
    return reply("", tool_call(last_user_text(messages)))


def allocate_in_process() -> str:
    """Allocates 1 GiB in this process."""
    hog = bytearray(1 << 30)
    return str(len(hog))


def burn_cpu() -> str:
    """Spins until the CPU limit stops it."""
    n = 0
    while True:
        n += 1


def flood_output() -> str:
    """Prints 50 MB to stdout and stderr."""
    import sys

    line = "x" * 1023 + "\n"
    for _ in range(25_000):
        sys.stdout.write(line)
        sys.stderr.write(line)
    sys.stdout.flush()
    return "flooded"


def env_seen_by_tool() -> str:
    """Reports which model keys this process's environment holds."""
    return ",".join(k for k in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY") if k in os.environ)


allocate = function_tool(allocate_in_process, name="allocate")
burn = function_tool(burn_cpu, name="burn")
flood = function_tool(flood_output, name="flood")
env_seen = function_tool(env_seen_by_tool, name="env_seen")


def read_big_file(messages: list[Message], tools: list[ToolSpec]) -> ModelResponse | str:
    """Reads big.txt and returns exactly what the tool gave back."""
    results = tool_results(messages)
    if not results:
        return reply("", tool_call("read_file", path="big.txt"))
    return results[0].content


def escape_then_wait(messages: list[Message], tools: list[ToolSpec]) -> ModelResponse | str:
    """Starts a daemon in a session of its own, then waits at the gate."""
    results = tool_results(messages)
    if not results:
        return reply("", tool_call("bash", command="setsid sleep 300 >/dev/null 2>&1 & echo $!"))
    if results[0].name == "bash":
        return reply("", tool_call("wait_at_gate"))
    return "unreachable"


def forge_hook_requests(messages: list[Message], tools: list[ToolSpec]) -> str:
    """Code in the child's own process (a hostile custom tool, say) writes HookRequest
    frames on the child's pipe: as many as the prompt's first word says, all
    ``SubagentStop`` or, with a second word ``tools``, ``PreToolUse`` ones; then it
    leaves a ``sent`` file in the workdir (a test's hook waits for it)."""
    import gc
    import os

    from agentcell.protocol import HookRequest
    from agentcell.worker.child._main import ChildLink

    words = last_user_text(messages).split()
    count, event = int(words[0]), "PreToolUse" if "tools" in words else "SubagentStop"
    link = next(o for o in gc.get_objects() if isinstance(o, ChildLink))
    tool = link.start.spec.agent_type if event == "SubagentStop" else "read_file"
    for i in range(count):
        link.channel.send_nowait(
            HookRequest(request_id=90_000 + i, event=event, call_id="", tool=tool, arguments="")
        )
    with open(os.path.join(link.start.spec.workdir, "sent"), "w") as marker:
        marker.write("sent\n")
    return "forged"
