"""Compaction: a long sub-agent's older turns summarised by its own model, so that it does
not die at its context limit (Claude Code's auto-compact).

At a turn boundary, when the conversation passes ``threshold_tokens`` (the last model
call's reported prompt plus answer, or an estimate where the provider reports none), the
turns between the task (the first user message) and the recent ones are sent to the
agent's model with a request for a summary; the session becomes the task with that
summary, then the recent turns unchanged. The cut never falls between a tool call and
its result: the recent part starts at an assistant message. PreCompact hooks (the
parent's) run first, and one that blocks skips it until the next turn's check. The full
history is kept here (``full_history``), the compacted one is the session: the record
keeps both, and ``resume`` continues the compacted one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

from agentcell.protocol import (
    AssistantMessage,
    Message,
    SystemMessage,
    ToolMessage,
    UserMessage,
)
from agentcell.worker.engine._session import Session
from agentcell.worker.models import Model, ModelRequest
from agentcell.worker.models._base import ModelResponse

#: A token is about four characters of English or code: the estimate where no usage comes.
CHARS_PER_TOKEN = 4
#: How much of one tool result the summariser sees (the rest is old output).
SUMMARY_TOOL_RESULT_CHARS = 4_000
SUMMARY_HEADER = "[Earlier turns of this conversation were compacted; their summary follows.]"
SUMMARY_INSTRUCTIONS = (
    "You are compacting the history of an agent's work so that it can go on within its "
    "context window. Write a summary of the conversation below for the same agent: the "
    "task, what was done and found (files, commands, results, errors and their fixes), "
    "decisions made, and what remains to do. Keep exact names, paths and values. Answer "
    "with the summary only."
)

#: Runs the PreCompact hooks (the parent's) before a compaction: the payload's fields →
#: whether one blocked it (exit 2, ``"decision": "block"``).
PreCompact = Callable[[dict[str, Any]], Awaitable[bool]]
#: Told of each compaction: (the full history before it, the summary, the new session).
OnCompacted = Callable[[list[Message], str, list[Message]], None]


class Engine(Protocol):
    """What compaction needs of the engine (``_engine.Engine``), without importing it."""

    model: Model
    system_prompt: str
    last_context_tokens: int

    @property
    def max_output_tokens(self) -> int | None: ...

    def count_usage(self, response: ModelResponse) -> None: ...


def estimate_tokens(messages: Sequence[Message]) -> int:
    chars = 0
    for message in messages:
        chars += len(getattr(message, "content", "") or "")
        if isinstance(message, AssistantMessage):
            chars += sum(len(call.name) + len(call.arguments) for call in message.tool_calls)
    return chars // CHARS_PER_TOKEN


@dataclasses.dataclass(slots=True)
class Compactor:
    """Called by the engine before each model call (``Attachments.compactor``)."""

    threshold_tokens: int
    keep_recent_tokens: int = 0  # 0: a quarter of the threshold
    keep_recent_turns: int = 2  # at most this many assistant turns stay as they were
    pre_compact: PreCompact | None = None
    on_compacted: OnCompacted | None = None
    compactions: int = 0
    _prefix: list[Message] = dataclasses.field(default_factory=list)
    _task: str = ""

    def full_history(self, session: Session) -> list[Message]:
        """Every message of the run, as if nothing had been compacted."""
        if not self.compactions:
            return list(session.messages)
        return self._prefix + session.messages[1:]  # [0] is the task with the summary

    async def __call__(self, engine: Engine, session: Session) -> None:
        system = [SystemMessage(content=engine.system_prompt)] if engine.system_prompt else []
        used = engine.last_context_tokens or estimate_tokens(system + session.messages)
        if self.threshold_tokens <= 0 or used < self.threshold_tokens:
            return
        messages = session.messages
        head = 1 if messages and isinstance(messages[0], UserMessage) else 0
        cut = self._cut(messages, head)
        if cut is None:
            return  # nothing old enough to summarise: the recent turns are all there is
        if self.pre_compact is not None:
            blocked = await self.pre_compact({"trigger": "auto", "custom_instructions": ""})
            if blocked:  # as Claude Code's proactive compaction: skipped, for this turn
                return
        summary = await self._summarise(engine, messages[:cut])
        full = self.full_history(session)
        recent = list(messages[cut:])
        if not self.compactions:  # later ones keep the task, not the summary before
            self._task = _task_text(messages[0]) if head else ""
        task = self._task
        opening = f"{task}\n\n" if task else ""
        compacted = [UserMessage(content=f"{opening}{SUMMARY_HEADER}\n\n{summary}"), *recent]
        self._prefix = full[: len(full) - len(recent)]
        session.replace(compacted)
        self.compactions += 1
        engine.last_context_tokens = 0  # unknown until the next call: estimated meanwhile
        if self.on_compacted is not None:
            self.on_compacted(full, summary, compacted)

    def _cut(self, messages: Sequence[Message], head: int) -> int | None:
        """Where the recent part starts: an assistant message, after at least one older
        message, keeping about ``keep_recent_tokens`` and always the last turn."""
        keep = self.keep_recent_tokens or self.threshold_tokens // 4
        last_turn = max(
            (i for i, m in enumerate(messages) if isinstance(m, AssistantMessage)), default=-1
        )
        if last_turn <= head:
            return None
        kept = estimate_tokens(messages[last_turn:])
        cut, turns = last_turn, 1
        for index in range(last_turn - 1, head, -1):
            kept += estimate_tokens([messages[index]])
            if kept > keep or turns >= self.keep_recent_turns:
                break
            if isinstance(messages[index], AssistantMessage):
                cut, turns = index, turns + 1
        return cut if cut > head else None

    async def _summarise(self, engine: Engine, older: Sequence[Message]) -> str:
        request = ModelRequest(
            messages=[
                SystemMessage(content=SUMMARY_INSTRUCTIONS),
                UserMessage(content=render_for_summary(older)),
            ],
            tools=[],
            max_output_tokens=engine.max_output_tokens,
        )
        response: ModelResponse | None = None
        async for item in engine.model.stream(request):
            if isinstance(item, ModelResponse):
                response = item
        if response is None or not response.text.strip():
            raise RuntimeError("the model gave no summary")
        engine.count_usage(response)
        return response.text.strip()


def render_for_summary(messages: Sequence[Message]) -> str:
    """The older turns as plain text for the summariser (long tool results cut)."""
    lines = ["The conversation so far:"]
    for message in messages:
        if isinstance(message, UserMessage):
            lines.append(f"\n[user]\n{message.content}")
        elif isinstance(message, AssistantMessage):
            if message.content:
                lines.append(f"\n[assistant]\n{message.content}")
            for call in message.tool_calls:
                lines.append(f"\n[assistant calls {call.name}] {call.arguments}")
        elif isinstance(message, ToolMessage):
            content = message.content
            if len(content) > SUMMARY_TOOL_RESULT_CHARS:
                content = content[:SUMMARY_TOOL_RESULT_CHARS] + " [... cut]"
            failed = " (failed)" if message.is_error else ""
            lines.append(f"\n[result of {message.name}{failed}]\n{content}")
    lines.append("\nSummarise it as instructed.")
    return "\n".join(lines)


def _task_text(message: Message) -> str:
    return str(getattr(message, "content", "") or "")
