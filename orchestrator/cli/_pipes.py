"""A closed stdout (``agentcell run … | head -1``) ends output quietly, not the program.

When the reader of a pipe goes away, the next write raises ``BrokenPipeError``. The run
itself is not at fault: it goes on, is recorded, and the command exits as it would have.
So stdout is pointed at ``/dev/null`` from then on (Python would otherwise raise again
when it flushes stdout at exit) and writers stop trying.
"""

from __future__ import annotations

import contextlib
import os
import sys


def stdout_gone() -> None:
    """Point file descriptor 1 at ``/dev/null``: later writes and the final flush succeed."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


def is_closed_pipe(exc: BaseException) -> bool:
    return isinstance(exc, BrokenPipeError) or (
        isinstance(exc, OSError) and exc.errno == 32  # EPIPE raised as a plain OSError
    )
