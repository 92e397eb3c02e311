"""Settle: however a child ended becomes exactly one ``SubAgentResult``.

The last of a delegation's three phases (after ``_prepare`` and ``_relay``). The backend's
``ChildOutcome`` (a result, a crash, a deadline, a limit, a kill) and what the relay saw
(usage, turns, the model) become the result's status, text and figures; a worktree the
child worked in is committed and handed back; a test double's record comes home.
Pure functions but the worktree's git, so the outcome table is tested without processes.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import msgspec
from agentcell.orchestrator.backends._outcome import ChildOutcome, OutcomeKind
from agentcell.orchestrator.delegation._relay import Progress
from agentcell.orchestrator.delegation._results import SubAgentResult
from agentcell.orchestrator.telemetry._usage import UsageLedger
from agentcell.orchestrator.workspace._hook_writes import HookWrites
from agentcell.protocol import Limits, RunStatus
from agentcell.worker import MAX_ANSWER_BYTES, cut_answer

#: How a result that never got a process begins its error.
NO_PROCESS = "never got a process"
#: How a result's warning says the sub-agent's own record was cut (a full disk).
RECORD_CUT = "its record is incomplete"


def settle(
    base: dict[str, Any],
    outcome: ChildOutcome | None,
    progress: Progress,
    started: float,
    *,
    limits: Limits,
    cancelled: bool,
    ledger: UsageLedger,
    run_dir: str,
) -> SubAgentResult:
    """The result of a run that got as far as a process (or was cancelled waiting for
    one: ``outcome`` None)."""
    common = _figures(base, progress, started, ledger)
    if outcome is None:
        # Ended while it waited in the queue (its caller ended, a background run was
        # stopped at the run's end): the work it was asked for never ran.
        waited = common["duration_ms"] / 1000
        common["queued_ms"] = common["duration_ms"]
        common.pop("sandbox", None)  # no process, no walls
        return SubAgentResult(
            **common,
            status=RunStatus.ERROR,
            error=f"{NO_PROCESS}: cancelled after waiting {waited:.1f} s for one",
            no_process=True,
        )
    common.update(
        pid=outcome.pid,
        peak_rss_bytes=outcome.peak_rss_bytes,
        exit_code=outcome.exit_code,
        signal=outcome.signal,
    )
    run = outcome.result
    if run is not None:
        common.update(turns=run.turns or progress.turns, tool_calls=run.tool_calls)
        problems = run.data.get("mcp_problems")
        if isinstance(problems, list):
            common["warnings"] = [*common.get("warnings", []), *map(str, problems)]
        if cut := run.data.get("record_problem"):  # its own record hit a full disk
            common["warnings"] = [*common.get("warnings", []), f"{RECORD_CUT}: {cut}"]
        if "sandbox" in run.data:
            common["sandbox"] = str(run.data["sandbox"])
        if run.usage.total_tokens >= progress.usage.total_tokens:
            common["usage"] = run.usage
    kind = outcome.kind
    # The child cuts its answer to this limit itself (its note a little past it); a
    # compromised one may send a frame's worth (16 MiB) into the main agent's context.
    text = run.text if run else ""
    if len(text.encode("utf-8", "surrogatepass")) > MAX_ANSWER_BYTES + ANSWER_NOTE_ROOM:
        text = cut_answer(text, " (cut by the parent)")
    if kind is OutcomeKind.RESULT and run is not None:
        return SubAgentResult(**common, status=run.status, text=text, error=run.error)
    if cancelled or kind is OutcomeKind.KILLED:
        error = outcome.detail or "cancelled by the parent"
        return SubAgentResult(**common, status=RunStatus.CANCELLED, text=text, error=error)
    if kind is OutcomeKind.DEADLINE:
        return SubAgentResult(**common, status=RunStatus.TIMEOUT, text=text, error=outcome.detail)
    limit_error = _limit_error(outcome, limits)
    if limit_error is not None:
        return SubAgentResult(**common, status=RunStatus.LIMIT, error=limit_error)
    if kind is OutcomeKind.FAILURE:
        return SubAgentResult(**common, status=RunStatus.ERROR, error=outcome.detail)
    return SubAgentResult(
        **common, status=RunStatus.CRASHED, error=_crash_error(outcome, base, run_dir)
    )


#: What a child's own cut adds past ``MAX_ANSWER_BYTES`` (its note, a few hundred bytes):
#: an answer it cut is not cut again, which would drop the note naming the saved whole.
ANSWER_NOTE_ROOM = 4096


def _figures(
    base: dict[str, Any], progress: Progress, started: float, ledger: UsageLedger
) -> dict[str, Any]:
    entry = ledger.agents.get(base["agent_id"])
    return dict(
        base,
        usage=progress.usage,
        model=progress.model,
        duration_ms=(time.perf_counter() - started) * 1000,
        queued_ms=progress.queued_ms,
        turns=progress.turns,
        cost_usd=entry.cost_usd if entry is not None else None,
    )


def _crash_error(outcome: ChildOutcome, base: dict[str, Any], run_dir: str) -> str:
    error = outcome.detail
    if run_dir:
        log = Path(run_dir) / f"{base['agent_id']}.stderr.log"
        if log.is_file() and log.stat().st_size:
            error += f"; its last output is in {log}"
    return error


def parent_failure(
    base: dict[str, Any], failure: str, pid: int | None, started: float
) -> SubAgentResult:
    """The result of a run the parent itself failed (a bug, an environment problem)."""
    return SubAgentResult(
        **base,
        status=RunStatus.ERROR,
        error=f"the parent could not run this sub-agent: {failure}",
        pid=pid,
        duration_ms=(time.perf_counter() - started) * 1000,
    )


def start_failure(base: dict[str, Any], failure: str, started: float) -> SubAgentResult:
    """The result of a run for which no process could be had (the pool could not start
    one, its backend is not running)."""
    base = {k: v for k, v in base.items() if k != "sandbox"}  # no process, no walls
    return SubAgentResult(
        **base,
        status=RunStatus.ERROR,
        error=f"{NO_PROCESS}: {failure}",
        duration_ms=(time.perf_counter() - started) * 1000,
        no_process=True,
    )


def unstarted(results: list[SubAgentResult]) -> str:
    """One line naming the sub-agents of a run that never got a process ("" if none)."""
    missed = [r for r in results if r.no_process]
    if not missed:
        return ""
    first = missed[0]
    head = f"{len(missed)} sub-agents" if len(missed) > 1 else "a sub-agent"
    return f"{head} of this run never got a process; {first.agent_id} ({first.agent_type}): " + (
        first.error.removeprefix(f"{NO_PROCESS}: ")
    )


#: The reason ``task_control cancel`` gives: the main agent chose to end the sub-agent, so
#: one still queued is ``cancelled``, not a run that could not get it a process.
BY_MAIN_AGENT = "cancelled by the main agent (task_control)"


def with_cancel_reason(
    result: SubAgentResult, status: RunStatus, reason: str, *, cancelled: bool
) -> SubAgentResult:
    """A run ended by ``RunHandle.cancel`` carries the canceller's status and reason; a
    budget stops the run even if its answer came as the budget was crossed."""
    replaced = result.status is RunStatus.CANCELLED or (
        result.status is RunStatus.COMPLETED and status is RunStatus.BUDGET
    )
    if cancelled and reason and result.no_process and status is not RunStatus.CANCELLED:
        # Stopped in the queue by a budget: that is why it never ran.
        return msgspec.structs.replace(result, status=status, error=reason, no_process=False)
    if cancelled and reason == BY_MAIN_AGENT and result.no_process:
        return msgspec.structs.replace(
            result, status=RunStatus.CANCELLED, error=reason, no_process=False
        )
    if cancelled and reason and result.no_process:  # it stays an error; the reason is kept
        return msgspec.structs.replace(result, error=f"{result.error} ({reason})")
    if cancelled and reason and replaced:
        return msgspec.structs.replace(result, status=status, error=reason)
    return result


#: A worktree agent's result when it left nothing: its worktree and branch are gone.
NO_CHANGES = "(no changes by the agent: its worktree and branch were removed)"


async def settle_worktree(
    watched: HookWrites, result: SubAgentResult, prompt: str
) -> SubAgentResult:
    """Commit what the child changed in its worktree (what its hooks wrote there left
    out) and name it in the result."""
    kept = await watched.finish(commit_message(result, prompt))
    if kept is None:  # said: a branch is not kept for a hook's log or an empty run
        return msgspec.structs.replace(result, diff_stat=NO_CHANGES)
    stat = kept.diff_stat
    if kept.commit_error:
        stat = f"(not committed, left staged: {kept.commit_error})\n{stat}"
    return msgspec.structs.replace(
        result,
        worktree=kept.path,
        branch=kept.branch,
        commit=None if kept.commit_error else kept.commit,
        diff_stat=stat,
    )


def absorb_test_record(outcome: ChildOutcome | None, model_object: Any) -> None:
    """A test double's copy in the child recorded its calls there: hand them back to the
    parent's object so assertions see every child's calls."""
    if outcome is None or outcome.result is None:
        return
    record = outcome.result.data.get("test_model")
    absorb = getattr(model_object, "absorb_record", None)
    if record is not None and absorb is not None:
        absorb(record)


def _limit_error(outcome: ChildOutcome, limits: Limits) -> str | None:
    """The message naming the limit a child went over, if that is how it ended."""
    if outcome.kind in (OutcomeKind.MEMORY, OutcomeKind.CPU):
        return outcome.detail
    memory = limits.address_space_bytes
    failure = outcome.failure
    if memory is not None and failure is not None and failure.error_type == "MemoryError":
        return (
            f"memory limit exceeded: an allocation failed under the {memory / 2**20:.0f} MiB "
            "limit (memory_limit_mb)"
        )
    if limits.cpu_seconds is not None and outcome.signal == "SIGXCPU":
        return f"CPU time limit exceeded: cpu_limit_s is {limits.cpu_seconds}"
    return None


_PROMPT_IN_COMMIT = 4000


def commit_message(result: SubAgentResult, prompt: str) -> str:
    """Subject: the agent and its task (the title, else the prompt's first line); body: the
    whole prompt and how the run ended, so `git log` tells what asked for the change."""
    task = result.description.strip() or next(
        (line.strip() for line in prompt.splitlines() if line.strip()), "(no prompt)"
    )
    if len(task) > 60:
        task = task[:59] + "…"
    subject = f"agentcell: {result.agent_type} ({result.agent_id}): {task}"
    if len(prompt) > _PROMPT_IN_COMMIT:  # a command line has a length limit
        prompt = prompt[:_PROMPT_IN_COMMIT] + "\n[... prompt cut]"
    return (
        f"{subject}\n\nAgent: {result.agent_type} ({result.agent_id}), "
        f"{result.status.value}\nTask:\n{prompt.strip()}\n"
    )
