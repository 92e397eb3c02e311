"""A resumed run (``agentcell runs resume ID``) is a new run of its own.

It gets a new run folder before it starts, and that folder notes the run it resumes; the
resumed run's folder is only read. So a resume that fails (the model errs, the run is
cancelled, the process is killed) leaves the run it went on from as it was, and both can
be resumed again. Its sub-agents are numbered after those its session names: ``a1`` never
means two agents to the main agent (or in ``runs show``), and ``task`` refuses to
``resume`` one of the earlier run's, saying why.
"""

from __future__ import annotations

import re
from pathlib import Path

from agentcell.orchestrator._orchestrator import Orchestrator
from agentcell.orchestrator.records._store import mark_resumed, new_run_dir
from agentcell.protocol import ToolMessage, UserMessage
from agentcell.worker import Session

#: How a session names its sub-agents: ``agent_id: a3`` ends each result, ``task a3``
#: starts a background one's, ``(agent a3, …`` heads it.
_AGENT_ID = re.compile(r"(?:agent_id: |task |\(agent )a(\d+)\b")


def begin_resumed_run(orch: Orchestrator, workdir: Path, resumed_id: str, session: Session) -> Path:
    """A new run folder for ``orch``'s calls, marked as resuming ``resumed_id``; the
    sub-agents ``session`` names keep their ids (new ones are numbered after them)."""
    run_dir = new_run_dir(workdir)
    mark_resumed(run_dir, resumed_id)
    pin_run_dir(orch, run_dir)
    earlier = earlier_agent_ids(session)
    if earlier:
        orch.runner.number_after(max(int(agent_id[1:]) for agent_id in earlier))
        orch.runner.recorded.earlier.update(earlier)
    return run_dir


def earlier_agent_ids(session: Session) -> set[str]:
    """The sub-agent ids a recorded session's results name."""
    found: set[str] = set()
    for message in session.messages:
        if isinstance(message, ToolMessage | UserMessage):
            found.update(f"a{n}" for n in _AGENT_ID.findall(message.content or ""))
    return found


def pin_run_dir(orch: Orchestrator, run_dir: Path) -> None:
    """Every call of ``orch`` (and every sub-agent it starts) records into ``run_dir``."""
    orch.run_dir = run_dir
    orch.runner.run_dir = str(run_dir)


def resuming_line(resumed_id: str, run_dir: Path) -> str:
    return f"resuming run {resumed_id} as run {run_dir.name}"


def failed_resume_line(resumed_id: str, run_dir: Path) -> str:
    """What a failed resume says after its error: both runs, and how to try again."""
    return (
        f"  this resume is run {run_dir.name}; run {resumed_id} is unchanged "
        f"(agentcell runs resume {resumed_id} PROMPT tries again from it)"
    )
