"""``scripted:demo``: the offline model behind ``agentcell demo``.

It plays three parts, told apart by what it is given:

* the main agent (it has the ``task`` tool): fans out Explore sub-agents over the package's
  own source, starts one in the background, sends one sub-agent to crash on purpose, waits
  for the background result, and sums everything up;
* an Explore sub-agent: real ``glob``, ``grep`` and ``read_file`` calls, then a report of
  what it found;
* the crash-test sub-agent: crashes its own process (a segmentation fault), to show that
  the parent and the siblings carry on.

A short pause before each reply stands in for a real model's latency, so the live view
has something to show.
"""

from __future__ import annotations

import asyncio
import ctypes
import re

from agentcell.protocol import Message, ToolMessage, UserMessage
from agentcell.worker.models._base import ModelResponse, ToolSpec
from agentcell.worker.models._doubles import FunctionModel, reply, tool_call

LATENCY_S = 0.35

SURVEYS = [
    ("protocol/", "Map the wire protocol"),
    ("worker/", "Map the agent runtime"),
    ("orchestrator/", "Map the orchestrator"),
]
BACKGROUND = ("worker/tools/", "Survey the built-in tools")


def demo_model() -> FunctionModel:
    return FunctionModel(_demo_reply, name="scripted:demo")


async def _demo_reply(messages: list[Message], tools: list[ToolSpec]) -> ModelResponse | str:
    names = {tool.name for tool in tools}
    prompt = _first_user(messages)
    await asyncio.sleep(LATENCY_S)
    if "task" in names:
        return _main(messages)
    if prompt.startswith("Crash"):
        ctypes.string_at(0)  # a segmentation fault: the process dies here
    return _explore(messages, prompt)


def _main(messages: list[Message]) -> ModelResponse | str:
    results = [m for m in messages if isinstance(m, ToolMessage)]
    if not results:
        calls = [
            tool_call(
                "task",
                subagent_type="Explore",
                description=title,
                prompt=f"Survey {folder}: list its Python modules and the classes and "
                "functions they define, and say what the package is for.",
            )
            for folder, title in SURVEYS
        ]
        folder, title = BACKGROUND
        calls.append(
            tool_call(
                "task",
                subagent_type="Explore",
                description=title,
                background=True,
                prompt=f"Survey {folder}: list its Python modules and the classes and "
                "functions they define, and say what the package is for.",
            )
        )
        calls.append(
            tool_call(
                "task",
                subagent_type="crash-test",
                description="Crash on purpose",
                prompt="Crash your own process, to show that a crash is contained.",
            )
        )
        return reply(
            "I'll survey the three packages in parallel, one more in the background, and send "
            "one sub-agent to crash on purpose.",
            *calls,
        )
    if not any(m.name == "task_wait" for m in results) and not _background_delivered(messages):
        return reply("Now I wait for the background survey.", tool_call("task_wait", timeout_s=60))
    return _summary(messages)


def _summary(messages: list[Message]) -> str:
    texts = [m.content for m in messages if isinstance(m, ToolMessage)]
    texts += [
        m.content for m in messages if isinstance(m, UserMessage) and "Background" in m.content
    ]
    lines = ["Summary of the parallel survey:"]
    for text in texts:
        for block in re.split(r"\n(?=\[)", text):
            head, _, body = block.partition("\n")
            match = re.match(r"\[(\w+)\] (\S+) \"([^\"]*)\"", head)
            if not match:
                continue
            status, agent_type, title = match.groups()
            if status == "completed":
                first = body.strip().splitlines()[0] if body.strip() else ""
                lines.append(f"- {title}: {first}")
            else:
                cause = head.split("): ", 1)[-1]
                lines.append(f"- {title}: {status} — {cause} (contained; the rest carried on)")
    return "\n".join(lines)


def _explore(messages: list[Message], prompt: str) -> ModelResponse | str:
    folder = prompt.split()[1].rstrip(":") if len(prompt.split()) > 1 else "."
    results = {m.name: m.content for m in messages if isinstance(m, ToolMessage)}
    if "glob" not in results:
        return reply(f"Listing {folder}", tool_call("glob", pattern=f"{folder}**/*.py"))
    if "grep" not in results:
        return reply(
            "Finding definitions",
            tool_call("grep", pattern=r"^(class|def|async def) \w+", path=folder, max_results=400),
        )
    files = [line for line in results["glob"].splitlines() if line.endswith(".py")]
    if "read_file" not in results and files:
        first = next((f for f in files if f.endswith("__init__.py")), files[0])
        return reply("Reading the package docstring", tool_call("read_file", path=first, limit=12))
    return _report(folder, files, results.get("grep", ""), results.get("read_file", ""))


def _report(folder: str, files: list[str], grep: str, head: str) -> str:
    names: list[str] = []
    for line in grep.splitlines():
        match = re.search(r":\d+:(?:async )?(?:class|def) (\w+)", line)
        if match and not match.group(1).startswith("_"):
            names.append(match.group(1))
    docstring = _docstring(head)
    shown = ", ".join(names[:6]) + (", …" if len(names) > 6 else "")
    report = (
        f"{folder} has {len(files)} Python modules defining {len(names)} public classes and "
        f"functions ({shown})."
    )
    if docstring:
        report += f" Its package docstring: {docstring}"
    return report


def _docstring(numbered: str) -> str:
    """The docstring's first paragraph (its summary; a layout map may follow)."""
    lines = [line.split("\t", 1)[-1].strip() for line in numbered.splitlines() if "\t" in line]
    text = " ".join(lines[: lines.index("")] if "" in lines else lines)
    match = re.search(r'"""(.+?)(?:"""|$)', text)
    return match.group(1).strip() if match else ""


def _first_user(messages: list[Message]) -> str:
    for message in messages:
        if isinstance(message, UserMessage):
            return message.content
    return ""


def _background_delivered(messages: list[Message]) -> bool:
    return any(
        isinstance(m, UserMessage) and m.content.startswith("Background task results")
        for m in messages
    )
