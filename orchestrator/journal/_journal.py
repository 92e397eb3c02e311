"""A run's journal, as the parent writes it while the run goes.

What it holds (each a record of ``_file``): the run's start (``run``), each relayed model
request as a delta (``ask``: _delta.py) and each relayed answer's bytes as the server
sent them, the key masked (``answer``), and the parent's own facts (``fact``: a kind of
fact and its fields). Provider keys and request headers are never written. The run's
end (``end``) carries its status; a journal without one belongs to a run that is going
(its lock held: _place.py) or was interrupted.

Durability: every record is written when it happens (a SIGKILL loses nothing written);
it reaches the disk at the next ``sync`` — at most ``SYNC_EVERY_S`` after it while the
run writes, and at the end — so a power loss loses at most that much of the run.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import time
from pathlib import Path
from typing import Any

import msgspec
from agentcell.orchestrator.journal._delta import RequestDeltas
from agentcell.orchestrator.journal._file import JournalBroken, JournalWriter
from agentcell.orchestrator.journal._place import (
    ENDED_FILE,
    JOURNAL_FILE,
    RunLock,
    make_journal_dir,
    prune,
)
from agentcell.protocol import ToolRecord, Usage
from agentcell.worker import Redactor

log = logging.getLogger("agentcell.orchestrator")

SYNC_EVERY_S = 1.0
KILL_AT_VARIABLE = "AGENTCELL_TEST_KILL_AT"


class Journal:
    """One run's journal: open while the run goes, only in the parent."""

    def __init__(self, run_dir: Path, *, run_id: str, kind: str) -> None:
        self.folder = make_journal_dir(run_dir)
        self._lock = RunLock(self.folder)
        prune(self.folder.parent, keep=self.folder)  # journals whose run folder is gone
        (self.folder / ENDED_FILE).unlink(missing_ok=True)  # it goes on (again) from here
        self._writer = JournalWriter(self.folder / JOURNAL_FILE)
        self._deltas: dict[str, RequestDeltas] = {}
        self._main_messages = 0  # of the main session, journaled by main_turn
        self._redact = Redactor.from_env()  # the keys this process holds, as records mask them
        self._synced_at = time.monotonic()
        self.run_id = run_id
        self._kill_at = KillAt.from_env()
        self._write("run", run_id=run_id, kind=kind, run_dir=str(run_dir), pid=os.getpid())

    @property
    def broken(self) -> JournalBroken | None:
        """Why the journal stopped being written, if it did (the run goes on)."""
        return self._writer.broken

    def ask(self, agent_id: str, call_id: int, top: dict[str, msgspec.Raw]) -> None:
        """A relayed model request: its checked top level, as a delta of the last one."""
        deltas = self._deltas.setdefault(agent_id, RequestDeltas())
        self._write("ask", agent=agent_id, call=call_id, **deltas.delta(top))

    def answer(
        self, agent_id: str, call_id: int, status: int, body: bytes, error: str = ""
    ) -> None:
        """A relayed answer, whole: its status, the bytes the child was sent, and the
        kind of error that cut it ("" when it arrived whole)."""
        self._write("answer", agent=agent_id, call=call_id, status=status, body=body, error=error)

    def tool(self, agent_id: str, record: ToolRecord) -> None:
        """A tool call's start, or its whole result (masked as a fact's text is)."""
        if record.finished:
            self.fact(
                "tool",
                agent=agent_id,
                call=record.call_id,
                name=record.name,
                finished=True,
                content=record.content,
                is_error=record.is_error,
            )
        else:
            self.fact(
                "tool",
                agent=agent_id,
                call=record.call_id,
                name=record.name,
                arguments=record.arguments,
            )

    def main_turn(
        self, prompt: str, model: str, session: Any, *, chat: bool, resumes: str, given: list[str]
    ) -> None:
        """A main-agent run begins: its prompt and model, and the session it goes on from
        as the messages the journal does not have yet (a chat's turns share a journal);
        ``resumes``: the killed run it resumes (its journal is read with this one's);
        ``given``: the custom tools and model objects it was given in code, by name (its
        resume needs them)."""
        if resumes:
            self.fact("resumes", run=resumes)
        messages = session.messages
        new = messages[self._main_messages :] if len(messages) >= self._main_messages else []
        self._main_messages = len(messages)
        self.fact(
            "main",
            prompt=prompt,
            model=model,
            chat=chat,
            kept=len(messages) - len(new),
            given=given,
            session=msgspec.to_builtins(new),
        )

    def charged(self, agent_id: str, model: str, usage: Usage) -> None:
        """Tokens charged to the run for one of an agent's model calls, as counted."""
        self.fact("charged", agent=agent_id, model=model, usage=msgspec.to_builtins(usage))

    def main_answer(self, digest: bytes, response: bytes) -> None:
        """One of the main agent's model answers, as it parsed it (it runs here), with
        the digest of the request it answered: what a resume serves that request."""
        self._write("main_answer", digest=digest, response=response)

    def masked(self, data: bytes) -> bytes:
        """UTF-8 ``data`` with every secret this process holds masked."""
        return self._redact(data.decode()).encode()

    def fact(self, what: str, **fields: Any) -> None:
        """One of the parent's own facts (a task call, a state, an approval, a charge);
        a secret this process holds in any text of it is masked, as in the records (a
        child's answer may carry a key a hostile server split over several deltas)."""
        self._write("fact", what=what, **_masked(fields, self._redact))

    def end(self, status: str) -> None:
        """The run's end: its last record, then ``ended`` (what ``runs list`` reads)."""
        self._write("end", status=status)
        self._sync()
        if self.broken is None:
            with contextlib.suppress(OSError):  # a full disk: the run reads interrupted
                _write_small(self.folder / ENDED_FILE, status.encode())

    def close(self) -> None:
        self._writer.close()
        self._lock.release()

    def _write(self, kind: str, /, **fields: Any) -> None:
        try:
            self._append(kind, fields)
        finally:
            if self._kill_at is not None:  # written, or (broken) would have been
                self._kill_at.written(kind if kind != "fact" else f"fact:{fields['what']}")

    def _append(self, kind: str, fields: dict[str, Any]) -> None:
        if self._writer.broken is not None:
            return  # said once, when it broke
        try:
            self._writer.append(kind, **fields)
            if time.monotonic() - self._synced_at >= SYNC_EVERY_S:
                self._sync()
        except JournalBroken as broken:
            log.warning("%s", broken)  # once: it writes nothing more

    def _sync(self) -> None:
        self._synced_at = time.monotonic()
        try:
            self._writer.sync()
        except JournalBroken as broken:
            log.warning("%s", broken)


class KillAt:
    """The test-only fault switch: ``AGENTCELL_TEST_KILL_AT=KIND:N`` SIGKILLs this process
    right after the journal wrote (or, broken, would have written) its N-th record of
    KIND (``ask``, ``answer``, ``main_answer``, or ``fact:WHAT``): an orchestrator dying
    at a chosen point."""

    def __init__(self, kind: str, nth: int) -> None:
        self._kind, self._left = kind, nth

    @classmethod
    def from_env(cls) -> KillAt | None:
        wanted = os.environ.get(KILL_AT_VARIABLE, "")
        kind, _, nth = wanted.rpartition(":")
        if not kind or not nth.isdigit():
            return None
        return cls(kind, int(nth))

    def written(self, kind: str) -> None:
        if kind == self._kind:
            self._left -= 1
            if self._left == 0:
                os.kill(os.getpid(), signal.SIGKILL)


def _write_small(path: Path, data: bytes) -> None:
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(path, flags, 0o600)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def _masked(value: Any, redact: Redactor) -> Any:
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {key: _masked(item, redact) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_masked(item, redact) for item in value]
    return value
