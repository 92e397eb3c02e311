"""The built-in shell tool: run one bash command, bounded in time and in memory.

The command runs in its own process group (so it and everything it starts can be
killed together) but in the caller's session: the agent process is a session leader
that kills its whole session when it exits, and ``setsid`` would let a command escape
that. Output is read as it arrives, and only a bounded head and tail are kept.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
from typing import Annotated, Any

import msgspec
import psutil
from agentcell.worker.tools._base import Tool, ToolContext, ToolError, ToolOutput, truncate_output
from msgspec import Meta

#: Bytes of output kept from the start and from the end; the middle of a flood is dropped.
HEAD_BYTES = 64 * 1024
TAIL_BYTES = 64 * 1024
DEFAULT_TIMEOUT_S = 120
MAX_TIMEOUT_S = 600
#: How long to keep reading after bash exits, for output still in flight, before
#: deciding that a background process is holding the pipe open.
DRAIN_S = 0.5
_READ_CHUNK = 64 * 1024
_READS_PER_WAKEUP = 16  # bounded, so a flood of output cannot starve the event loop


class BashArgs(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    command: Annotated[str, Meta(description="The command line, run with `bash -c`.")]
    timeout_s: Annotated[
        float,
        Meta(
            gt=0,
            le=MAX_TIMEOUT_S,
            description=f"Seconds before the command and everything it started are killed "
            f"(default {DEFAULT_TIMEOUT_S}, at most {MAX_TIMEOUT_S}).",
        ),
    ] = DEFAULT_TIMEOUT_S
    description: Annotated[
        str | None, Meta(description="A few words on what the command does, for the log.")
    ] = None


class Bash(Tool):
    name = "bash"
    description = (
        "Run a bash command in the working directory and return its combined stdout and "
        "stderr (very long output keeps only its start and end). Stdin is empty, so "
        "interactive programs get end-of-file. A non-zero exit code is reported as an "
        "error. Background processes must redirect their output (cmd > log 2>&1 &) to "
        "outlive the command; on timeout the command and everything it started are killed."
    )
    Args = BashArgs

    async def execute(self, args: Any, ctx: ToolContext) -> ToolOutput | str:
        if not args.command.strip():
            raise ToolError("command is empty: give the bash command line to run")
        output = _HeadTail(HEAD_BYTES, TAIL_BYTES)
        proc, reader = await _spawn(args.command, ctx, output)
        notes: list[str] = []
        timed_out = False
        finished = False
        try:
            try:
                async with asyncio.timeout(args.timeout_s):
                    await proc.wait()
            except TimeoutError:
                timed_out = True
                _kill_group(proc)
                await proc.wait()
                await reader.wait_eof(DRAIN_S)
            else:
                if not await reader.wait_eof(DRAIN_S):
                    # bash is gone but something it started still holds the pipe open;
                    # waiting for it could take forever.
                    _kill_group(proc)
                    await reader.wait_eof(DRAIN_S)
                    notes.append(
                        "[background processes still holding the command's output open were "
                        "killed; redirect their output (cmd > file 2>&1 &) to keep them running]"
                    )
            finished = True
        finally:
            if not finished:
                # Cancelled (or failed) while waiting: leave nothing running behind us.
                _kill_group(proc)
                await proc.wait()
            reader.close()

        text = output.text().rstrip("\n")
        if not text:
            body = "(no output)"
        elif len(text) > ctx.max_output_chars:
            body = await asyncio.to_thread(truncate_output, text, ctx)  # it writes a file
        else:
            body = text
        code = proc.returncode
        if output.dropped:
            # The cut above (and the saved file) hold only what was kept: say what was not.
            kept = output.head_max + output.tail_max
            notes.append(
                f"[the command printed {output.total:,} bytes; only its first "
                f"{output.head_max // 1024} KiB and last {output.tail_max // 1024} KiB "
                f"({kept // 1024} KiB) were kept, {output.dropped:,} bytes in between were "
                "dropped and are not saved anywhere: redirect to a file (cmd > out.txt) to "
                "keep everything]"
            )
        if timed_out:
            notes.append(
                f"[command timed out after {args.timeout_s:g} s; it and every process it "
                "started were killed]"
            )
        elif code:
            notes.append(_describe_exit(code))
            hint = _network_hint(text)
            if hint:
                notes.append(hint)
        return ToolOutput("\n".join([body, *notes]), is_error=timed_out or bool(code))


async def _spawn(
    command: str, ctx: ToolContext, output: _HeadTail
) -> tuple[asyncio.subprocess.Process, _PipeReader]:
    # Our own pipe rather than asyncio's: we decide when to stop reading and close it,
    # even while a background grandchild still holds the write end.
    read_fd, write_fd = os.pipe()
    try:
        proc = await asyncio.create_subprocess_exec(
            "/bin/bash",
            "-c",
            command,
            stdin=subprocess.DEVNULL,
            stdout=write_fd,
            stderr=write_fd,
            cwd=ctx.workdir,
            env=ctx.env,
            process_group=0,
            preexec_fn=ctx.preexec,
        )
    except BaseException as exc:
        os.close(read_fd)
        if isinstance(exc, OSError):
            raise ToolError(f"cannot start bash in {ctx.workdir}: {exc.strerror}") from None
        raise
    finally:
        os.close(write_fd)  # now only the command holds it: EOF means all writers are gone
    return proc, _PipeReader(read_fd, output)


def _kill_group(proc: asyncio.subprocess.Process) -> None:
    """SIGKILL the command's process group, and any descendant that left the group."""
    strays: list[psutil.Process] = []
    if proc.returncode is None:
        # Only while bash is unreaped: afterwards its pid could belong to someone else.
        with contextlib.suppress(psutil.Error):
            strays = psutil.Process(proc.pid).children(recursive=True)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)  # process_group=0: the group id is bash's pid
    for stray in strays:
        with contextlib.suppress(psutil.Error):
            stray.kill()  # psutil checks the pid was not reused


