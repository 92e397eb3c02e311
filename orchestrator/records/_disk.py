"""A full disk is a state agentcell reports, not a crash (issue 27 item 1).

Here: ``check_free`` / ``disk_refusal``, the look at the records and work folders before
a run starts work (space and inodes, against ``min_free_mb`` / ``min_free_inodes``);
``full_disk`` / ``disk_line``, which tell an ``OSError`` of a full disk (``ENOSPC``,
``EDQUOT``) from any other and say it in one line naming the folder and the fix; and
``finish_record``, the end of a main-agent run's record, where a full disk becomes the
report's status and error (the answer stays in the report).
"""

from __future__ import annotations

import dataclasses
import errno
import os
import time
from collections.abc import Iterable
from pathlib import Path

from agentcell.orchestrator._main_run import RunReport, report_json
from agentcell.orchestrator.config._settings import Settings
from agentcell.orchestrator.delegation._results import SubAgentResult
from agentcell.orchestrator.records._store import RUNS_DIR, write_summary
from agentcell.protocol import RunResult, RunStatus, Usage
from agentcell.worker import Transcript

_FULL = (errno.ENOSPC, errno.EDQUOT)


class DiskFull(OSError):
    """The records or work folder has no room; ``str()`` is one line naming it and the fix."""

    def __str__(self) -> str:
        return str(self.strerror)


def full_disk(exc: BaseException) -> bool:
    """Whether ``exc`` says the disk (or a quota) is full: of space or of inodes."""
    return isinstance(exc, OSError) and exc.errno in _FULL


def _what_is_full(path: Path) -> str:
    """ "no free space" or "no free inodes", whichever the file system holding ``path`` is
    out of now (its nearest folder that exists)."""
    try:
        stats = os.statvfs(_existing(path))
    except OSError:
        return "no free space"
    if stats.f_files and stats.f_favail == 0:
        return "no free inodes"
    return "no free space"


def _existing(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def disk_line(path: Path, exc: OSError, what: str) -> str:
    """One line: ``what`` could not be written under ``path`` because its disk is full."""
    name = "EDQUOT, a disk quota" if exc.errno == errno.EDQUOT else "ENOSPC"
    return (
        f"the disk is full ({_what_is_full(path)}, {name}): {what} could not be written "
        f"in {path}; free space on that disk and run again"
    )


def check_free(folders: Iterable[Path], *, min_free_mb: int, min_free_inodes: int) -> None:
    """Raise ``DiskFull`` naming the first folder whose file system has less than
    ``min_free_mb`` MiB or ``min_free_inodes`` inodes free for this user (0 turns a check
    off); a file system that counts no inodes (``f_files`` 0) is not held to them."""
    seen: set[int] = set()
    for folder in folders:
        here = _existing(folder)
        try:
            stats = os.statvfs(here)
        except OSError:
            continue
        if stats.f_fsid in seen:
            continue
        seen.add(stats.f_fsid)
        free_mb = stats.f_bavail * stats.f_frsize / (1 << 20)
        if min_free_mb and free_mb < min_free_mb:
            raise DiskFull(
                errno.ENOSPC,
                f"the disk holding {here} is full: {free_mb:.1f} MiB free, under "
                f"min_free_mb = {min_free_mb}; free space there (or lower min_free_mb) "
                "and run again",
            )
        if min_free_inodes and stats.f_files and stats.f_favail < min_free_inodes:
            raise DiskFull(
                errno.ENOSPC,
                f"the disk holding {here} is out of inodes: {stats.f_favail} free, under "
                f"min_free_inodes = {min_free_inodes}; remove files there (or lower "
                "min_free_inodes) and run again",
            )


def disk_full_report(reason: str, started: float) -> RunReport:
    """The report of a run that did not start: its disk is full (``reason``, one line)."""
    return RunReport(
        status=RunStatus.ERROR,
        final_text="",
        error=reason,
        usage=Usage(),
        cost_usd=None,
        duration_ms=(time.perf_counter() - started) * 1000,
        run_dir="",
        subagents=[],
        main=RunResult(status=RunStatus.ERROR, error=reason),
    )


def disk_full_result(reason: str, agent: str, description: str = "") -> SubAgentResult:
    """The result of a direct call (``delegate``, an item of ``map``) that did not start:
    its disk is full (``reason``, one line). No process, no record."""
    return SubAgentResult(
        agent_id="", agent_type=agent, description=description, status=RunStatus.ERROR, error=reason
    )


def finish_record(
    report: RunReport,
    transcript: Transcript | None,
    *,
    prompt: str,
    model: str,
    summary: bool = True,
) -> RunReport:
    """The end of a main-agent run's record: its result line and (``summary``) its
    ``summary.json``. What a full disk kept out is said in the report (status ``error``,
    one line), which still carries the answer; nothing already recorded is lost."""
    if transcript is None:
        return report
    transcript.result(report.main)
    transcript.close()
    run_dir = Path(report.run_dir)
    missing = [transcript.problem] if transcript.problem else []
    missing += [
        f"{r.agent_id}: {w}" for r in report.subagents for w in r.warnings if RECORD_CUT in w
    ]
    if missing:
        line = f"the disk is full: the run's record in {run_dir} is incomplete"
        report = _failed(report, f"{line} ({'; '.join(missing)})")
    if not summary:
        return report
    try:
        write_summary(run_dir, report_json(report, prompt=prompt, model=model))
    except OSError as exc:
        if not full_disk(exc):
            raise
        report = _failed(report, disk_line(run_dir, exc, "summary.json"))
    return report


#: How a sub-agent's result says its own record was cut (``SubAgentResult.warnings``).
RECORD_CUT = "its record is incomplete"


def _failed(report: RunReport, line: str) -> RunReport:
    """``report`` with status ``error`` and ``line`` added to what it says went wrong."""
    error = f"{report.error}; {line}" if report.error else line
    return dataclasses.replace(report, status=RunStatus.ERROR, error=error)


def disk_refusal(workdir: Path, settings: Settings, recording: bool) -> str:
    """Why a run may not start on this disk, in one line ("": it may): the work folder
    and, when the run is recorded, the records folder are checked."""
    folders = [workdir / RUNS_DIR, workdir] if recording else [workdir]
    try:
        check_free(
            folders, min_free_mb=settings.min_free_mb, min_free_inodes=settings.min_free_inodes
        )
    except DiskFull as exc:
        return str(exc)
    return ""
