"""``Orchestrator.resume``: a run whose orchestrator died, finished from its journal.

The resume is a run of its own (a new run folder, marked as resuming the killed one,
journaled in turn, so it can itself be killed and resumed). Its main agent starts again
from the journaled prompt: every request it makes that the killed run made is answered
from the journal, every tool call the journal has is not run again, a sub-agent that
ended delivers its journaled result, and one that was in flight starts in a fresh
process and sandbox and goes on the same way from its own journal (_replay.py). While
it runs it holds the killed run's lock, so a second resume of that run is refused; when
it ends, the killed run's journal folder names it (``resumed-by``).
"""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec
from agentcell.orchestrator.config._load import ConfigError
from agentcell.orchestrator.journal._place import RunLock, RunStillGoing, journal_dir
from agentcell.orchestrator.journal._replay import RunPast, read_past
from agentcell.orchestrator.records._store import find_run_dir, mark_resumed, new_run_dir
from agentcell.protocol import Message
from agentcell.worker import Session

if TYPE_CHECKING:
    from agentcell.orchestrator._main_agent import MainAgent
    from agentcell.orchestrator._main_run import RunReport

log = logging.getLogger("agentcell.orchestrator")

#: In the killed run's journal folder: the id of the run that resumed it.
RESUMED_BY = "resumed-by"


class NotResumable(LookupError):
    """The run cannot be resumed where it stopped (one line: why, and what to do)."""


def killed_run(workdir: Path, run_id: str) -> tuple[Path, RunPast]:
    """The folder and journal of the interrupted run ``run_id`` names (a unique prefix
    or suffix will do). ``NotResumable`` for one that is going, ended, or has no journal."""
    run_dir = find_run_dir(workdir, run_id)
    past = read_past(run_dir)
    if past.ended:
        raise NotResumable(
            f"run {run_dir.name} ended ({past.ended}): continue its session with "
            f"`agentcell runs resume {run_dir.name}` instead"
        )
    if past.prompt is None:
        raise NotResumable(
            f"run {run_dir.name} journaled no main-agent run (a delegate or map call): "
            "there is no conversation to finish"
        )
    return run_dir, past


def interrupted_prompt(run_dir: Path) -> tuple[str, bool] | None:
    """The prompt of the interrupted run in ``run_dir`` (of its last turn, for a chat) and
    whether it was a chat; None when there is none to finish (no journal, or it ended)."""
    try:
        past = read_past(run_dir)
    except LookupError:
        return None
    if past.ended or past.prompt is None:
        return None
    return past.prompt, past.chat


def journaled_model(run_dir: Path) -> str | None:
    """The main model the run's journal names."""
    try:
        return read_past(run_dir).model or None
    except LookupError:
        return None


async def resume_run(
    main: MainAgent, workdir: Path, run_id: str, *, timeout_s: float | None
) -> RunReport:
    """Finish the interrupted run ``run_id`` (see the module)."""
    run_dir, past = killed_run(workdir, run_id)
    given = {t.name for t in main.parts.custom_tools} | set(main.parts.model_objects)
    if missing := [name for name in past.given if name not in given]:
        raise ConfigError(
            [
                f"run {run_dir.name} was given {name!r} in code (a custom tool or a model "
                "object): give the resuming Orchestrator the same one, by that name"
                for name in missing
            ]
        )
    if past.damage:  # a cut last record (a full disk, a power loss): done again
        log.warning(
            "run %s: %s; what came after its last whole record is done again",
            run_dir.name,
            past.damage,
        )
    try:
        hold = RunLock(journal_dir(run_dir))
    except RunStillGoing as going:
        raise NotResumable(
            f"run {run_dir.name} is still running (pid {going.pid}): wait for it to end, "
            "or stop that orchestrator"
        ) from None
    try:
        new_dir = new_run_dir(workdir)
        mark_resumed(new_dir, run_dir.name)
        main.calls.next_run_dir = new_dir
        # Its sub-agents keep their ids; new ones are numbered after them.
        main.runner.number_after(past.highest_agent_number)
        main.parts.broker.restore(past.always)  # what the user allowed "always" holds
        # A chat's turn goes on from the session its earlier turns left (journaled).
        session = Session(msgspec.convert(past.session, list[Message])) if past.session else None
        report = await main.run(
            past.prompt or "", session=session, timeout_s=timeout_s, keep_background=False,
            past=past,
        )  # fmt: skip
        with contextlib.suppress(OSError):
            (journal_dir(run_dir) / RESUMED_BY).write_text(new_dir.name + "\n")
        return report
    finally:
        hold.release()
