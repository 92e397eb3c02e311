"""The parent's approval channel: one place where a person (or a policy) says yes or no.

Requests from the main agent and from foreground sub-agents are tagged with the agent and
the tool call and answered one at a time, in arrival order. A background sub-agent's
request is denied without asking (fail-closed) unless the operator chose to bubble them
up to the channel.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import sys
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Protocol, TextIO

from agentcell.orchestrator.approvals._question import (
    always_scope,
    flat,
    keys_line,
    question_lines,
    scope_words,
)

if TYPE_CHECKING:
    from agentcell.orchestrator.journal._journal import Journal


@dataclasses.dataclass(frozen=True, slots=True)
class ApprovalQuery:
    agent_id: str
    agent_type: str
    tool: str
    arguments: str  # JSON text
    reason: str
    call_id: str = ""
    background: bool = False


@dataclasses.dataclass(frozen=True, slots=True)
class ApprovalAnswer:
    approved: bool
    reason: str = ""
    always: bool = False  # approved for this tool from this agent type, for the session


class ApprovalChannel(Protocol):
    async def ask(self, query: ApprovalQuery) -> ApprovalAnswer: ...


class AllowAll:
    async def ask(self, query: ApprovalQuery) -> ApprovalAnswer:
        return ApprovalAnswer(True)


class DenyAll:
    def __init__(self, reason: str = "approvals are set to deny (--approve deny)") -> None:
        self.reason = reason

    async def ask(self, query: ApprovalQuery) -> ApprovalAnswer:
        return ApprovalAnswer(False, self.reason)


class CallbackChannel:
    """Answers with a function (sync or async) of the query: handy in tests and scripts."""

    def __init__(self, decide: Callable[[ApprovalQuery], object]) -> None:
        self.decide = decide

    async def ask(self, query: ApprovalQuery) -> ApprovalAnswer:
        answer = self.decide(query)
        if asyncio.iscoroutine(answer):
            answer = await answer
        if isinstance(answer, ApprovalAnswer):
            return answer
        return ApprovalAnswer(bool(answer), "" if answer else "refused")


class TerminalPrompt:
    """Asks on the terminal: yes, no, or always (for this tool from this agent type — or
    the main agent — for the rest of the session).

    The question names the agent, the tool and the exact command or path, and shows the
    keys literally. ``hold`` is entered while the question is open: the command line
    passes its live display's, so that nothing redraws over the question.
    """

    def __init__(
        self,
        *,
        read_line: Callable[[str], Awaitable[str]] | None = None,
        out: TextIO | None = None,
        hold: Callable[[], contextlib.AbstractContextManager[object]] | None = None,
    ) -> None:
        self._read_line = read_line or _read_tty_line
        self._out = out or sys.stderr
        self._hold = hold or contextlib.nullcontext
        # (scope, tool): "always" covers the agent type that asked (or the main agent).
        self.always: set[tuple[tuple[str, str], str]] = set()

    async def ask(self, query: ApprovalQuery) -> ApprovalAnswer:
        if (always_scope(query.agent_id, query.agent_type), query.tool) in self.always:
            return ApprovalAnswer(True, "always allowed this session")
        with self._hold():
            return await self._ask(query)

    async def _ask(self, query: ApprovalQuery) -> ApprovalAnswer:
        prompt = question_text(query)
        while True:
            try:
                line = await self._read_line(prompt)
            except EOFError:
                return ApprovalAnswer(False, "no answer (input closed)")
            choice = line.strip().lower()
            if choice in ("y", "yes"):
                return ApprovalAnswer(True)
            if choice in ("n", "no", ""):
                return ApprovalAnswer(False, "the user said no")
            if choice in ("a", "always"):
                self.always.add((always_scope(query.agent_id, query.agent_type), query.tool))
                return ApprovalAnswer(True, always=True)
            print("  please answer y, n or a", file=self._out, flush=True)
            prompt = _keys(query)


def question_text(query: ApprovalQuery) -> str:
    """The whole question, plain text, one field a line (see ``_approval_question``): who,
    what exactly, why, what "always" covers, and the keys (last line)."""
    who = (
        "main agent"
        if query.agent_id == "main"
        else f"{flat(query.agent_type, 64)} ({flat(query.agent_id, 32)}"
        + (", background)" if query.background else ")")
    )
    lines = question_lines(
        who=who,
        tool=query.tool,
        arguments=query.arguments,
        reason=query.reason,
        scope=scope_words(query.agent_id, query.agent_type),
    )
    return "\n" + "\n".join(lines) + "\n" + _keys(query)


def _keys(query: ApprovalQuery) -> str:
    return keys_line(query.tool)


async def _read_tty_line(prompt: str) -> str:
    sys.stderr.write(prompt)
    sys.stderr.flush()
    line = await asyncio.to_thread(sys.stdin.readline)
    if not line:
        raise EOFError
    return line


class ApprovalBroker:
    """Serialises questions to one channel and applies the background policy."""

    def __init__(self, channel: ApprovalChannel, *, bubble_background: bool = False) -> None:
        self.channel = channel
        self.bubble_background = bubble_background
        self._turn = asyncio.Lock()  # FIFO: waiters are woken in arrival order
        self.restored: set[tuple[tuple[str, str], str]] = set()  # see restore
        # Told of each question as it is asked (the Notification hooks), before it waits.
        self.notify: Callable[[ApprovalQuery], Awaitable[None]] | None = None

    async def decide(self, query: ApprovalQuery, journal: Journal | None = None) -> ApprovalAnswer:
        """The channel's answer (``journal``: the run's, which keeps it); an "always"
        the killed run was given holds in its resume without asking."""
        if (always_scope(query.agent_id, query.agent_type), query.tool) in self.restored:
            return ApprovalAnswer(True, "always allowed in this session (before its resume)")
        answer = await self._decide(query)
        if journal is not None:
            journal.fact(
                "approval",
                agent=query.agent_id,
                agent_type=query.agent_type,
                tool=query.tool,
                call=query.call_id,
                approved=answer.approved,
                always=answer.always,
            )
        return answer

    def restore(self, always: Iterable[tuple[str, str, str]]) -> None:
        """A resume: the (agent id, agent type, tool) the killed run's user allowed
        "always" hold again, without asking."""
        self.restored.update((always_scope(a, t), tool) for a, t, tool in always)

    async def _decide(self, query: ApprovalQuery) -> ApprovalAnswer:
        if query.background and not self.bubble_background:
            return ApprovalAnswer(
                False,
                "background sub-agents cannot ask for approval (fail-closed); run it in the "
                "foreground, or start agentcell with --approve bubble",
            )
        if self.notify is not None:
            await self.notify(query)
        async with self._turn:
            return await self.channel.ask(query)
