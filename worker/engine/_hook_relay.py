"""A sub-agent's side of the parent's lifecycle hooks (``PreToolUse``, ``PostToolUse``,
``SubagentStop``).

The hooks are the user's own commands and run in the parent, outside this process's
sandbox. The parent says in ``AgentSpec.hooked_tools`` which tools each event has a hook
for (and, under ``SubagentStop``, this agent's type when a stop hook matches it); only
those calls cross the pipe, so a run without hooks pays nothing. The MCP tools this child
starts are unknown to the parent when it builds the spec: ``AgentSpec.hook_patterns``
carries each event's matchers and the child matches them against its own MCP tools' names.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from agentcell.protocol import (
    AssistantMessage,
    HookReply,
    Message,
    RunStatus,
    ToolCall,
    UserMessage,
)
from agentcell.worker.engine._loop import StopRun, TurnHook
from agentcell.worker.engine._session import Session
from agentcell.worker.mcp._client import MCP_PREFIX
from agentcell.worker.rules._policy import Decision, Hook, Verdict
from agentcell.worker.tools import Tool, ToolOutput

#: ``ChildLink.run_hooks``: (event, call_id=, tool=, arguments=, response=, is_error=) →
#: the parent's answer.
HookAsker = Callable[..., Awaitable[HookReply]]

#: How many times in a row a ``SubagentStop`` hook may send the sub-agent back to work
#: (Claude Code ends a turn after 8 consecutive stop-hook blocks too). The next block
#: ends the run as an error, so a hook that never lets go cannot keep it going.
MAX_STOP_HOOK_CONTINUATIONS = 8


#: A matcher of only these characters is a name, or a list of names separated by "|"
#: or "," with optional spaces around them (Claude Code ≥ 2.1.195; earlier ones read
#: "-", "," and spaces as a regular expression).
_LITERAL_MATCHER = re.compile(r"[A-Za-z0-9_\-, |]+")
_LITERAL_SEPARATOR = re.compile(r"\s*[|,]\s*")


def _literal_names(matcher: str) -> list[str]:
    return [name for name in _LITERAL_SEPARATOR.split(matcher.strip()) if name]


def matcher_matches(matcher: str, name: str) -> bool:
    """Claude Code's hook matcher, as its hooks reference states it: "" or "*" match
    every tool; a matcher of only letters, digits, "_", "-", spaces, "," and "|" is a
    name or a list of names, matched exactly ("Bash", "Edit|Write", "Edit, Write",
    "code-reviewer" but not "senior-code-reviewer"); any other is a regular expression
    searched for anywhere in the name, as JavaScript's ``new RegExp(m).test(name)`` does
    ("^Notebook" matches NotebookEdit, "mcp__github__.*" every tool of that server). One
    that is not a valid expression matches nothing (``matcher_problem`` names it when
    the hooks are read)."""
    if matcher in ("", "*"):
        return True
    if _LITERAL_MATCHER.fullmatch(matcher):
        return name in _literal_names(matcher)
    try:
        return re.search(matcher, name) is not None
    except re.error:
        return False


def matcher_problem(matcher: str) -> str:
    """Why ``matcher`` can match no tool ("" if it may): not a valid expression; an
    MCP server's name alone, which is exact (its tools are ``mcp__SERVER__TOOL``); a
    name with a space inside, which no tool has. Claude Code takes each as silently as it
    is taken here, but a guard that never fires should be said."""
    if matcher in ("", "*"):
        return ""
    if _LITERAL_MATCHER.fullmatch(matcher):
        names = _literal_names(matcher)
        spaced = [n for n in names if " " in n]
        if spaced:
            return (
                f"matcher {matcher!r} names {spaced[0]!r}, and no tool's name has a space: "
                "separate names with | or ,"
            )
        server = [n for n in names if n.startswith("mcp__") and "__" not in n[5:]]
        if not server:
            return ""
        return (
            f"matcher {matcher!r} names {server[0]!r} exactly, and MCP tools are named "
            f"mcp__SERVER__TOOL: it matches none of them; write {server[0]}__.* for every "
            "tool of that server"
        )
    try:
        re.compile(matcher)
    except re.error as exc:
        return f"matcher {matcher!r} is not a valid regular expression ({exc}): it matches no tool"
    if " " in matcher:
        return (
            f"matcher {matcher!r} has spaces, which no tool name has: write it without them "
            f"({matcher.replace(' ', '')!r})"
        )
    return ""


class RelayedHooks(Hook):
    """Ask the parent to run its hooks around each matching call."""

    rewrites_input = True  # a PreToolUse hook's updatedInput

    def __init__(
        self,
        hooked: Mapping[str, Sequence[str]],
        ask: HookAsker,
        patterns: Mapping[str, Sequence[str]] | None = None,
    ) -> None:
        self.pre = frozenset(hooked.get("PreToolUse", ()))
        self.post = frozenset(hooked.get("PostToolUse", ()))
        self.patterns = {event: list(found) for event, found in (patterns or {}).items()}
        self.ask = ask
        self._context: dict[str, str] = {}  # call id → PreToolUse's additionalContext

    def relays(self, event: str, name: str) -> bool:
        """Does a parent hook of ``event`` want this call?"""
        if name in (self.pre if event == "PreToolUse" else self.post):
            return True
        return name.startswith(MCP_PREFIX) and any(
            matcher_matches(m, name) for m in self.patterns.get(event, ())
        )

    async def before_tool(self, call: ToolCall, tool: Tool, args: Any) -> Verdict | None:
        if not self.relays("PreToolUse", call.name):
            return None
        reply = await self.ask(
            "PreToolUse", call_id=call.id, tool=call.name, arguments=call.arguments
        )
        _stop_if_asked(reply, "PreToolUse")
        if reply.blocked:
            return Verdict(Decision.DENY, reply.reason or "blocked by a PreToolUse hook")
        if reply.context:
            self._context[call.id] = reply.context
        rewrite = reply.updated_input or None
        if reply.decision == "ask":
            return Verdict(Decision.ASK, reply.reason or "a PreToolUse hook asks", rewrite)
        if rewrite is not None:
            return Verdict(Decision.ALLOW, arguments=rewrite)
        return None

    async def after_tool(self, call: ToolCall, tool: Tool, output: ToolOutput) -> ToolOutput:
        notes = [self._context.pop(call.id, "")]
        if self.relays("PostToolUse", call.name):
            reply = await self.ask(
                "PostToolUse",
                call_id=call.id,
                tool=call.name,
                arguments=call.arguments,
                response=output.content,
                is_error=output.is_error,
            )
            _stop_if_asked(reply, "PostToolUse")
            if reply.updated_output is not None:  # updatedToolOutput: the model sees this
                output = ToolOutput(reply.updated_output, output.is_error)
            if reply.blocked:
                notes.append(f"PostToolUse hook: {reply.reason or 'blocked'}")
            notes.append(reply.context)
        extra = "\n".join(note for note in notes if note)
        if not extra:
            return output
        return ToolOutput(f"{output.content}\n\n{extra}", output.is_error)


def _stop_if_asked(reply: HookReply, event: str) -> None:
    """A hook's ``"continue": false``: the agent stops here, whatever the call did."""
    if reply.stop:
        raise StopRun(
            RunStatus.DENIED, f"stopped by a {event} hook: {reply.stop_reason or 'no reason given'}"
        )


