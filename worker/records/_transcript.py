"""Run records: one JSON Lines transcript per agent, written by the agent's own process.

Each line is an object with ``ts`` (seconds since the epoch), ``agent`` and ``kind``
(``start``, ``event``, ``messages``, ``result``), plus the payload, and, when the record has
a key, a last field ``mac`` chaining it to the line before (see ``_record_chain``). A child
writes its own file, so recording costs the shared parent nothing, and a child that
crashes leaves everything up to its last event. Records are private: the folder is 0700,
the file 0600, whatever the umask.
"""

from __future__ import annotations

import contextlib
import errno
import os
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

import msgspec
from agentcell.protocol import AgentEvent, Message, RunResult
from agentcell.worker.records._chain import last_mac, seal

_encoder = msgspec.json.Encoder()
_chain_lock = threading.Lock()  # one line at a time, whoever in this process writes it


def private_file(path: Path, flags: int = os.O_WRONLY | os.O_APPEND) -> int:
    """Open (create) ``path`` 0600 without following a link; its folder is made 0700."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(path, flags | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    os.fchmod(fd, 0o600)  # one made before (or by another umask) is made private too
    return fd


_FULL = (errno.ENOSPC, errno.EDQUOT)


class Transcript:
    """One agent's record. A full disk never fails the agent: the record stops at its
    last whole line and ``problem`` says what is missing (the run reports it)."""

    def __init__(self, path: Path, agent_id: str, redact: Any = None, key: bytes = b"") -> None:
        self.path = path
        self.agent_id = agent_id
        self._redact = redact  # str -> str, applied to every line (secrets)
        self._key = key  # this record's MAC key (b"": lines are not chained)
        self.lines = 0  # whole lines written
        self.problem = ""  # why the record is incomplete ("": it is not)
        self._file: IO[bytes] | None = None
        try:
            fd = private_file(path, os.O_RDWR | os.O_APPEND)  # read too: the last line's MAC
        except OSError as exc:
            if exc.errno not in _FULL:
                raise
            self._give_up(exc)
            return
        self._file = os.fdopen(fd, "ab", buffering=0)

    def write(self, kind: str, **payload: Any) -> None:
        if self._file is None:
            return
        line = _encoder.encode(
            {"ts": round(time.time(), 3), "agent": self.agent_id, "kind": kind, **payload}
        )
        if self._redact is not None:
            line = self._redact(line.decode()).encode()
        if not self._key:
            self._append(line + b"\n")
            return
        with _chain_lock:  # the chain goes on from the file's last line, whoever wrote it
            line, _ = seal(line, last_mac(self._file.fileno()), self._key)
            self._append(line + b"\n")

    def _append(self, data: bytes) -> None:
        """The whole line or none of it: a short write (a full disk) is cut back to the
        last whole line, and nothing more is written."""
        assert self._file is not None
        fd = self._file.fileno()
        written = 0
        try:
            while written < len(data):
                written += os.write(fd, data[written:])
        except OSError as exc:
            if exc.errno not in _FULL:
                raise
            with contextlib.suppress(OSError):  # this line's part goes (appends end the file)
                os.ftruncate(fd, os.fstat(fd).st_size - written)
            self._give_up(exc)
            return
        self.lines += 1

    def _give_up(self, exc: OSError) -> None:
        what = f"cut after {self.lines} lines" if self.lines else "not written"
        self.problem = f"{self.path.name} {what} (the disk is full: {exc.strerror})"
        if self._file is not None:
            self._file.close()
            self._file = None

    def event(self, event: AgentEvent) -> None:
        self.write("event", event=event)

    def messages(self, messages: Sequence[Message]) -> None:
        self.write("messages", messages=list(messages))

    def result(self, result: RunResult) -> None:
        self.write("result", result=result)

    def finish(self, result: RunResult) -> None:
        """The result line, then closed; a record a full disk cut says so in
        ``result.data["record_problem"]`` (the parent names it in the run's result)."""
        self.result(result)
        self.close()
        if self.problem:
            result.data["record_problem"] = self.problem

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