def _network_hint(text: str) -> str | None:
    """Where a failure looks like the sandbox's network wall, a line that says so."""
    from agentcell.worker.sandbox import _apply as _sandbox
    from agentcell.worker.sandbox import _egress_relay

    box = _sandbox.CURRENT
    if box is None or box.mode == "off":
        return None
    proxied = box.egress_port is not None
    return _egress_relay.network_hint(text, walled=not box.bash_network, proxied=proxied)


def _describe_exit(code: int) -> str:
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"[killed by {name}]"
    return f"[exit code {code}]"


class _HeadTail:
    """Keeps the first ``head_max`` and the last ``tail_max`` bytes; counts the rest."""

    def __init__(self, head_max: int, tail_max: int) -> None:
        self.head_max = head_max
        self.tail_max = tail_max
        self.head = bytearray()
        self.tail = bytearray()
        self.dropped = 0
        self.total = 0  # every byte the command wrote

    def feed(self, data: bytes) -> None:
        self.total += len(data)
        room = self.head_max - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if not data:
            return
        self.tail += data
        excess = len(self.tail) - self.tail_max
        if excess > 0:
            del self.tail[:excess]
            self.dropped += excess

    def text(self) -> str:
        if not self.dropped:
            return (self.head + self.tail).decode("utf-8", "replace")
        return (
            self.head.decode("utf-8", "replace")
            + f"\n[... {self.dropped} bytes of output omitted (not kept) ...]\n"
            + self.tail.decode("utf-8", "replace")
        )


class _PipeReader:
    """Reads a pipe on the event loop as data arrives, feeding a ``_HeadTail``."""

    def __init__(self, fd: int, sink: _HeadTail) -> None:
        self._fd = fd
        self._sink = sink
        self._loop = asyncio.get_running_loop()
        self._eof = asyncio.Event()
        os.set_blocking(fd, False)
        self._loop.add_reader(fd, self._on_readable)

    def _on_readable(self) -> None:
        for _ in range(_READS_PER_WAKEUP):
            try:
                data = os.read(self._fd, _READ_CHUNK)
            except BlockingIOError:
                return
            except OSError:
                data = b""
            if not data:
                self._loop.remove_reader(self._fd)
                self._eof.set()
                return
            self._sink.feed(data)

    async def wait_eof(self, within: float) -> bool:
        """True once every writer has closed the pipe; False if ``within`` seconds pass first."""
        try:
            async with asyncio.timeout(within):
                await self._eof.wait()
        except TimeoutError:
            return False
        return True

    def close(self) -> None:
        if self._fd >= 0:
            self._loop.remove_reader(self._fd)
            os.close(self._fd)
            self._fd = -1
