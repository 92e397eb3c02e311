"""The ``task`` tool's arguments as the model writes them, and its schema as the model sees it.

Shared by the main agent's task tool and by the runner, which answers a sub-agent's
nested ``task`` calls with the same parsing and the same rules.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Literal

import msgspec
from agentcell.orchestrator.definitions._registry import AgentRegistry
from agentcell.orchestrator.delegation._request import DelegationRequest
from agentcell.orchestrator.teams._roster import check_name
from agentcell.worker.models import ToolSpec
from agentcell.worker.tools import ToolError, args_schema, parse_args


class TaskArgs(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    subagent_type: Annotated[str, msgspec.Meta(description="The sub-agent type to run")]
    prompt: Annotated[
        str,
        msgspec.Meta(
            description="The complete task for the sub-agent. It cannot see this conversation: "
            "include every file path, fact and requirement it needs."
        ),
    ]
    description: Annotated[
        str, msgspec.Meta(description="A short title for the task (3-5 words), for display")
    ] = ""
    background: Annotated[
        bool | None,
        msgspec.Meta(
            description="Run in the background: returns a task id at once; the result is "
            "delivered to you later (or use task_wait). Default: the agent's own setting "
            "(agents marked 'runs in the background' do); false runs any agent in the "
            "foreground."
        ),
    ] = None
    model: Annotated[
        str | None,
        msgspec.Meta(description="Optional model override (only for agents that inherit one)"),
    ] = None
    isolation: Annotated[
        Literal["worktree"] | None,
        msgspec.Meta(
            description="worktree: run in a git worktree of its own; changes are kept on a "
            "branch and reported"
        ),
    ] = None
    resume: Annotated[
        str | None,
        msgspec.Meta(
            description="Continue a finished sub-agent: its agent_id (from its result). It "
            "goes on from its earlier session with this prompt as the next message; give the "
            "same subagent_type"
        ),
    ] = None
    max_turns: (
        Annotated[
            int, msgspec.Meta(ge=1, description="Optional lower turn limit than the agent's own")
        ]
        | None
    ) = None
    name: Annotated[
        str | None,
        msgspec.Meta(
            description="A name other agents can message it by (send_message); one already "
            "taken in this run gets a suffix, and the result gives the name used"
        ),
    ] = None


def parse_task_arguments(text: str, *, call_id: str = "") -> DelegationRequest:
    try:
        args: TaskArgs = parse_args("task", TaskArgs, text)
    except ToolError as exc:
        raise ValueError(str(exc)) from None
    if not args.prompt.strip():
        raise ValueError("task needs a non-empty prompt: the sub-agent sees nothing else")
    name = check_name(args.name.strip()) if args.name else ""
    return DelegationRequest(
        agent_type=args.subagent_type,
        prompt=args.prompt,
        description=args.description,
        background=args.background,
        model=args.model,
        max_turns=args.max_turns,
        isolation=args.isolation,
        call_id=call_id,
        resume=(args.resume or "").strip(),
        name=name,
    )


def task_tool_spec(
    registry: AgentRegistry, *, allowed: Callable[[str], bool] | None = None
) -> ToolSpec:
    """The task tool as the model sees it, built from what is registered right now;
    `allowed` (an agent's Task(a, b) limit) keeps only the agent types it accepts."""
    definitions = registry.definitions()
    if allowed is not None:
        definitions = [d for d in definitions if allowed(d.name)]
    lines = [
        "Delegate a well-bounded task to a sub-agent. Each sub-agent runs in its own process "
        "with its own context and a restricted tool set, and returns one final report.",
        "The sub-agent cannot see this conversation: the prompt is all it knows.",
        "Independent tasks can be issued together in one message: they run in parallel.",
        "",
        "Available sub-agents:",
    ]
    forking = False
    for definition in definitions:
        note = ""
        if definition.context == "fork":
            note = " (sees this conversation's completed turns)"
            forking = True
        if definition.background:
            note += " (runs in the background unless background is false)"
        lines.append(f"- {definition.name}: {definition.description.strip()}{note}")
    if forking:
        lines.append("Agents marked as seeing this conversation get its completed turns too.")
    schema = dict(args_schema(TaskArgs))
    properties = dict(schema["properties"])
    properties["subagent_type"] = dict(
        properties["subagent_type"], enum=[d.name for d in definitions]
    )
    schema["properties"] = properties
    return ToolSpec(name="task", description="\n".join(lines), parameters=schema)
