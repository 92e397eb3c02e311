"""Continuing a finished sub-agent (``task`` with ``resume``) from its run record.

Each sub-agent's own process writes ``<run_dir>/<agent_id>.jsonl``; its last ``messages``
line is the whole session. A continuation is a fresh process seeded with that session,
under the same definition (so the same tools and narrowing), with the new prompt as the
next user message. Only agents this orchestrator started can be continued, and only by
the agent that started them (the top level — main agent and direct runs — counts as one):
an id from elsewhere (another session, a sibling's child, a guess) is refused, as is one
still running.
"""

from __future__ import annotations

import collections
import dataclasses
import json
from pathlib import Path

import msgspec
from agentcell.orchestrator.definitions._model import agent_slug
from agentcell.orchestrator.definitions._registry import AgentRegistry
from agentcell.orchestrator.delegation._request import DelegationRequest
from agentcell.orchestrator.records._key import record_end, verified_record
from agentcell.protocol import AssistantMessage, Message, ThinkingBlock
from agentcell.worker import Redactor

#: How many started agents are remembered for a continuation (oldest forgotten first).
MAX_REMEMBERED = 10_000


@dataclasses.dataclass(frozen=True, slots=True)
class _Recorded:
    agent_type: str
    record: Path | None  # None: the run was not recorded
    owner: str  # the agent that started it ("" for the top level)


def read_session(record: Path, end: bytes | None = None) -> list[Message] | None:
    """The last recorded session in one agent's record (None: it recorded none).

    A thinking block in which the record masked a secret is left out: its signature no
    longer matches, so Anthropic would refuse the whole request. A block of an earlier
    turn may be omitted; but a run that stopped inside a tool loop (max_turns, a timeout,
    a cancel) ends with an assistant turn whose thinking the API requires, so when that
    turn lost a block it goes, with its tool results: the continuation starts after the
    last turn that can be sent as it was. ``LookupError`` (one line) when the record's
    chain does not verify: a line was changed, moved or added after it was written (or,
    with ``end``, the chain no longer ends where it did when its agent ended)."""
    found: list[Message] | None = None
    for line in verified_record(record, end):  # changed since it was written: refused
        if b'"kind":"messages"' not in line:
            continue
        try:
            entry = json.loads(line)
            found = msgspec.convert(entry["messages"], list[Message])
        except (ValueError, KeyError, msgspec.ValidationError):
            continue  # not a session the engine wrote: the earlier one stands
    if found is None:
        return None
    kept = [_verifiable(message) for message in found]
    last = max((i for i, m in enumerate(kept) if isinstance(m, AssistantMessage)), default=-1)
    if last >= 0 and kept[last] is not found[last] and found[last].tool_calls:  # type: ignore[union-attr]
        kept = kept[:last]
    return kept


def _verifiable(message: Message) -> Message:
    if not isinstance(message, AssistantMessage) or not message.reasoning:
        return message
    kept = [block for block in message.reasoning if not _masked(block)]
    if len(kept) == len(message.reasoning):
        return message
    return msgspec.structs.replace(message, reasoning=kept)


def _masked(block: ThinkingBlock) -> bool:
    return any(Redactor.mask in text for text in (block.thinking, block.signature, block.data))


class RecordedAgents:
    """The sub-agents this orchestrator started, and where their records are."""

    def __init__(self) -> None:
        self._agents: collections.OrderedDict[str, _Recorded] = collections.OrderedDict()
        self._running: set[str] = set()
        # Where each ended agent's record chain ended (None: there was no record then).
        # The agent held its record's key while it ran; from then on nothing may be added.
        self._ends: dict[str, bytes | None] = {}
        #: Sub-agents of the run a resumed conversation comes from: named in its session,
        #: but never started here, so not to be continued (their ids are not reused).
        self.earlier: set[str] = set()

    def started(self, agent_id: str, agent_type: str, run_dir: str, owner: str = "") -> None:
        record = Path(run_dir) / f"{agent_id}.jsonl" if run_dir else None
        self._agents[agent_id] = _Recorded(agent_type, record, owner)
        self._running.add(agent_id)
        while len(self._agents) > MAX_REMEMBERED:
            forgotten, _ = self._agents.popitem(last=False)
            self._ends.pop(forgotten, None)

    def ended(self, agent_id: str) -> None:
        self._running.discard(agent_id)
        known = self._agents.get(agent_id)
        if known is not None and known.record is not None and agent_id not in self._ends:
            self._ends[agent_id] = record_end(known.record)

    def continuation(
        self, request: DelegationRequest, registry: AgentRegistry, owner: str = ""
    ) -> tuple[DelegationRequest, list[Message]]:
        """The request to run (the recorded agent's type) and the session to seed it with;
        ``LookupError`` with the reason (one line) when it cannot be continued."""
        wanted = request.resume
        known = self._agents.get(wanted)
        if known is None and wanted in self.earlier:
            raise LookupError(
                f"resume: {wanted} ran in the earlier run this conversation was resumed "
                "from; only a sub-agent of this run can be continued, so start a new one "
                "(it gets a new id)"
            )
        if known is None:
            raise LookupError(
                f"resume: no sub-agent {wanted!r} was started in this session; give the "
                "agent_id line of one of its results (or start a new one without resume)"
            )
        if known.owner != owner:
            raise LookupError(
                f"resume: {wanted} was started by another agent, so only that one can "
                "continue it; start a new sub-agent instead"
            )
        if request.agent_type and agent_slug(request.agent_type) != agent_slug(known.agent_type):
            raise LookupError(
                f"resume: {wanted} is a {known.agent_type} agent, not {request.agent_type!r}; "
                f"give subagent_type {known.agent_type!r}"
            )
        if wanted in self._running:
            raise LookupError(
                f"resume: {wanted} is still running; send it a message with task_control "
                "(action steer) instead, or wait for its result"
            )
        if registry.get(known.agent_type) is None:
            raise LookupError(f"resume: {wanted}'s agent type {known.agent_type!r} is gone")
        if known.record is None:
            raise LookupError(
                f"resume: {wanted} was not recorded (run records are off), so its session "
                "cannot be continued"
            )
        end = self._ends.get(wanted)
        if end is None:
            raise LookupError(
                f"resume: {wanted} left no record when it ended, so its session cannot be "
                "continued; start a new sub-agent instead"
            )
        try:
            session = read_session(known.record, end)
        except OSError as exc:
            raise LookupError(f"resume: cannot read {known.record}: {exc.strerror}") from None
        except LookupError as exc:
            raise LookupError(f"resume: {exc}") from None
        if session is None:
            raise LookupError(f"resume: {known.record} holds no session to continue from")
        return dataclasses.replace(request, agent_type=known.agent_type, resume=""), session
