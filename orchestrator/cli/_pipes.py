"""stdout that cannot fail a command: a closed reader ends output quietly, a failed write
is one line at the end.

When the reader of a pipe goes away (``agentcell runs show … | head -1``), the next write
raises ``BrokenPipeError``. When the output goes to a full disk (``> /dev/full``) or a
failing device, it raises ``ENOSPC`` or ``EIO``. Neither is the command's fault: a run
goes on and is recorded, a listing finishes. So ``watch_stdout`` rebuilds ``sys.stdout``
over a file descriptor whose writes never raise: on such an error it points descriptor 1
at ``/dev/null`` (later writes and the final flush succeed) and remembers a failure other
than a closed reader. ``end_output`` says that failure in one line and gives the exit
code: a closed reader changes nothing (as ``git log | head``), lost output makes a command
that otherwise succeeded exit 1. Every writer is covered at once — rich, click, print,
prompt_toolkit — and none needs its own handling (rich's own exits 1 on a closed pipe).
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from _typeshed import ReadableBuffer

EXIT_FAILED = 1

_FULL = (errno.ENOSPC, errno.EDQUOT)  # where freeing space is the fix

#: The first write to stdout that failed for a reason other than a closed reader.
_failures: list[OSError] = []


def stdout_gone() -> None:
    """Point file descriptor 1 at ``/dev/null``: later writes and the final flush succeed."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


def is_closed_pipe(exc: BaseException) -> bool:
    return isinstance(exc, BrokenPipeError) or (
        isinstance(exc, OSError) and exc.errno == 32  # EPIPE raised as a plain OSError
    )


def output_failed(exc: OSError) -> None:
    """stdout failed: nothing more goes to it; a failure other than a closed reader is
    said (once) when the command ends."""
    if not is_closed_pipe(exc) and not _failures:
        _failures.append(exc)
    stdout_gone()


class _Stdout(io.FileIO):
    """Descriptor 1, whose writes report their failure instead of raising it."""

    def write(self, data: ReadableBuffer, /) -> int:
        try:
            return super().write(data)
        except BlockingIOError:  # the buffered layer above retries these itself
            raise
        except OSError as exc:
            output_failed(exc)
            return len(memoryview(data))  # "written": to /dev/null, from now on


def watch_stdout() -> None:
    """Rebuild ``sys.stdout`` over ``_Stdout`` (same encoding and buffering); a stream
    that is not a file (a test's capture) is left as it is."""
    old = sys.stdout
    try:
        fd = old.fileno()
        old.flush()
    except (AttributeError, OSError, ValueError):
        return
    raw = _Stdout(fd, "w", closefd=False)
    sys.stdout = io.TextIOWrapper(
        io.BufferedWriter(raw),
        encoding=old.encoding,
        errors=old.errors,
        line_buffering=bool(old.line_buffering),
        write_through=getattr(old, "write_through", False),
    )


def end_output(code: int) -> int:
    """Flush stdout (a buffered write fails only now) and say in one line, on stderr, if
    output was lost; the exit code: ``code``, or 1 when it was 0 and output was lost."""
    try:
        sys.stdout.flush()
    except OSError as exc:  # a stdout that is not watched (see ``watch_stdout``)
        output_failed(exc)
    if not _failures:
        return code
    failure = _failures[0]
    fix = (
        "free space there, or send it elsewhere" if failure.errno in _FULL else "send it elsewhere"
    )
    with contextlib.suppress(OSError):
        sys.stderr.write(
            f"agentcell: error: cannot write the output: {failure.strerror or failure} "
            f"(stdout: {fix})\n"
        )
        sys.stderr.flush()
    return code or EXIT_FAILED
