"""Run records: one JSON Lines transcript per agent, written by the agent's own process.

Each line is an object with ``ts`` (seconds since the epoch), ``agent`` and ``kind``
(``start``, ``event``, ``messages``, ``result``), plus the payload, and, when the record has
a key, a last field ``mac`` chaining it to the line before (see ``_record_chain``). A child
writes its own file, so recording costs the shared parent nothing, and a child that
crashes leaves everything up to its last event. Records are private: the folder is 0700,
the file 0600, whatever the umask.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

import msgspec
from agentcell.protocol import AgentEvent, Message, RunResult
from agentcell.worker._record_chain import last_mac, seal

_encoder = msgspec.json.Encoder()
_chain_lock = threading.Lock()  # one line at a time, whoever in this process writes it


def private_file(path: Path, flags: int = os.O_WRONLY | os.O_APPEND) -> int:
    """Open (create) ``path`` 0600 without following a link; its folder is made 0700."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(path, flags | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    os.fchmod(fd, 0o600)  # one made before (or by another umask) is made private too
    return fd


class Transcript:
    def __init__(self, path: Path, agent_id: str, redact: Any = None, key: bytes = b"") -> None:
        self.path = path
        self.agent_id = agent_id
        self._redact = redact  # str -> str, applied to every line (secrets)
        self._key = key  # this record's MAC key (b"": lines are not chained)
        fd = private_file(path, os.O_RDWR | os.O_APPEND)  # read too: the last line's MAC
        self._file: IO[bytes] | None = os.fdopen(fd, "ab", buffering=0)

    def write(self, kind: str, **payload: Any) -> None:
        if self._file is None:
            return
        line = _encoder.encode(
            {"ts": round(time.time(), 3), "agent": self.agent_id, "kind": kind, **payload}
        )
        if self._redact is not None:
            line = self._redact(line.decode()).encode()
        if not self._key:
            self._file.write(line + b"\n")
            return
        with _chain_lock:  # the chain goes on from the file's last line, whoever wrote it
            line, _ = seal(line, last_mac(self._file.fileno()), self._key)
            self._file.write(line + b"\n")

    def event(self, event: AgentEvent) -> None:
        self.write("event", event=event)

    def messages(self, messages: Sequence[Message]) -> None:
        self.write("messages", messages=list(messages))

    def result(self, result: RunResult) -> None:
        self.write("result", result=result)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