def relayed_stop_hook(agent_type: str, ask: HookAsker) -> TurnHook:
    """A finish hook: before the engine accepts a final answer, the parent runs its
    ``SubagentStop`` hooks on it. One that blocks (exit 2, ``"decision": "block"``) sends
    its reason back as a user message and the sub-agent goes on; past
    ``MAX_STOP_HOOK_CONTINUATIONS`` in a row the run ends as an error instead. The parent
    keeps ``stop_hook_active`` (it saw every earlier answer)."""
    continued = 0

    async def finish(session: Session) -> Sequence[Message]:
        nonlocal continued
        last = next(
            (m.content for m in reversed(session.messages) if isinstance(m, AssistantMessage)), ""
        )
        reply = await ask("SubagentStop", call_id="", tool=agent_type, arguments="", response=last)
        if not reply.blocked:
            continued = 0
            return []
        reason = reply.reason or "blocked by a SubagentStop hook"
        if continued >= MAX_STOP_HOOK_CONTINUATIONS:
            raise StopRun(
                RunStatus.ERROR,
                f"a SubagentStop hook kept blocking the finish: it sent the sub-agent back "
                f"{continued} times in a row, the cap (MAX_STOP_HOOK_CONTINUATIONS); fix the "
                f"hook's condition. Its last reason: {reason}",
            )
        continued += 1
        return [UserMessage(content=f"SubagentStop hook: {reason}")]

    return finish
