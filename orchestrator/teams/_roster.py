"""Who is in a run's team: the main agent and every sub-agent it (or one of them)
started, by name and by id, in what state, and who may reach whom.

Reach is the tree's: an agent may message its siblings (agents started by the same
parent), its parent and its own children — the main agent reaches every sub-agent it
started, a sub-agent never reaches into a sibling's sub-tree. Names are given by whoever
starts an agent (``task``'s ``name``); a name already taken in the run gets a suffix
(``reviewer-2``), so every name is unique and an agent keeps its name to the end.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Protocol

#: What a name may be: short, and nothing that could break an envelope's header line.
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,47}")
MAIN = "main"


class Steerable(Protocol):
    """The controls a running member's messages go through (its ``RunHandle``)."""

    def message(self, text: str, message_id: str, *, interrupt: bool = False) -> None: ...

    def cancel(self, reason: str = ...) -> None: ...


@dataclasses.dataclass(slots=True)
class Member:
    agent_id: str
    name: str  # "" when it was started without one (reached by its id)
    agent_type: str
    parent_id: str  # "main" or a sub-agent's id; "" for the main agent
    state: str = "running"  # then its result's status: completed, failed, cancelled, …
    controls: Steerable | None = None  # while it runs in this process's runner
    # What it was granted (tools, sandbox, network, MCP servers), as the parent narrowed it.
    grants: dict[str, Any] = dataclasses.field(default_factory=dict)
    scope: Any = None  # who started it (a ``Scope``): a continuation is started from there

    @property
    def label(self) -> str:
        """How the others see it: its name and id, or its id alone."""
        return (
            f"{self.name} ({self.agent_id})"
            if self.name and self.name != self.agent_id
            else self.agent_id
        )

    @property
    def address(self) -> str:
        """What another agent puts in ``to`` to reach it."""
        return self.name or self.agent_id


def check_name(name: str) -> str:
    """``name`` as given, or ValueError saying what a name may be."""
    if not NAME_PATTERN.fullmatch(name):
        raise ValueError(
            f"name {name!r} is not usable: 1 to 48 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit"
        )
    return name


class Roster:
    """The run's agents; see the module's docstring."""

    def __init__(self) -> None:
        self.members: dict[str, Member] = {MAIN: Member(MAIN, MAIN, MAIN, "")}
        self._by_name: dict[str, str] = {MAIN: MAIN}
        self._handed: dict[str, str] = {}  # name → the ended agent a continuation takes it of

    def join(
        self,
        agent_id: str,
        wanted: str,
        agent_type: str,
        parent_id: str,
        controls: Steerable | None,
        *,
        scope: Any = None,
    ) -> str:
        """Add a starting agent (or, joined already, give it its controls); the name it
        got: ``wanted``, or ``wanted`` with a suffix if that is taken ("" for none) — or,
        for a continuation, the name of the agent it continues (handed over)."""
        member = self.members.get(agent_id)
        if member is not None:
            member.controls = controls or member.controls
            member.state = "running"
            return member.name
        taken_over = self._handed.pop(wanted, None) if wanted else None
        name = wanted if taken_over is not None else (self._free(wanted) if wanted else "")
        self.members[agent_id] = Member(
            agent_id, name, agent_type, parent_id, controls=controls, scope=scope
        )
        if taken_over is not None:
            self.members[taken_over].name = ""  # its name is its continuation's now
        if name:
            self._by_name[name] = agent_id
        return name

    def hand_over(self, agent_id: str) -> None:
        """The next agent to join under ``agent_id``'s name continues it: it takes the name."""
        member = self.members.get(agent_id)
        if member is not None and member.name:
            self._handed[member.name] = agent_id

    def ended(self, agent_id: str, state: str) -> None:
        member = self.members.get(agent_id)
        if member is not None:
            member.state, member.controls = state, None

    def find(self, address: str) -> Member | None:
        """The member named ``address``, or with that id."""
        agent_id = self._by_name.get(address, address)
        return self.members.get(agent_id)

    def may_reach(self, sender: Member, recipient: Member) -> bool:
        if sender.agent_id == recipient.agent_id:
            return False
        sibling_or_parent = sender.parent_id in (recipient.parent_id, recipient.agent_id)
        return sibling_or_parent or recipient.parent_id == sender.agent_id  # or its child

    def reachable(self, sender: Member) -> list[Member]:
        return [m for m in self.members.values() if self.may_reach(sender, m)]

    def _free(self, wanted: str) -> str:
        if wanted not in self._by_name and wanted not in self.members:
            return wanted
        number = 2
        while f"{wanted}-{number}" in self._by_name:
            number += 1
        return f"{wanted}-{number}"
