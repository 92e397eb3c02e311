"""A resumed run (``agentcell runs resume ID``) is a new run of its own.

It gets a new run folder before it starts, and that folder notes the run it resumes; the
resumed run's folder is only read. So a resume that fails (the model errs, the run is
cancelled, the process is killed) leaves the run it went on from as it was, and both can
be resumed again.
"""

from __future__ import annotations

from pathlib import Path

from agentcell.orchestrator._orchestrator import Orchestrator
from agentcell.orchestrator._records import mark_resumed, new_run_dir


def begin_resumed_run(orch: Orchestrator, workdir: Path, resumed_id: str) -> Path:
    """A new run folder for ``orch``'s calls, marked as resuming ``resumed_id``."""
    run_dir = new_run_dir(workdir)
    mark_resumed(run_dir, resumed_id)
    pin_run_dir(orch, run_dir)
    return run_dir


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
