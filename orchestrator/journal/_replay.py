"""A killed run's journal, read back as what its resume needs.

For each agent: the answers it was given (each with the digest of the request it
answered, so a resumed agent is served only the answer to the very request it makes
again), its tool calls (finished with their result, or only started), and for a
sub-agent who started it, with which tool call, and how it ended if it did. The main
agent's prompt and its answers (parsed: it runs in the parent) come the same way.

Nothing here comes from a child's own files: the journal is the parent's alone.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import msgspec
from agentcell.orchestrator.journal._delta import RequestRebuilder
from agentcell.orchestrator.journal._file import read_journal
from agentcell.orchestrator.journal._place import JOURNAL_FILE, journal_dir
from agentcell.protocol import ReplayedTool


@dataclasses.dataclass(frozen=True, slots=True)
class Answer:
    """One answer a resumed agent is served again: for the request of this digest."""

    digest: bytes
    body: bytes


@dataclasses.dataclass(slots=True)
class AgentPast:
    """One agent of the killed run, as its journal has it."""

    agent_id: str
    by: str = ""  # who started it ("main" or a sub-agent's id)
    call: str = ""  # with which tool call
    agent_type: str = ""
    background: bool = False
    answers: list[Answer] = dataclasses.field(default_factory=list)
    tools: dict[str, ReplayedTool] = dataclasses.field(default_factory=dict)
    result: dict[str, Any] | None = None  # its journaled end, when it ended


@dataclasses.dataclass(slots=True)
class RunPast:
    """What a resume of the run finds in its journal."""

    run_id: str
    kind: str
    prompt: str | None  # the main agent's prompt (None: no main agent started)
    main: AgentPast
    agents: dict[str, AgentPast]
    damage: str = ""  # where a cut or damaged journal stops ("" when it is whole)
    turns: int = 0  # main-agent runs journaled (a chat has one per turn)
    # What the user allowed "always": (agent id, agent type, tool), to hold again.
    always: list[tuple[str, str, str]] = dataclasses.field(default_factory=list)
    # The background results the main agent was handed: by hand-out, which sub-agents'.
    deliveries: dict[int, list[str]] = dataclasses.field(default_factory=dict)
    model: str = ""  # the main agent's model
    ended: str = ""  # the run's journaled end status ("" when it has none)

    def started_by(self, by: str, call: str) -> AgentPast | None:
        """The sub-agent ``by``'s tool call ``call`` started in the killed run."""
        for past in self.agents.values():
            if past.by == by and past.call == call and call:
                return past
        return None

    @property
    def highest_agent_number(self) -> int:
        numbers = [int(a[1:]) for a in self.agents if a[1:].isdigit()]
        return max(numbers, default=0)


def read_past(run_dir: Path) -> RunPast:
    """The run recorded in ``run_dir`` as its journal has it. ``LookupError`` (one line)
    when it has none, or none that can be read."""
    path = journal_dir(run_dir) / JOURNAL_FILE
    try:
        read = read_journal(path)
    except FileNotFoundError:
        raise LookupError(
            f"run {run_dir.name} has no journal (it ran with record=False, or before "
            "agentcell kept journals), so it cannot be resumed where it stopped"
        ) from None
    except (OSError, ValueError) as exc:
        raise LookupError(f"run {run_dir.name}: its journal cannot be read ({exc})") from None
    past = RunPast(run_id=run_dir.name, kind="", prompt=None, main=AgentPast("main"), agents={})
    past.damage = read.damage
    asks: dict[tuple[str, int], bytes] = {}
    rebuilders: dict[str, RequestRebuilder] = {}
    for record in read.records:
        kind = record["k"]
        if kind == "run":
            past.kind = str(record.get("kind", ""))
        elif kind == "ask":
            agent = str(record["agent"])
            rebuilder = rebuilders.setdefault(agent, RequestRebuilder())
            asks[agent, int(record["call"])] = rebuilder.digest(record)
        elif kind == "answer":
            digest = asks.pop((str(record["agent"]), int(record["call"])), None)
            if digest is not None and record.get("status") == 200 and not record.get("error"):
                _agent(past, str(record["agent"])).answers.append(
                    Answer(digest, bytes(record["body"]))
                )
        elif kind == "main_answer":
            past.main.answers.append(Answer(bytes(record["digest"]), bytes(record["response"])))
        elif kind == "fact":
            _fact(past, record)
        elif kind == "end":
            past.ended = str(record.get("status", ""))
    return past


def _agent(past: RunPast, agent_id: str) -> AgentPast:
    if agent_id == "main":
        return past.main
    return past.agents.setdefault(agent_id, AgentPast(agent_id))


def _fact(past: RunPast, record: dict[str, Any]) -> None:
    what = record.get("what")
    if what == "main":
        past.prompt = str(record.get("prompt", ""))
        past.model = str(record.get("model", ""))
        past.turns += 1
    elif what == "approval" and record.get("approved") and record.get("always"):
        past.always.append(
            (str(record.get("agent")), str(record.get("agent_type")), str(record.get("tool")))
        )
    elif what == "delivered":
        past.deliveries[int(record.get("index", -1))] = [str(a) for a in record.get("agents", [])]
    elif what == "started":
        agent = _agent(past, str(record["agent"]))
        agent.by, agent.call = str(record.get("by", "")), str(record.get("call", ""))
        agent.agent_type = str(record.get("agent_type", ""))
        agent.background = bool(record.get("background"))
    elif what == "ended" and isinstance(record.get("result"), dict):
        _agent(past, str(record["agent"])).result = record["result"]
    elif what == "tool":
        agent = _agent(past, str(record["agent"]))
        call = str(record["call"])
        if record.get("finished"):
            agent.tools[call] = ReplayedTool(
                finished=True,
                content=str(record.get("content", "")),
                is_error=bool(record.get("is_error")),
            )
        else:
            agent.tools.setdefault(call, ReplayedTool())


def decode_response(body: bytes, into: type[Any]) -> Any:
    """A main-agent answer as it was journaled (msgpack of the parsed response)."""
    return msgspec.msgpack.decode(body, type=into)
