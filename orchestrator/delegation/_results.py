"""What a sub-agent run produced, as the parent records it and as the model reads it."""

from __future__ import annotations

import msgspec
from agentcell.orchestrator._text import plural
from agentcell.protocol import RunStatus, Usage


class SubAgentResult(msgspec.Struct, kw_only=True, omit_defaults=True):
    """The terminal record of one sub-agent run (exactly one per run)."""

    agent_id: str
    agent_type: str
    description: str = ""
    name: str = ""  # what its team calls it (send_message's ``to``), if it was named
    status: RunStatus
    text: str = ""
    error: str = ""  # for anything but completed: the cause, in one line
    usage: Usage = msgspec.field(default_factory=Usage)
    cost_usd: float | None = None
    model: str = ""
    duration_ms: float = 0.0  # from the request to the end, queue wait included
    queued_ms: float = 0.0  # of which waiting for a free process
    turns: int = 0
    tool_calls: int = 0
    pid: int | None = None
    node: str = ""  # the remote node it ran on ("" for this machine)
    peak_rss_bytes: int = 0
    exit_code: int | None = None
    signal: str | None = None
    background: bool = False
    depth: int = 1
    parent_id: str = ""  # who asked for it: "main" or a sub-agent's id
    started_at: float = 0.0  # when it was asked for (seconds since the epoch)
    worktree: str | None = None  # kept worktree (isolation: worktree, with changes)
    branch: str | None = None
    commit: str | None = None  # the kept branch's head: the agent's changes, committed
    diff_stat: str = ""
    sandbox: str = ""  # the walls the child ran behind, as it reported them ("off", ...)
    # What did not go as configured but did not stop the run (an MCP server that failed
    # to start, a skill not found): one line each, shown to the model with the result.
    warnings: list[str] = msgspec.field(default_factory=list)
    # Under a ``network:`` list: each host bash reached or was refused, one line each.
    network_log: list[str] = msgspec.field(default_factory=list)
    # It never got a process: the backend could not start one, or it was ended while it
    # waited for one. The run that asked for it reports an error (see ``unstarted``).
    no_process: bool = False

    @property
    def ok(self) -> bool:
        return self.status is RunStatus.COMPLETED

    def render(self, *, for_model: bool = True) -> str:
        """The tool result the parent model sees: the terminal state first, then the text
        (for a person, ``for_model=False``: without the ``agent_id:`` line a model reads
        to continue it; the head names the agent already)."""
        head = f"[{self.status.value}] {self.agent_type}"
        if self.description:
            head += f' "{self.description}"'
        named = f"{self.name}, " if self.name else ""
        head += f" ({named}agent {self.agent_id}, {plural(self.turns, 'turn')}, "
        head += f"{plural(self.tool_calls, 'tool call')}, {self.duration_ms / 1000:.1f} s)"
        head += "".join(f"\nwarning: {line}" for line in self.warnings)
        kept = ""
        if self.worktree:
            where = f"on branch {self.branch}"
            if self.commit:
                where += f" (commit {self.commit[:12]})"
            kept = f"\nIts changes are kept in the worktree {self.worktree} {where}:\n"
            kept += self.diff_stat
        elif self.diff_stat:  # a worktree agent that changed nothing says so
            kept = f"\n{self.diff_stat}"
        # On a line of its own, as Claude Code's agentId: what `task` takes as `resume`.
        ident = f"\nagent_id: {self.agent_id}" if for_model else ""
        if self.ok:
            return f"{head}\n{self.text}{kept}{ident}"
        body = f"{head}: {self.error or self.status.value}"
        if self.text:
            body += f"\nPartial output (not a completed answer):\n{self.text}"
        return body + kept + ident
