"""``send_message`` and ``list_agents``: the main agent's tools, and the same two answered
by the parent for a sub-agent whose definition grants them (Claude Code's
``SendMessage``), with the same arguments, checks and words."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated, Any, Literal, Protocol

import msgspec
from agentcell.orchestrator.teams._board import RunHook, TeamTasksArgs
from agentcell.orchestrator.teams._mail import Team
from agentcell.orchestrator.teams._roster import MAIN
from agentcell.protocol import Message, RemoteTool, UserMessage
from agentcell.worker.tools import Tool, ToolContext, ToolError, ToolOutput, args_schema, parse_args

SEND_MESSAGE = "send_message"
LIST_AGENTS = "list_agents"
TEAM_TASKS = "team_tasks"
#: The team tools, as an agent file's ``tools:`` names them after mapping.
TEAM_TOOLS: frozenset[str] = frozenset({SEND_MESSAGE, LIST_AGENTS, TEAM_TASKS})


class SendMessageArgs(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    to: Annotated[
        str | list[str],
        msgspec.Meta(
            description='Who gets it: an agent\'s name or id, a list of them, or "*" for '
            "every running agent in your reach (list_agents shows them)"
        ),
    ]
    message: Annotated[str, msgspec.Meta(description="The message's text")] = ""
    type: Annotated[
        Literal["message", "shutdown_request"],
        msgspec.Meta(description="shutdown_request ends the recipients (no message needed)"),
    ] = "message"
    summary: Annotated[str, msgspec.Meta(description="A few words on it, for display")] = ""
    interrupt: Annotated[
        bool,
        msgspec.Meta(
            description="Deliver now: a recipient waiting on its model has that call "
            "cancelled and reads the message at once (use sparingly)"
        ),
    ] = False


class ListAgentsArgs(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    pass


SEND_DESCRIPTION = (
    "Send a message to other agents of this run: a running sub-agent reads it before its "
    "next model request, the main agent at its next turn. You reach your siblings, your "
    "parent and your own sub-agents. The result says what happened to it."
)
LIST_DESCRIPTION = (
    "List this run's agents: name, id, type and state, and which of them you may message."
)
TASKS_DESCRIPTION = (
    "The team's shared task list, kept for every agent of this run: create a task, update "
    "one (status, owner, activeForm, blockedBy), list them, or get one by its taskId."
)


async def _no_hooks(event: str, payload: dict[str, Any]) -> tuple[bool, str]:
    return False, ""


class _Hooks(Protocol):
    def run(self, event: str, payload: dict[str, Any]) -> Awaitable[Any]: ...


def hooks_of(runner: _Hooks, agent: tuple[str, str] | None = None) -> RunHook:
    """The hooks of ``runner`` (a ``HookRunner``) as the task list runs them; a
    sub-agent's payload names it (``agent``: its id and type), the main agent's does not."""

    async def run(event: str, payload: dict[str, Any]) -> tuple[bool, str]:
        if agent is not None:
            payload = {**payload, "agent_id": agent[0], "agent_type": agent[1]}
        outcome = await runner.run(event, payload)
        return bool(outcome.blocked), str(outcome.reason)

    return run


def team_remote_tools(granted: set[str]) -> list[RemoteTool]:
    """The team tools a sub-agent is granted, as the parent answers them for it."""
    found = []
    if SEND_MESSAGE in granted:
        found.append(
            RemoteTool(
                name=SEND_MESSAGE,
                description=SEND_DESCRIPTION,
                parameters=args_schema(SendMessageArgs),
                read_only=True,  # text to an agent: it changes nothing, grants nothing
            )
        )
    if LIST_AGENTS in granted or SEND_MESSAGE in granted:  # whom may I message?
        found.append(
            RemoteTool(
                name=LIST_AGENTS,
                description=LIST_DESCRIPTION,
                parameters=args_schema(ListAgentsArgs),
                read_only=True,
            )
        )
    if TEAM_TASKS in granted:
        found.append(
            RemoteTool(
                name=TEAM_TASKS,
                description=TASKS_DESCRIPTION,
                parameters=args_schema(TeamTasksArgs),
                read_only=True,  # the list is the team's notes: no file, no grant
            )
        )
    return found


async def answer_team_tool(
    team: Team | None,
    caller: tuple[str, str],
    tool: str,
    arguments: str,
    hook: RunHook = _no_hooks,
) -> ToolOutput:
    """``tool`` called by ``caller`` (an agent id, and its tool call's id: the main agent,
    or a sub-agent through the parent); ``hook`` runs the caller's TaskCreated and
    TaskCompleted hooks."""
    agent_id, call = caller
    if team is None:
        return ToolOutput(f"{tool}: this run has no team (it is not an orchestrator run)", True)
    try:
        if tool == LIST_AGENTS:
            parse_args(tool, ListAgentsArgs, arguments)
            return ToolOutput(roster_text(team, agent_id))
        if tool == TEAM_TASKS:
            tasks: TeamTasksArgs = parse_args(tool, TeamTasksArgs, arguments)
            member = team.roster.members.get(agent_id)
            name = member.address if member is not None else agent_id
            return ToolOutput(*await team.board.act(tasks, name, hook))
        args: SendMessageArgs = parse_args(tool, SendMessageArgs, arguments)
    except ToolError as exc:
        return ToolOutput(str(exc), True)
    if args.type == "shutdown_request":
        return ToolOutput(*team.shut_down(agent_id, args.to))
    return ToolOutput(*team.send(agent_id, args.to, args.message, call, interrupt=args.interrupt))


def roster_text(team: Team, agent_id: str) -> str:
    roster = team.roster
    me = roster.members.get(agent_id)
    lines = ["name | id | type | state | you may message it"]
    for member in roster.members.values():
        reach = (
            "you"
            if member.agent_id == agent_id
            else ("yes" if me is not None and roster.may_reach(me, member) else "no")
        )
        lines.append(
            f"{member.name or '-'} | {member.agent_id} | {member.agent_type} | "
            f"{member.state} | {reach}"
        )
    lines.append(
        "Each agent may message its siblings (started by the same agent), the agent that "
        "started it, and the agents it started."
    )
    return "\n".join(lines)


class _TeamTool(Tool):
    """One of the two, for the main agent (it runs in the parent)."""

    concurrency_safe = True

    def __init__(self, team: Team | None, hook: RunHook = _no_hooks) -> None:
        self._team = team
        self._hook = hook

    def parse_args(self, arguments: str) -> str:
        return arguments  # checked in ``answer_team_tool``, as a sub-agent's are

    async def execute(self, args: str, ctx: ToolContext) -> ToolOutput:
        caller = (MAIN, ctx.call_id)
        return await answer_team_tool(self._team, caller, self.name, args, self._hook)


class SendMessageTool(_TeamTool):
    name = SEND_MESSAGE
    description = SEND_DESCRIPTION
    Args = SendMessageArgs
    read_only = True  # a message is text: never an approval, never a grant


class ListAgentsTool(_TeamTool):
    name = LIST_AGENTS
    description = LIST_DESCRIPTION
    Args = ListAgentsArgs
    read_only = True


class TeamTasksTool(_TeamTool):
    name = TEAM_TASKS
    description = TASKS_DESCRIPTION
    Args = TeamTasksArgs
    read_only = True


def main_team_tools(team: Team | None, hook: RunHook = _no_hooks) -> list[Tool]:
    """The main agent's team tools (always offered; without a team they say so)."""
    return [SendMessageTool(team), ListAgentsTool(team), TeamTasksTool(team, hook)]


def mail_for_main(
    team: Team | None, replaying: Callable[[], bool]
) -> Callable[[Any], Awaitable[list[Message]]]:
    """Turn hook: the main agent's messages, once each, join its next model request
    (while its turns are ``replaying``, the ones it took then)."""

    async def deliver(session: Any) -> list[Message]:
        texts = team.for_main(replaying()) if team is not None else []
        return [UserMessage(content="\n\n".join(texts))] if texts else []

    return deliver
