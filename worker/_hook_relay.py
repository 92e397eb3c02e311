"""A sub-agent's side of the parent's lifecycle hooks (``PreToolUse``, ``PostToolUse``).

The hooks are the user's own commands and run in the parent, outside this process's
sandbox. The parent says in ``AgentSpec.hooked_tools`` which tools each event has a hook
for; only those calls cross the pipe, so a run without hooks pays nothing.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from agentcell.protocol import HookReply, ToolCall
from agentcell.worker._hooks import Decision, Hook, Verdict
from agentcell.worker.tools import Tool, ToolOutput

#: ``ChildLink.run_hooks``: (event, call_id=, tool=, arguments=, response=, is_error=) →
#: the parent's answer.
HookAsker = Callable[..., Awaitable[HookReply]]


class RelayedHooks(Hook):
    """Ask the parent to run its hooks around each matching call."""

    def __init__(self, hooked: Mapping[str, Sequence[str]], ask: HookAsker) -> None:
        self.pre = frozenset(hooked.get("PreToolUse", ()))
        self.post = frozenset(hooked.get("PostToolUse", ()))
        self.ask = ask
        self._context: dict[str, str] = {}  # call id → PreToolUse's additionalContext

    async def before_tool(self, call: ToolCall, tool: Tool, args: Any) -> Verdict | None:
        if call.name not in self.pre:
            return None
        reply = await self.ask(
            "PreToolUse", call_id=call.id, tool=call.name, arguments=call.arguments
        )
        if reply.blocked:
            return Verdict(Decision.DENY, reply.reason or "blocked by a PreToolUse hook")
        if reply.context:
            self._context[call.id] = reply.context
        return None

    async def after_tool(self, call: ToolCall, tool: Tool, output: ToolOutput) -> ToolOutput:
        notes = [self._context.pop(call.id, "")]
        if call.name in self.post:
            reply = await self.ask(
                "PostToolUse",
                call_id=call.id,
                tool=call.name,
                arguments=call.arguments,
                response=output.content,
                is_error=output.is_error,
            )
            if reply.blocked:
                notes.append(f"PostToolUse hook: {reply.reason or 'blocked'}")
            notes.append(reply.context)
        extra = "\n".join(note for note in notes if note)
        if not extra:
            return output
        return ToolOutput(f"{output.content}\n\n{extra}", output.is_error)
