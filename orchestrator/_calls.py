"""What each call of an ``Orchestrator`` (``run``, ``delegate``, ``map``) has of its own:
whether its disk lets it start, its run folder, its ledger and budgets, its summary.

Where a call is recorded is the orchestrator's to say, and it may change between calls
(a resumed run pins its folder, a chat session keeps its own summary): ``Recording`` is
read as each call needs it, never copied.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from agentcell.orchestrator._main_run import write_call_summary
from agentcell.orchestrator.config._settings import Settings
from agentcell.orchestrator.delegation._request import RunAccount
from agentcell.orchestrator.delegation._results import SubAgentResult
from agentcell.orchestrator.records._disk import disk_refusal
from agentcell.orchestrator.records._store import new_run_dir
from agentcell.orchestrator.telemetry._usage import UsageLedger
from agentcell.protocol import RunStatus

#: What a crossed budget calls on what a call started: (reason, status).
Stop = Callable[[str, RunStatus], None]


class Recording(Protocol):
    """How the orchestrator's calls are recorded (its attributes of these names)."""

    record: bool  # False: no call is recorded
    run_dir: Path | None  # every call records here; None: a new folder per call
    call_summaries: bool  # False: the caller keeps summary.json (chat's turns)


class Calls:
    """A call's run folder, ledger and summary, for the main agent's runs and direct ones."""

    def __init__(
        self,
        recording: Recording,
        settings: Settings,
        lifetime: UsageLedger,
        *,
        workdir: Path,
        model_name: str | None,
    ) -> None:
        self.recording = recording
        self.settings = settings
        self.lifetime = lifetime  # the orchestrator's ledger, every call's totals
        self.workdir = workdir
        self.model_name = model_name

    def refusal(self) -> str:
        """Why a call may not start on this disk, in one line ("": it may)."""
        return disk_refusal(self.workdir, self.settings, self.recording.record)

    def run_dir(self) -> Path | None:
        """Where one call is recorded: the directory given to the constructor (every call
        shares it), else a new one per call; None when not recording."""
        if not self.recording.record:
            return None
        given = self.recording.run_dir
        return given if given is not None else new_run_dir(self.workdir)

    @property
    def summaries(self) -> bool:
        """Whether a call writes its own ``summary.json``."""
        return self.recording.call_summaries

    def account(self, run_dir: Path | None, stops: list[Stop]) -> RunAccount:
        """A call's own ledger (its budgets) that also feeds the lifetime one; crossing a
        budget calls every function in ``stops`` with the reason and ``budget``."""

        def exceeded(why: str) -> None:
            for stop in list(stops):
                stop(why, RunStatus.BUDGET)

        ledger = UsageLedger(
            prices=self.settings.prices,
            budgets=self.settings.budgets,
            on_exceeded=exceeded,
            parent=self.lifetime,
        )
        return RunAccount(ledger=ledger, run_dir=str(run_dir) if run_dir else "")

    def write_summary(
        self,
        account: RunAccount,
        returned: list[SubAgentResult],
        run_dir: Path | None,
        started: float,
        *,
        prompt: str,
        agent: str,
        kind: str,
    ) -> None:
        """``summary.json`` of a ``delegate`` or ``map`` (unless the caller keeps it)."""
        if run_dir is not None and self.summaries:
            write_call_summary(
                run_dir,
                account,
                returned,
                started,
                kind=kind,
                agent=agent,
                model=self.model_name or "",
                prompt=prompt,
            )
