"""A sub-agent run's ``SubagentStop`` event, and Claude Code's ``TeammateIdle`` at the
same moment: asked over the pipe before the sub-agent accepts its final answer."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from agentcell.orchestrator.approvals._hooks import HookOutcome, HookRunner
from agentcell.worker import MAX_STOP_HOOK_CONTINUATIONS


class SubagentStopHooks:
    """One sub-agent run's ``SubagentStop`` event, as Claude Code has it: a matching hook
    (matcher: the agent type) decides, before the sub-agent accepts its final answer,
    whether it may stop. The child asks over the pipe (``relayed``); the hook runs here.

    Each stop the child reaches is asked once. The after-the-fact run (``ended``) happens
    only when the run's last stop was not asked: a crash, a timeout, max_turns after a
    block, a cancel. Then the child cannot go on, so that run is a notification and
    cannot block. Either way the hook sees the run's end exactly once."""

    def __init__(
        self,
        hooks: HookRunner,
        *,
        agent_id: str,
        agent_type: str,
        transcript: str = "",
        idle: Callable[[], tuple[str, list[str]]] | None = None,
    ) -> None:
        self.hooks = hooks
        self.agent_id = agent_id
        self.agent_type = agent_type
        self.transcript = transcript
        # A named teammate's name and whom it owes an answer: its stop is Claude Code's
        # TeammateIdle moment when it owes any.
        self.idle = idle
        self.blocks = 0  # in a row: each one sent the sub-agent back to work
        self.settled = False  # the run's last stop was asked: no after-the-fact run
        self._turn = asyncio.Lock()  # a child's stops come one at a time
        self.open = False  # a stop is being decided: a real child never asks twice at once

    def relayed_events(self) -> dict[str, list[str]]:
        """For ``AgentSpec.hooked_tools``: relay this agent's stops, when a hook matches it."""
        idle_hooked = self.idle is not None and self.hooks.matching("TeammateIdle", "")
        if self.hooks.matching("SubagentStop", self.agent_type) or idle_hooked:
            return {"SubagentStop": [self.agent_type]}
        return {}

    def claim(self) -> bool:
        """Take the one open stop a child may have; False if one is open already (a
        burst of forged requests, each holding up to a frame of text, is refused rather
        than queued)."""
        if self.open:
            return False
        self.open = True
        return True

    async def relayed(self, last_message: str) -> HookOutcome:
        """The child is about to stop with ``last_message``: may it?"""
        async with self._turn:
            if self.settled:  # a child asking past its end (or past the cap) is not heard
                return HookOutcome()
            outcome = await self._teammate_idle()
            if not outcome.blocked:
                outcome = await self.hooks.run(
                    "SubagentStop", self._payload(last_message), self.agent_type
                )
            if outcome.blocked:
                self.blocks += 1
                # The child ends the run itself past the cap; this was its last stop.
                self.settled = self.blocks > MAX_STOP_HOOK_CONTINUATIONS
            else:
                self.settled = True
            return outcome

    async def _teammate_idle(self) -> HookOutcome:
        """Claude Code's TeammateIdle: a named teammate stopping with messages it has not
        answered; exit 2 sends its words back to it, and it goes on."""
        name, owed = self.idle() if self.idle is not None else ("", [])
        if not name or not owed:
            return HookOutcome()
        payload = {
            "teammate_name": name,
            "unanswered": owed,
            "agent_id": self.agent_id,
            "agent_type": self.agent_type,
        }
        return await self.hooks.run("TeammateIdle", payload)

    async def ended(self, last_message: str) -> None:
        """The run is over: tell the hooks, unless its last stop already did."""
        if self.settled:
            return
        self.settled = True
        await self.hooks.run("SubagentStop", self._payload(last_message), self.agent_type)

    def _payload(self, last_message: str) -> dict[str, Any]:
        payload: dict[str, Any] = {
            "agent_id": self.agent_id,
            "agent_type": self.agent_type,
            "last_assistant_message": last_message,
            "stop_hook_active": self.blocks > 0,
        }
        if self.transcript:
            payload["agent_transcript_path"] = self.transcript
        return payload
