"""The team's shared task list (``team_tasks``; Claude Code's TaskCreate, TaskUpdate,
TaskList and TaskGet): kept by the parent, one per run, every change journaled.

A creation and a completion first go to the ``TaskCreated`` and ``TaskCompleted`` hooks
(Claude Code's payload: ``task_id``, ``task_subject``, ``task_description``,
``teammate_name``); a hook that exits 2 refuses it, and its words are the agent's tool
error. ``todo_write`` stays each agent's private list.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, Literal

import msgspec
from agentcell.orchestrator.journal._journal import Journal

Status = Literal["pending", "in_progress", "completed"]
#: A hook event run with its payload: (refused, why).
RunHook = Callable[[str, dict[str, Any]], Awaitable[tuple[bool, str]]]


class TeamTasksArgs(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    action: Annotated[
        Literal["create", "update", "list", "get"],
        msgspec.Meta(description="create a task, update one, list them all, or get one"),
    ]
    task_id: Annotated[
        str, msgspec.Meta(description="For update and get: the task's id (from create or list)")
    ] = msgspec.field(default="", name="taskId")
    subject: Annotated[str, msgspec.Meta(description="For create: a short title")] = ""
    description: Annotated[str, msgspec.Meta(description="What is to be done")] = ""
    status: Status | None = None
    owner: Annotated[str | None, msgspec.Meta(description="The agent (name) who works on it")] = (
        None
    )
    active_form: Annotated[
        str | None,
        msgspec.Meta(description="What is happening now, in a few words (for display)"),
    ] = msgspec.field(default=None, name="activeForm")
    blocked_by: Annotated[
        list[str] | None,
        msgspec.Meta(description="The ids of the tasks that must be completed first"),
    ] = msgspec.field(default=None, name="blockedBy")


@dataclasses.dataclass(slots=True)
class TeamTask:
    id: str
    subject: str
    description: str = ""
    status: Status = "pending"
    owner: str = ""
    active_form: str = ""
    blocked_by: list[str] = dataclasses.field(default_factory=list)

    def line(self) -> str:
        text = f"#{self.id} [{self.status}] {self.subject}"
        if self.owner:
            text += f" (owner: {self.owner})"
        if self.active_form and self.status == "in_progress":
            text += f" — {self.active_form}"
        if self.blocked_by:
            text += f" (blocked by {', '.join('#' + b for b in self.blocked_by)})"
        return text


class TaskBoard:
    """The run's shared tasks; see the module's docstring."""

    def __init__(self, journal: Journal | None = None) -> None:
        self.tasks: dict[str, TeamTask] = {}
        self.journal = journal
        self._ids = itertools.count(1)

    def restore(self, tasks: dict[str, dict[str, Any]]) -> None:
        """The killed run's tasks, as its journal last had each."""
        fields = {f.name for f in dataclasses.fields(TeamTask)}
        for task_id, task in tasks.items():
            self.tasks[task_id] = TeamTask(**{k: v for k, v in task.items() if k in fields})
        self._ids = itertools.count(max((int(i) for i in self.tasks if i.isdigit()), default=0) + 1)

    async def act(self, args: TeamTasksArgs, caller: str, hook: RunHook) -> tuple[str, bool]:
        """``args`` done for ``caller`` (its name): the tool's text, and whether it is an
        error (nothing changed)."""
        if args.action == "list":
            lines = [task.line() for task in self.tasks.values()]
            return "\n".join(lines) if lines else "no tasks yet", False
        if args.action == "create":
            return await self._create(args, caller, hook)
        task = self.tasks.get(args.task_id.lstrip("#"))
        if task is None:
            known = ", ".join(f"#{i}" for i in self.tasks) or "none yet"
            return f"unknown task id {args.task_id!r} (tasks: {known})", True
        if args.action == "get":
            return _whole(task), False
        return await self._update(task, args, caller, hook)

    async def _create(self, args: TeamTasksArgs, caller: str, hook: RunHook) -> tuple[str, bool]:
        if not args.subject.strip():
            return "team_tasks create needs a subject", True
        refused = self._unknown_blockers(args.blocked_by or [], "")
        if refused:
            return refused, True
        task = TeamTask(
            id=str(next(self._ids)),
            subject=args.subject.strip(),
            description=args.description,
            status=args.status or "pending",
            owner=args.owner or "",
            active_form=args.active_form or "",
            blocked_by=list(args.blocked_by or []),
        )
        blocked, why = await hook("TaskCreated", _payload(task, caller))
        if blocked:
            return f"not created: a TaskCreated hook refused it: {why}", True
        self.tasks[task.id] = task
        self._journal(task)
        return f"created task #{task.id}: {task.subject}", False

    async def _update(
        self, task: TeamTask, args: TeamTasksArgs, caller: str, hook: RunHook
    ) -> tuple[str, bool]:
        refused = self._unknown_blockers(args.blocked_by or [], task.id)
        if refused:
            return refused, True
        changed = dataclasses.replace(task, blocked_by=list(task.blocked_by))
        for field, value in (
            ("subject", args.subject),
            ("description", args.description),
            ("status", args.status),
            ("owner", args.owner),
            ("active_form", args.active_form),
            ("blocked_by", args.blocked_by),
        ):
            if value:  # an empty text or list leaves the field as it is
                setattr(changed, field, value)
        if changed.status == "completed" and task.status != "completed":
            blocked, why = await hook("TaskCompleted", _payload(changed, caller))
            if blocked:
                return f"not completed: a TaskCompleted hook refused it: {why}", True
        self.tasks[task.id] = changed
        self._journal(changed)
        return f"updated {changed.line()}", False

    def _unknown_blockers(self, blockers: list[str], own: str) -> str:
        unknown = [b for b in blockers if b not in self.tasks or b == own]
        if unknown:
            return f"blockedBy names no other task: {', '.join(unknown)}"
        return ""

    def _journal(self, task: TeamTask) -> None:
        if self.journal is not None:
            self.journal.fact("team_task", task=dataclasses.asdict(task))


def _payload(task: TeamTask, caller: str) -> dict[str, Any]:
    return {
        "task_id": task.id,
        "task_subject": task.subject,
        "task_description": task.description,
        "teammate_name": caller,
    }


def _whole(task: TeamTask) -> str:
    text = task.line()
    if task.description:
        text += f"\n{task.description}"
    return text
