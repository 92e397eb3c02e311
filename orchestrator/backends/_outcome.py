"""How a child process ended, as one typed value per lease."""

from __future__ import annotations

import dataclasses
import enum
import signal

from agentcell.protocol import Failure, RunResult
from agentcell.worker.process import signal_name


class OutcomeKind(enum.StrEnum):
    """Every way a leased child can end. Exactly one per lease."""

    RESULT = "result"  # it sent its Result frame (the run itself may still have failed)
    FAILURE = "failure"  # it reported an exception it could not recover from
    EXITED = "exited"  # it exited without a result (sys.exit, os._exit)
    SIGNALED = "signaled"  # a signal we did not send killed it (segfault, OOM killer, abort)
    PROTOCOL_ERROR = "protocol_error"  # garbage, oversize or truncated frame: we killed it
    HEARTBEAT = "heartbeat"  # it stopped sending heartbeats: we killed it
    DEADLINE = "deadline"  # its deadline passed: cancel, then SIGTERM, then SIGKILL
    MEMORY = "memory"  # its process tree went over its memory limit: we killed it
    CPU = "cpu"  # its process tree used more CPU time than its limit: we killed it
    KILLED = "killed"  # the caller or pool shutdown killed it


_SIGNAL_HINTS = {
    signal.SIGKILL: "possibly out of memory",
    signal.SIGSEGV: "segmentation fault",
    signal.SIGABRT: "aborted",
    signal.SIGBUS: "bus error",
    signal.SIGFPE: "arithmetic error",
    signal.SIGILL: "illegal instruction",
    signal.SIGXCPU: "CPU time limit exceeded",
    signal.SIGTERM: "terminated",
}


@dataclasses.dataclass(frozen=True, slots=True)
class ChildOutcome:
    kind: OutcomeKind
    pid: int
    exit_code: int | None = None  # the process exit status (>= 0) when it exited
    signal: str | None = None  # the signal name when a signal ended it
    result: RunResult | None = None
    failure: Failure | None = None
    detail: str = ""  # one line for people: what happened and why
    peak_rss_bytes: int = 0

    @property
    def ok(self) -> bool:
        return self.kind is OutcomeKind.RESULT

    def __str__(self) -> str:
        return self.detail


def describe_exit(exit_code: int) -> tuple[int | None, str | None, str]:
    """(exit_code, signal name, description) from a multiprocess exit code."""
    if exit_code < 0:
        signum = -exit_code
        name = signal_name(signum)
        try:
            hint = _SIGNAL_HINTS.get(signal.Signals(signum))
        except ValueError:
            hint = None
        text = f"killed by signal {name}" + (f" ({hint})" if hint else "")
        return None, name, text
    return exit_code, None, f"exited with code {exit_code} without a result"
