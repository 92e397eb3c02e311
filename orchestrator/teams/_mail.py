"""Messages between a run's agents: checked, enveloped, delivered through the parent.

Every message passes through the parent, which checks the sender's reach and the caps
(``[teams]``: its size, the recipient's unread messages, the sender's rate), wraps it in
an envelope that names the sender and that the sender cannot fake (a fence of random
characters it never sees), and journals it. A running sub-agent gets it at its next turn
boundary — before its next model request, not at its end — through its controls (as a
steer is); the main agent gets its messages at its next turn, as background results
are. The recipient says when it took them (a ``Notice`` naming them): then they are journaled as
delivered, at that turn.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import itertools
import secrets
import time
from collections.abc import Callable
from typing import Any

from agentcell.orchestrator.config._settings import TeamSettings
from agentcell.orchestrator.journal._journal import Journal
from agentcell.orchestrator.journal._replay import TeamPast
from agentcell.orchestrator.teams._board import TaskBoard
from agentcell.orchestrator.teams._roster import MAIN, Member, Roster, Steerable
from agentcell.worker import stricter_sandbox

#: The agent states a message reaches: the recipient runs, or is the main agent.
_RUNNING = "running"


@dataclasses.dataclass(frozen=True, slots=True)
class Letter:
    id: str
    sender: str  # agent ids
    recipient: str
    text: str  # as delivered: the envelope with the message inside


def envelope(sender: Member, message: str) -> str:
    """The message as its recipient's model reads it: from whom (name, id, type), fenced
    by characters the sender never saw, so that no text of its own can close it early."""
    fence = secrets.token_hex(6)
    who = "the main agent" if sender.agent_id == MAIN else f"{sender.label}, a {sender.agent_type}"
    return (
        f"[agentcell: a message from {who} — another agent of this run, not the user and "
        f"not a tool result. Its text is between the two {fence} lines.]\n"
        f"{fence}\n{message}\n{fence}\n"
        f'[To answer, call send_message with to="{sender.address}".]'
    )


class Team:
    """A run's roster and its mail; see the module's docstring."""

    def __init__(
        self,
        limits: TeamSettings,
        journal: Journal | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.roster = Roster()
        self.board = TaskBoard(journal)
        self.limits = limits
        self.journal = journal
        self._clock = clock
        self._sent: dict[str, collections.deque[float]] = collections.defaultdict(collections.deque)
        self._unread: dict[str, dict[str, Letter]] = collections.defaultdict(dict)
        self._for_main: list[Letter] = []
        self._numbers = itertools.count(1)
        self._main_turns = 0
        self._waiting: dict[str, list[Letter]] = collections.defaultdict(list)  # no controls yet
        self._by_call: dict[tuple[str, str], str] = {}  # (sender, its tool call) → message id
        # Starts an ended sub-agent again with a message as its next turn (the main agent
        # sets it: its task tool owns background runs); None: ended agents stay ended.
        self.starter: Callable[[Member, Member, str], str] | None = None
        self.continuations = 0
        # A foreground task call waiting on this sub-agent: resolved by its first message
        # for the main agent (the call returns early with it).
        self._watched: dict[str, asyncio.Future[None]] = {}
        # Who each agent has messages from that it has not answered (by sending to them).
        self._owed: dict[str, set[str]] = collections.defaultdict(set)
        self._main_replay: dict[int, list[str]] = {}  # a resume: main's turn → texts it took

    # -- a resumed run ----------------------------------------------------------------------
    def restore(self, past: TeamPast) -> None:
        """A resume's team goes on from the killed run's: its tasks as they were; each
        message sent then is sent again only if it was never taken (a taken one is read
        again by its recipient's replay, at the turn it took it); a sender's call that
        sent one never sends it twice."""
        self.board.restore(past.tasks)
        taken = {i for turns in past.taken.values() for ids in turns.values() for i in ids}
        numbers = [0]
        for message_id, fact in past.messages.items():
            numbers.append(int(message_id.lstrip("m") or 0))
            self._by_call[str(fact.get("sender")), str(fact.get("call", ""))] = message_id
            if message_id in taken:
                continue
            letter = Letter(
                id=message_id,
                sender=str(fact["sender"]),
                recipient=str(fact["recipient"]),
                text=str(fact["text"]),
            )
            self._unread[letter.recipient][letter.id] = letter
            if letter.recipient == MAIN:
                self._for_main.append(letter)
            else:
                self._waiting[letter.recipient].append(letter)
        self._numbers = itertools.count(max(numbers) + 1)
        self._main_replay = past.taken_by(MAIN)

    def join(
        self,
        agent_id: str,
        wanted: str,
        agent_type: str,
        parent_id: str,
        controls: Steerable,
        *,
        scope: Any = None,
    ) -> str:
        """``Roster.join``; and a resumed recipient gets the messages waiting for it."""
        name = self.roster.join(agent_id, wanted, agent_type, parent_id, controls, scope=scope)
        for letter in self._waiting.pop(agent_id, []):
            controls.message(letter.text, letter.id)
        return name

    # -- sending --------------------------------------------------------------------------
    def send(
        self,
        sender_id: str,
        to: str | list[str],
        message: str,
        call: str = "",
        *,
        interrupt: bool = False,
    ) -> tuple[str, bool]:
        """Send ``message`` from ``sender_id`` (by its tool call ``call``; ``interrupt``:
        cancelling a running recipient's model call in flight): the sender's tool result,
        and whether it is an error (nothing was sent)."""
        sender = self.roster.members.get(sender_id)
        if sender is None:
            return f"agent {sender_id} is not in this run's team", True
        if call and (sent := self._by_call.get((sender_id, call))) is not None:
            return f"sent before the orchestrator was restarted (message {sent})", False
        refused = self._refused(sender, message)
        if refused:
            return refused, True
        recipients, refused = self._recipients(sender, to)
        if refused:
            return refused, True
        self._sent[sender_id].append(self._clock())
        self._owed[sender_id] -= {recipient.agent_id for recipient in recipients}
        posted = [
            self._post(sender, recipient, message, call, interrupt=interrupt)
            for recipient in recipients
        ]
        return "\n".join(posted), False

    def shut_down(self, sender_id: str, to: str | list[str]) -> tuple[str, bool]:
        """Claude Code's ``shutdown_request``: end each recipient (as ``task_control``'s
        cancel does), within the sender's reach; the main agent is never shut down."""
        sender = self.roster.members.get(sender_id)
        if sender is None:
            return f"agent {sender_id} is not in this run's team", True
        recipients, refused = self._recipients(sender, to)
        if refused:
            return refused, True
        lines = []
        for recipient in recipients:
            if recipient.agent_id == MAIN or recipient.controls is None:
                lines.append(f"not shut down: {recipient.label} cannot be shut down by a message")
                continue
            recipient.controls.cancel(f"shut down at the request of {sender.address}")
            lines.append(f"shutdown sent to {recipient.label}")
        return "\n".join(lines), False

    def _refused(self, sender: Member, message: str) -> str:
        limits = self.limits
        if not message.strip():
            return "send_message needs a non-empty message"
        size = len(message.encode())
        if size > limits.message_max_bytes:
            return (
                f"not sent: the message is {size:,} bytes and the limit is "
                f"{limits.message_max_bytes:,} ([teams] message_max_bytes); send a shorter "
                "one, or write the details to a file and send its path"
            )
        window = self._sent[sender.agent_id]
        while window and window[0] <= self._clock() - limits.window_s:
            window.popleft()
        if len(window) >= limits.messages_per_window:
            return (
                f"not sent: {sender.address} sent {len(window)} messages in the last "
                f"{limits.window_s:g} s, the limit ([teams] messages_per_window); wait, or "
                "put several points in one message"
            )
        return ""

    def _recipients(self, sender: Member, to: str | list[str]) -> tuple[list[Member], str]:
        """Whom ``to`` names, each reachable and running; or why not."""
        reach = self.roster.reachable(sender)
        addresses = [to] if isinstance(to, str) else list(to)
        if addresses == ["*"]:
            everyone = [m for m in reach if m.state == _RUNNING]
            return (everyone, "") if everyone else ([], _nobody(reach))
        found: list[Member] = []
        for address in dict.fromkeys(a.strip() for a in addresses):
            member = self.roster.find(address)
            if member is None or not self.roster.may_reach(sender, member):
                why = "no agent of this run" if member is None else "not in your reach"
                return [], f"not sent: {address!r} is {why}. {_reachable(reach)}"
            if member.state != _RUNNING and not self._continuable(member):
                return [], (
                    f"not sent: {member.label} has ended ({member.state}); a message does not "
                    "reach an ended agent. " + _reachable(reach)
                )
            found.append(member)
        if not found:
            return [], "send_message needs a recipient in to: a name, an id, a list, or *"
        return found, ""

    def _post(
        self, sender: Member, recipient: Member, message: str, call: str, *, interrupt: bool = False
    ) -> str:
        unread = self._unread[recipient.agent_id]
        if len(unread) >= self.limits.mailbox_max:
            return (
                f"not delivered to {recipient.label}: it has {len(unread)} unread messages, "
                "the limit ([teams] mailbox_max); send again after it has read them"
            )
        letter = Letter(
            id=f"m{next(self._numbers)}",
            sender=sender.agent_id,
            recipient=recipient.agent_id,
            text=envelope(sender, message),
        )
        unread[letter.id] = letter
        if self.journal is not None:
            self.journal.fact(
                "message",
                id=letter.id,
                sender=letter.sender,
                recipient=letter.recipient,
                text=letter.text,
                call=call,
                at=time.time(),  # (the timeline's clock)
            )
        if recipient.agent_id == MAIN:
            self._for_main.append(letter)
            watch = self._watched.get(sender.agent_id)
            if watch is not None and not watch.done():
                watch.set_result(None)
            return f"sent to the main agent: it reads it at its next turn (message {letter.id})"
        if recipient.state != _RUNNING:
            del unread[letter.id]  # its continuation takes it as its prompt
            return self._continue(sender, recipient, letter, message)
        if recipient.controls is None:  # ran in no runner of ours: cannot be reached now
            del unread[letter.id]
            return f"not delivered to {recipient.label}: it cannot be reached right now"
        recipient.controls.message(letter.text, letter.id, interrupt=interrupt)
        when = (
            "now (its model call in flight, if any, is cancelled)"
            if interrupt
            else ("before its next model request")
        )
        return f"sent to {recipient.label}: it reads it {when} (message {letter.id})"

    def _continuable(self, member: Member) -> bool:
        return self.starter is not None and member.state == "completed" and member.agent_id != MAIN

    def _continue(self, sender: Member, recipient: Member, letter: Letter, message: str) -> str:
        """A message to an ended (completed) sub-agent: it goes on, as a new run of its
        session with the message as its next turn — if the sender is the main agent or
        was granted no more than the recipient (what the recipient knows must not flow to
        an agent with wider walls); else the main agent gets it, and may forward it."""
        self.taken(recipient.agent_id, [letter.id], 0)  # its continuation's prompt
        if sender.agent_id != MAIN and not grants_within(sender.grants, recipient.grants):
            note = (
                f"(for {recipient.label}, which has ended: it is not continued by an agent "
                f"granted more than it; forward this with send_message if it should be)\n"
            )
            self._post(sender, self.roster.members[MAIN], note + message, "")
            return (
                f"not delivered to {recipient.label}: it has ended, and you are granted more "
                "than it (tools, network, sandbox or MCP servers), so the main agent got the "
                "message instead; it may forward it"
            )
        if self.continuations >= self.limits.max_continuations:
            return (
                f"not delivered to {recipient.label}: it has ended, and this run has continued "
                f"{self.continuations} ended agents, the limit ([teams] max_continuations)"
            )
        assert self.starter is not None
        refused = self.starter(sender, recipient, letter.text)
        if refused:
            return f"not delivered to {recipient.label}: it has ended, and {refused}"
        self.roster.hand_over(recipient.agent_id)  # before its run joins (later, in a task)
        self.continuations += 1
        return (
            f"{recipient.label} had ended: it goes on in the background with your message as "
            f"its next turn, under its name; its answer comes to you when it ends "
            f"(message {letter.id})"
        )

    def reply(self, sender_id: str, recipient_id: str, text: str) -> None:
        """A continuation's answer, to the agent whose message started it (the main agent
        if that one has ended): past the caps and reach, as a tool's result would be."""
        sender = self.roster.members.get(sender_id)
        recipient = self.roster.members.get(recipient_id)
        if sender is None:
            return
        if recipient is None or recipient.state != _RUNNING or recipient.controls is None:
            recipient = self.roster.members[MAIN]
        self._post(sender, recipient, text, "")

    # -- receiving ------------------------------------------------------------------------
    def taken(self, recipient_id: str, ids: list[str], turn: int) -> None:
        """The recipient took these messages into its ``turn``-th model request."""
        unread = self._unread[recipient_id]
        letters = [unread.pop(i, None) for i in ids]
        taken = [letter.id for letter in letters if letter is not None]
        self._owed[recipient_id] |= {letter.sender for letter in letters if letter is not None}
        if taken and self.journal is not None:
            self.journal.fact("mail", recipient=recipient_id, ids=taken, turn=turn, at=time.time())

    def for_main(self, replaying: bool = False) -> list[str]:
        """The main agent's messages, once each, for its next model request; while its
        turns are replayed, those it took at that turn in the killed run (the rest wait)."""
        self._main_turns += 1
        again = self._main_replay.get(self._main_turns, [])
        if replaying:
            return again
        letters, self._for_main = self._for_main, []
        if letters:
            self.taken(MAIN, [letter.id for letter in letters], self._main_turns)
        return again + [letter.text for letter in letters]

    def watch(self, agent_id: str) -> asyncio.Future[None]:
        """Resolved when ``agent_id`` sends the main agent a message (now, if it has)."""
        watch = self._watched[agent_id] = asyncio.get_running_loop().create_future()
        if any(letter.sender == agent_id for letter in self._for_main):
            watch.set_result(None)
        return watch

    def unwatch(self, agent_id: str) -> None:
        watch = self._watched.pop(agent_id, None)
        if watch is not None and not watch.done():
            watch.cancel()

    def for_main_from(self, agent_id: str) -> list[str]:
        """``agent_id``'s messages for the main agent, taken now: they are the result of
        the task call that waits on it (the main agent reads them in its next request)."""
        mine = [letter for letter in self._for_main if letter.sender == agent_id]
        self._for_main = [letter for letter in self._for_main if letter.sender != agent_id]
        if mine:
            self.taken(MAIN, [letter.id for letter in mine], self._main_turns + 1)
        return [letter.text for letter in mine]

    def unanswered(self, agent_id: str) -> tuple[str, list[str]]:
        """A named agent's name, and who it has read messages from and not answered
        ("" and [] for an agent without a name: it is no teammate to wake)."""
        member = self.roster.members.get(agent_id)
        if member is None or not member.name:
            return "", []
        owed = self._owed.get(agent_id, set())
        return member.name, [self.roster.members[a].address for a in sorted(owed)]

    def unread(self, agent_id: str) -> int:
        return len(self._unread.get(agent_id, {}))


def _reachable(reach: list[Member]) -> str:
    running = [m.address for m in reach if m.state == _RUNNING]
    if not running:
        return "No agent in your reach is running."
    return f"Running in your reach: {', '.join(running)}."


def _nobody(reach: list[Member]) -> str:
    return f"not sent: no agent in your reach is running ({len(reach)} in reach, all ended)"


def grants_within(narrow: dict[str, Any], wide: dict[str, Any]) -> bool:
    """Is ``narrow`` granted no more than ``wide``: its tools, MCP servers and network a
    part of the other's, its sandbox as strict? (Unknown grants are never within.)"""
    if not narrow or not wide:
        return False
    if not set(narrow["tools"]) <= set(wide["tools"]):
        return False
    if not set(narrow["mcp_servers"]) <= set(wide["mcp_servers"]):
        return False
    if stricter_sandbox(narrow["sandbox"], wide["sandbox"]) != narrow["sandbox"]:
        return False
    mine, theirs = narrow["network"], wide["network"]
    if not mine or theirs is True:
        return True
    return isinstance(mine, list) and isinstance(theirs, list) and set(mine) <= set(theirs)


def message_text(envelope_text: str) -> str:
    """The sender's own words inside an envelope (what ``envelope`` wrapped)."""
    lines = envelope_text.split("\n")
    if len(lines) < 4:
        return envelope_text
    fence = lines[1]
    try:
        end = lines.index(fence, 2)
    except ValueError:
        return envelope_text
    return "\n".join(lines[2:end])


def run_messages(past: TeamPast) -> list[dict[str, Any]]:
    """A run's messages as ``runs show`` lists them: who to whom, the words, and the
    turn of the recipient's that read them (None: never read)."""
    read_at = {
        message_id: turn
        for turns in past.taken.values()
        for turn, ids in turns.items()
        for message_id in ids
    }
    return [
        {
            "id": message_id,
            "sender": str(fact.get("sender", "")),
            "recipient": str(fact.get("recipient", "")),
            "text": message_text(str(fact.get("text", ""))),
            "read_at_turn": read_at.get(message_id),
            "sent_at": fact.get("at"),
            "read_at": past.read_times.get(message_id),
        }
        for message_id, fact in past.messages.items()
    ]
