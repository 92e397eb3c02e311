"""The ``agentcell`` command on a pseudo-terminal, read through a terminal emulator (pyte):
tests assert what a person would see on the screen, not the bytes that drew it."""

from __future__ import annotations

import fcntl
import os
import pty
import select
import signal
import struct
import termios
import time
from collections.abc import Callable
from pathlib import Path

import pyte
from cli_runner import AGENTCELL


def read_pty(fd: int, left: float) -> bytes | None:
    """What the terminal ``fd`` has within ``left`` seconds: None when nothing came, b""
    when the other side is gone (EOF, or EIO once the program has exited)."""
    ready, _, _ = select.select([fd], [], [], max(left, 0))
    if not ready:
        return None
    try:
        return os.read(fd, 65536)
    except OSError:
        return b""


class Screen:
    def __init__(
        self,
        args: list[str],
        cwd: Path,
        env: dict[str, str],
        *,
        rows: int = 50,
        cols: int = 140,
        answers: bool = True,
    ) -> None:
        """``answers=False``: a terminal that never answers the program's questions (no
        cursor position report), as some CI and editor terminals."""
        env = {**env, "TERM": "xterm"}
        pid, fd = pty.fork()
        if pid == 0:  # the child: become agentcell
            os.chdir(cwd)
            os.execve(AGENTCELL, [AGENTCELL, *args], env)
        self.pid, self.fd = pid, fd
        fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        self.screen = _AnsweringScreen(cols, rows, history=2000)
        self.screen.fd = fd if answers else -1
        self.stream = pyte.ByteStream(self.screen)
        self.exit_code: int | None = None
        self.ended = False

    # -- what is on the screen -----------------------------------------------------------
    def lines(self) -> list[str]:
        """Every line: scrolled off the top, then the screen."""
        columns = range(self.screen.columns)
        above = [
            "".join(line[x].data for x in columns).rstrip() for line in self.screen.history.top
        ]
        return above + [line.rstrip() for line in self.screen.display]

    def text(self) -> str:
        return "\n".join(self.lines())

    def wait(self, check: Callable[[str], bool], what: str, timeout: float = 60) -> str:
        """Read output until ``check(screen text)`` holds (the timeout is a safety net)."""
        deadline = time.monotonic() + timeout
        while True:
            text = self.text()
            if check(text):
                return text
            left = deadline - time.monotonic()
            if left <= 0 or self.ended:
                state = "it exited" if self.ended else "timed out"
                raise AssertionError(f"never saw {what} ({state}); the screen:\n{text}")
            chunk = read_pty(self.fd, left)
            if chunk == b"":
                self.ended = True
            elif chunk is not None:
                self.stream.feed(chunk)

    def expect(self, needle: str, timeout: float = 60) -> str:
        return self.wait(lambda text: needle in text, repr(needle), timeout)

    def expect_count(self, needle: str, count: int, timeout: float = 60) -> str:
        return self.wait(lambda text: text.count(needle) >= count, f"{count}× {needle!r}", timeout)

    # -- typing --------------------------------------------------------------------------
    def send(self, data: str) -> None:
        os.write(self.fd, data.encode())

    def signal(self, signum: int) -> None:
        os.kill(self.pid, signum)

    # -- the end -------------------------------------------------------------------------
    def close(self, timeout: float = 60) -> int:
        """Wait for the program to exit (reading its last output) and return its code."""
        deadline = time.monotonic() + timeout
        while True:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.exit_code = os.waitstatus_to_exitcode(status)
                break
            if time.monotonic() > deadline:
                raise AssertionError(f"the program did not exit; the screen:\n{self.text()}")
            ready, _, _ = select.select([self.fd], [], [], 0.5)
            if ready:
                try:
                    chunk = os.read(self.fd, 65536)
                except OSError:
                    chunk = b""
                if chunk:
                    self.stream.feed(chunk)
        os.close(self.fd)
        return self.exit_code

    def kill(self) -> None:
        if self.exit_code is not None:
            return
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            os.waitpid(self.pid, 0)
        except ChildProcessError:
            pass
        try:
            os.close(self.fd)
        except OSError:
            pass


class _AnsweringScreen(pyte.HistoryScreen):
    """Answers the program's questions to the terminal (the cursor position report that
    prompt_toolkit asks for), as a real terminal does."""

    fd = -1

    def write_process_input(self, data: str) -> None:
        if self.fd >= 0:  # -1: a terminal that answers nothing
            os.write(self.fd, data.encode())
