"""A killed run's journal, read back as what its resume needs.

For each agent: the answers it was given (each with the digest of the request it
answered, so a resumed agent is served only the answer to the very request it makes
again), its tool calls (finished with their result, or only started), and for a
sub-agent who started it, with which tool call, and how it ended if it did. The main
agent's prompt and its answers (parsed: it runs in the parent) come the same way.

Nothing here comes from a child's own files: the journal is the parent's alone.
"""

from __future__ import annotations

import contextlib
import dataclasses
from pathlib import Path
from typing import Any

import msgspec
from agentcell.orchestrator.journal._delta import RequestRebuilder
from agentcell.orchestrator.journal._file import read_journal
from agentcell.orchestrator.journal._place import JOURNAL_FILE, journal_dir
from agentcell.protocol import ReplayedTool, Usage
from agentcell.worker.models import estimate_tokens


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
    definition: dict[str, Any] | None = None  # the definition it started with
    given_up_bytes: int = 0  # its requests in flight at the kill, their bodies' bytes
    relayed: bool = True  # its model calls went through the parent (and the journal)
    worktree: dict[str, Any] | None = None  # the worktree it was given, as made then


@dataclasses.dataclass(slots=True)
class TeamPast:
    """The killed run's team: its messages, who took which at what turn, its tasks."""

    messages: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)  # by id
    # recipient → its turn → the ids it took into that turn's model request
    taken: dict[str, dict[int, list[str]]] = dataclasses.field(default_factory=dict)
    tasks: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)  # by id, last
    read_times: dict[str, float] = dataclasses.field(default_factory=dict)  # id → when taken

    def taken_by(self, agent_id: str) -> dict[int, list[str]]:
        """What ``agent_id`` took, by turn, as the texts it read."""
        return {
            turn: [str(self.messages[i]["text"]) for i in ids if i in self.messages]
            for turn, ids in self.taken.get(agent_id, {}).items()
        }


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
    resumes: str = ""  # the run this one resumed, if it was a resume
    chat: bool = False  # a chat's turn (its background sub-agents outlive it)
    given: list[str] = dataclasses.field(default_factory=list)  # tools, models in code
    # The main session its last run went on from (a chat's earlier turns), as builtins.
    session: list[Any] = dataclasses.field(default_factory=list)
    ended: str = ""  # the run's journaled end status ("" when it has none)
    team: TeamPast = dataclasses.field(default_factory=TeamPast)

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


#: How many runs back a chain of resumes is followed (a resume of a resume of ...).
MAX_CHAIN = 16


def read_past(run_dir: Path, *, depth: int = 0) -> RunPast:
    """The run recorded in ``run_dir`` as its journal has it. ``LookupError`` (one line)
    when it has none, or none that can be read.

    A run that was itself a resume (killed in turn) journaled what it replayed, but not
    what it had no time to: the run it resumed is read too, and what that one's journal
    holds beyond this one's is kept wherever this one had not gone its own way."""
    past = _read_one(run_dir)
    if past.resumes and depth < MAX_CHAIN:
        with contextlib.suppress(LookupError):
            older = read_past(run_dir.parent / past.resumes, depth=depth + 1)
            past = _merged(past, older)
    return past


def _merged(newer: RunPast, older: RunPast) -> RunPast:
    if not _continues(newer.main, older.main):
        return newer  # its main agent went its own way: the older run has nothing for it
    _merge_agent(newer.main, older.main)
    for index, agents in older.deliveries.items():
        newer.deliveries.setdefault(index, agents)
    newer.always.extend(a for a in older.always if a not in newer.always)
    for message_id, message in older.team.messages.items():
        newer.team.messages.setdefault(message_id, message)
    for recipient, turns in older.team.taken.items():
        for turn, ids in turns.items():
            newer.team.taken.setdefault(recipient, {}).setdefault(turn, ids)
    newer.team.tasks = older.team.tasks | newer.team.tasks
    for agent_id, old in older.agents.items():
        mine = newer.agents.get(agent_id)
        if mine is None:
            newer.agents[agent_id] = old
        elif _continues(mine, old):
            _merge_agent(mine, old)
    return newer


def _continues(newer: AgentPast, older: AgentPast) -> bool:
    """Did ``newer`` replay ``older``'s answers and no others (so far)?"""
    return [a.digest for a in newer.answers] == [
        a.digest for a in older.answers[: len(newer.answers)]
    ]


