"""``todo_write`` (Claude Code's ``TodoWrite``): the agent's own task list.

Each call replaces the whole list, as Claude Code's does. The list lives in the sub-agent
process; the call and its answer (the list, rendered) are in its record and in the live
view like every tool call.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from agentcell.worker.tools._base import Tool, ToolContext, ToolOutput
from msgspec import Meta

_MARKS = {"completed": "[x]", "in_progress": "[>]", "pending": "[ ]"}


class Todo(msgspec.Struct, kw_only=True, rename={"active_form": "activeForm"}):
    content: Annotated[str, Meta(min_length=1, description="What is to be done.")]
    status: Literal["pending", "in_progress", "completed"]
    active_form: Annotated[
        str, Meta(description="The same, as an ongoing action ('Running the tests').")
    ] = ""
    id: str = ""  # older Claude Code lists carry these two
    priority: str = ""


class TodoArgs(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    todos: Annotated[list[Todo], Meta(description="The whole list, replacing the last one.")]


class TodoWrite(Tool):
    name = "todo_write"
    description = (
        "Keep your task list for this job: pass the whole list each time (it replaces the "
        "last one), each item with content and status (pending, in_progress, completed). "
        "Mark one in_progress at a time and completed as soon as it is done."
    )
    Args = TodoArgs
    concurrency_safe = False
    read_only = True  # changes nothing outside the agent's own list

    def __init__(self) -> None:
        self.todos: list[Todo] = []

    async def execute(self, args: Any, ctx: ToolContext) -> ToolOutput | str:
        self.todos = list(args.todos)
        if not self.todos:
            return "Todo list cleared."
        lines = [f"{_MARKS[todo.status]} {todo.content}" for todo in self.todos]
        done = sum(todo.status == "completed" for todo in self.todos)
        return f"Todo list ({done}/{len(self.todos)} done):\n" + "\n".join(lines)


def named_tools() -> list[Tool]:
    """The worker tools an agent gets only by naming them."""
    return [TodoWrite()]
