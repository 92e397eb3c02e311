"""What each call of an ``Orchestrator`` (``run``, ``delegate``, ``map``) has of its own:
whether its disk lets it start, its run folder, its ledger and budgets, its summary.

Where a call is recorded is the orchestrator's to say, and it may change between calls
(a resumed run pins its folder, a chat session keeps its own summary): ``Recording`` is
read as each call needs it, never copied.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from agentcell.orchestrator._main_run import write_call_summary
from agentcell.orchestrator.config._load import ConfigError
from agentcell.orchestrator.config._settings import Settings
from agentcell.orchestrator.delegation._request import RunAccount
from agentcell.orchestrator.delegation._results import SubAgentResult
from agentcell.orchestrator.journal._journal import Journal
from agentcell.orchestrator.journal._place import RunStillGoing, inside, journal_root
from agentcell.orchestrator.records._disk import disk_refusal
from agentcell.orchestrator.records._store import new_run_dir
from agentcell.orchestrator.teams._mail import Team
from agentcell.orchestrator.telemetry._usage import UsageLedger
from agentcell.protocol import RunStatus

log = logging.getLogger("agentcell")

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
        #: Whether recorded calls are journaled (off only to measure what it costs).
        self.journaled = True
        self._journals: dict[str, Journal] = {}  # open, by run folder
        #: The folder of the next call alone (a resume's, marked before it starts).
        self.next_run_dir: Path | None = None

    def refusal(self) -> str:
        """Why a call may not start on this disk, in one line ("": it may)."""
        return disk_refusal(self.workdir, self.settings, self.recording.record)

    def run_dir(self) -> Path | None:
        """Where one call is recorded: the directory given to the constructor (every call
        shares it), else a new one per call; None when not recording."""
        if not self.recording.record:
            return None
        if self.next_run_dir is not None:  # a resume's folder, made before it started
            chosen, self.next_run_dir = self.next_run_dir, None
            return chosen
        given = self.recording.run_dir
        return given if given is not None else new_run_dir(self.workdir)

    @property
    def summaries(self) -> bool:
        """Whether a call writes its own ``summary.json``."""
        return self.recording.call_summaries

    def account(self, run_dir: Path | None, stops: list[Stop], *, kind: str) -> RunAccount:
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
        journal = self._journal(run_dir, kind)
        return RunAccount(
            ledger=ledger,
            run_dir=str(run_dir) if run_dir else "",
            journal=journal,
            team=Team(self.settings.teams, journal),
        )

    def _journal(self, run_dir: Path | None, kind: str) -> Journal | None:
        """The journal of the run recorded in ``run_dir``: opened by its first call and
        kept while the folder is in use (a chat's turns share one)."""
        if run_dir is None or not self.journaled:
            return None
        if inside(journal_root(), self.workdir):
            # Sub-agents may write the workdir: a journal there could be forged by one.
            log.warning(
                "not journaling this run: the journal folder %s is inside the workdir, "
                "where sub-agents can write; set XDG_STATE_HOME to a folder outside it",
                journal_root(),
            )
            return None
        journal = self._journals.get(str(run_dir))
        if journal is None:
            try:
                journal = Journal(run_dir, run_id=run_dir.name, kind=kind)
            except RunStillGoing as going:
                raise ConfigError(
                    [
                        f"run {run_dir.name} is still running (pid {going.pid}): wait for it to "
                        "end, or stop that orchestrator"
                    ]
                ) from None
            except OSError as exc:
                log.warning("the run's journal could not be opened (%s): it cannot be resumed", exc)
                return None
            self._journals[str(run_dir)] = journal
        return journal

    def finish(self, account: RunAccount, status: str) -> None:
        """A call's end in its journal: the run's end when the call had the folder to
        itself, else (a chat's turn) the turn's."""
        journal = account.journal
        if journal is None:
            return
        if self.recording.run_dir is None:
            self._journals.pop(account.run_dir, None)
            journal.end(status)
            journal.close()
        else:
            journal.fact("call_ended", status=status)

    def close(self, status: str = "closed") -> None:
        """The orchestrator's end: the journals of the folders its calls shared end too."""
        journals, self._journals = self._journals, {}
        for journal in journals.values():
            journal.end(status)
            journal.close()

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
