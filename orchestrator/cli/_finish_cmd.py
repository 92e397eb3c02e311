"""``runs resume`` of an interrupted run (its orchestrator died): finish it from its
journal, then, for a chat, go on with the chat; with a prompt, one more run after it.

An interrupted one-shot run is finished and its answer printed (its exit code the
run's). An interrupted chat's last turn is finished, then the chat goes on from the
session it left. ``PROMPT`` makes either one more run on that session, and exits.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agentcell.orchestrator._resume_run import journaled_model
from agentcell.orchestrator.cli._run_cmd import run_once
from agentcell.orchestrator.config._settings import Settings
from agentcell.orchestrator.records._store import (
    list_runs,
    recorded_main_session,
    recorded_model,
)
from agentcell.worker import Session


@dataclasses.dataclass(frozen=True)
class Resuming:
    """What ``runs resume`` was given, for the runs it makes."""

    workdir: Path
    agents_dirs: tuple[Path, ...]
    inline: Any
    as_json: bool
    load: Callable[..., Settings]  # the command line's settings loader


def finish_interrupted(
    how: Resuming, run_dir: Path, killed: tuple[str, bool], then: str | None, flags: dict[str, Any]
) -> int:
    """Finish the run in ``run_dir`` (``killed``: its last prompt, whether a chat); then
    ``then`` as one more run, or (a chat) the chat. Returns the exit code."""
    prompt, chat = killed
    workdir = how.workdir.resolve()
    if flags.get("model") is None:  # the journal names the model it ran with
        flags["model"] = journaled_model(run_dir)
    code = asyncio.run(
        run_once(
            prompt,
            how.load(how.workdir, **flags),
            workdir=workdir,
            agents_dirs=how.agents_dirs,
            agents=how.inline,
            timeout_s=None,
            as_json=how.as_json,
            quiet=how.as_json,
            resumed_from=run_dir.name,  # with no session: finish it
        )
    )
    finished = [r["run_id"] for r in list_runs(workdir) if r.get("resumed_from") == run_dir.name]
    if code != 0 or not finished or (then is None and not chat):
        return code
    resumed_id, messages = recorded_main_session(workdir, finished[0])
    settings = how.load(how.workdir, **{**flags, "model": recorded_model(workdir, resumed_id)})
    if then is None:  # a chat: it goes on from where its finished turn left it
        from agentcell.orchestrator.cli._chat import run_chat

        return asyncio.run(
            run_chat(
                settings,
                workdir,
                how.agents_dirs,
                agents=how.inline,
                session=Session(messages),
                resumed_from=resumed_id,
            )
        )
    return asyncio.run(
        run_once(
            then,
            settings,
            workdir=workdir,
            agents_dirs=how.agents_dirs,
            agents=how.inline,
            timeout_s=None,
            as_json=how.as_json,
            quiet=how.as_json,
            session=Session(messages),
            resumed_from=resumed_id,
        )
    )
