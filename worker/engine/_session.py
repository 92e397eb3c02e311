"""An agent's conversation memory: fresh for every run, in memory only."""

from __future__ import annotations

from collections.abc import Iterable

from agentcell.protocol import AssistantMessage, Message, ToolMessage


class Session:
    """The messages of one agent's run, in order (the system prompt is not stored here)."""

    __slots__ = ("_messages",)

    def __init__(self, messages: Iterable[Message] = ()) -> None:
        self._messages: list[Message] = list(messages)

    @property
    def messages(self) -> list[Message]:
        """The live list (read it; change it only through ``add``/``extend``)."""
        return self._messages

    def add(self, message: Message) -> None:
        self._messages.append(message)

    def extend(self, messages: Iterable[Message]) -> None:
        self._messages.extend(messages)

    def replace(self, messages: Iterable[Message]) -> None:
        """The whole history at once (compaction: a summary in place of older turns)."""
        self._messages[:] = list(messages)

    def snapshot(self) -> list[Message]:
        """A copy of the history (the structs are immutable in practice: never edited)."""
        return list(self._messages)

    def completed_turns(self) -> list[Message]:
        """The history without the turn in flight.

        While a tool call runs, the last assistant message still waits for some of its
        tool results; a forked sub-agent sees everything before that message.
        """
        messages = self._messages
        answered: set[str] = set()
        for index in range(len(messages) - 1, -1, -1):
            message = messages[index]
            if isinstance(message, ToolMessage):
                answered.add(message.tool_call_id)
            elif isinstance(message, AssistantMessage):
                if any(call.id not in answered for call in message.tool_calls):
                    return messages[:index]
                break
        return list(messages)

    def __len__(self) -> int:
        return len(self._messages)