def _merge_agent(newer: AgentPast, older: AgentPast) -> None:
    newer.answers.extend(older.answers[len(newer.answers) :])
    for call, tool in older.tools.items():
        if call not in newer.tools or (tool.finished and not newer.tools[call].finished):
            newer.tools[call] = tool
    if newer.result is None:
        newer.result = older.result
    newer.definition = newer.definition or older.definition
    newer.given_up_bytes += older.given_up_bytes
    newer.by, newer.call = newer.by or older.by, newer.call or older.call
    newer.agent_type = newer.agent_type or older.agent_type


def _read_one(run_dir: Path) -> RunPast:
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
    sizes: dict[tuple[str, int], int] = {}  # asked, never answered: their bodies' sizes
    rebuilders: dict[str, RequestRebuilder] = {}
    for record in read.records:
        kind = record["k"]
        if kind == "run":
            past.kind = str(record.get("kind", ""))
        elif kind == "ask":
            agent = str(record["agent"])
            rebuilder = rebuilders.setdefault(agent, RequestRebuilder())
            asks[agent, int(record["call"])] = rebuilder.digest(record)
            sizes[agent, int(record["call"])] = rebuilder.size
        elif kind == "answer":
            sizes.pop((str(record["agent"]), int(record["call"])), None)
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
    for (agent, _), size in sizes.items():  # in flight at the kill: charged as given up
        _agent(past, agent).given_up_bytes += size
    return past


def _agent(past: RunPast, agent_id: str) -> AgentPast:
    if agent_id == "main":
        return past.main
    return past.agents.setdefault(agent_id, AgentPast(agent_id))


def _fact(past: RunPast, record: dict[str, Any]) -> None:
    what = record.get("what")
    if what == "resumes":
        past.resumes = str(record.get("run", ""))
    elif what == "main":  # a main-agent run begins: what a resume replays is its own
        past.prompt = str(record.get("prompt", ""))
        past.model = str(record.get("model", ""))
        past.chat = bool(record.get("chat"))
        past.given = [str(name) for name in record.get("given") or []]
        past.turns += 1
        kept = int(record.get("kept", len(past.session)))
        past.session = past.session[:kept] + list(record.get("session") or [])
        past.main.answers.clear()
        past.deliveries.clear()
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
    elif what == "definition":
        agent = _agent(past, str(record["agent"]))
        if isinstance(record.get("definition"), dict):  # a file's, as it was
            agent.definition = record["definition"]
        agent.relayed = bool(record.get("relayed", True))
    elif what == "worktree" and isinstance(record.get("tree"), dict):
        _agent(past, str(record["agent"])).worktree = record["tree"]
    elif what == "message":
        past.team.messages.setdefault(str(record.get("id")), record)
    elif what == "mail":
        turns = past.team.taken.setdefault(str(record.get("recipient")), {})
        turns.setdefault(int(record.get("turn", 0)), []).extend(str(i) for i in record["ids"])
        if isinstance(record.get("at"), float):
            past.team.read_times.update(dict.fromkeys(map(str, record["ids"]), record["at"]))
    elif what == "team_task" and isinstance(record.get("task"), dict):
        past.team.tasks[str(record["task"].get("id"))] = record["task"]
    elif what == "ended" and isinstance(record.get("result"), dict):
        _agent(past, str(record["agent"])).result = record["result"]
    elif what == "tool":
        agent = _agent(past, str(record["agent"]))
        call = str(record["call"])
        if record.get("finished"):
            start = agent.tools.get(call) or ReplayedTool(name=str(record.get("name", "")))
            agent.tools[call] = msgspec.structs.replace(
                start,
                finished=True,
                content=str(record.get("content", "")),
                is_error=bool(record.get("is_error")),
            )
        else:
            agent.tools[call] = ReplayedTool(
                name=str(record.get("name", "")), arguments=str(record.get("arguments", ""))
            )


def spent_before(past: RunPast) -> list[tuple[str, str, str, Usage]]:
    """What the killed run spent that its resume will not spend again, by sub-agent
    (id, type, model, usage): each ended sub-agent's journaled usage (its result is
    delivered again, never asked for), and each request in flight at the kill, charged
    as a call given up is: its estimated input. (A replayed answer is charged when it is
    served again, as the server reported it.)"""
    spent = []
    for agent in past.agents.values():
        if agent.result is not None:
            usage = msgspec.convert(agent.result.get("usage") or {}, Usage, strict=False)
            model = str(agent.result.get("model", ""))
            spent.append((agent.agent_id, agent.agent_type, model, usage))
        if agent.given_up_bytes:
            given_up = Usage(input_tokens=estimate_tokens(bytes(agent.given_up_bytes)))
            spent.append((agent.agent_id, agent.agent_type, "", given_up))
    return spent
