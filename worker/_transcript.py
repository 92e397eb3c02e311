"""Run records: one JSON Lines transcript per agent, written by the agent's own process.

Each line is an object with ``ts`` (seconds since the epoch), ``agent`` and ``kind``
(``start``, ``event``, ``messages``, ``result``), plus the payload. A child writes its own
file, so recording costs the shared parent nothing, and a child that crashes leaves
everything up to its last event.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

import msgspec
from agentcell.protocol import AgentEvent, Message, RunResult

_encoder = msgspec.json.Encoder()


class Transcript:
    def __init__(self, path: Path, agent_id: str, redact: Any = None) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.agent_id = agent_id
        self._redact = redact  # str -> str, applied to every line (secrets)
        self._file: IO[bytes] | None = path.open("ab", buffering=0)

    def write(self, kind: str, **payload: Any) -> None:
        if self._file is None:
            return
        line = _encoder.encode(
            {"ts": round(time.time(), 3), "agent": self.agent_id, "kind": kind, **payload}
        )
        if self._redact is not None:
            line = self._redact(line.decode()).encode()
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
