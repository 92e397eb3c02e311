"""Reading what a person types: lines and answers to approval questions.

``PlainInput`` reads stdin on the event loop (no thread, so a cancelled read never holds
the program open): ``run``'s approval questions, and ``chat`` when stdin is not a
terminal. ``PromptInput`` is chat's line editor (prompt_toolkit): history, Ctrl-R,
completion of ``/commands`` and ``@agent`` names, a status bar of the running sub-agents,
and approval questions asked in the prompt itself, all while a turn runs.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TextIO

from agentcell.orchestrator._text import visible
from prompt_toolkit import PromptSession
from prompt_toolkit.completion import CompleteEvent, Completer, Completion
from prompt_toolkit.document import Document
from prompt_toolkit.filters import Condition, is_done, renderer_height_is_known
from prompt_toolkit.history import FileHistory, History, InMemoryHistory
from prompt_toolkit.layout import ConditionalContainer, Window, walk
from prompt_toolkit.patch_stdout import patch_stdout
from prompt_toolkit.renderer import CPR_Support
from prompt_toolkit.utils import is_dumb_terminal


class PlainInput:
    """Lines from stdin, read on the event loop. In a conversation, ``read`` gives the
    lines and an approval ``ask`` takes the next line while it is open."""

    def __init__(self, out: TextIO | None = None) -> None:
        self.out = out or sys.stderr
        self._reading = False
        self._questions: collections.deque[asyncio.Future[str]] = collections.deque()
        self._buffer = b""
        self._lines_done = False
        self._lines: asyncio.Queue[bytes | None] = asyncio.Queue()
        self._fd = sys.stdin.fileno()
        # A terminal echoes what is typed itself; piped input is echoed by ``_next``.
        self._echo = not os.isatty(self._fd)
        self._blocking = os.get_blocking(self._fd)
        os.set_blocking(self._fd, False)
        loop = asyncio.get_running_loop()
        try:
            loop.add_reader(self._fd, self._readable)
            self._watched = True
        except PermissionError:  # a regular file or /dev/null: reading never waits
            self._watched = False
            loop.call_soon(self._read_all)

    def _read_all(self) -> None:
        while not self._lines_done:
            self._readable()

    def _readable(self) -> None:
        try:
            data = os.read(self._fd, 4096)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._lines_done = True
            asyncio.get_running_loop().remove_reader(self._fd)
            if self._buffer:
                self._lines.put_nowait(self._buffer)
            self._lines.put_nowait(None)
            return
        self._buffer += data
        *complete, self._buffer = self._buffer.split(b"\n")
        for line in complete:
            self._lines.put_nowait(line)

    async def read_line(self, prompt: str) -> str:
        self.out.write(prompt)
        self.out.flush()
        return await self._next()

    async def _next(self) -> str:
        line = await self._lines.get()
        if line is None:
            self._lines.put_nowait(None)  # stay at EOF for later readers
            raise EOFError
        text = line.decode(errors="replace").rstrip("\r")
        if self._echo:
            # No terminal echoes piped input: write the line after its prompt, so what
            # follows (progress, the answer) starts on a line of its own.
            self.out.write(visible(text) + "\n")
            self.out.flush()
        return text

    async def read(self, prompt: str = "you> ") -> str:
        """The next line for the conversation; open questions take theirs first."""
        self._reading = True
        try:
            self.out.write(prompt)
            self.out.flush()
            while True:
                try:
                    line = await self._next()
                except EOFError:
                    while self._questions:
                        self._questions.popleft().set_exception(EOFError())
                    raise
                if not self._questions:
                    return line
                answer = self._questions.popleft()
                if not answer.done():
                    answer.set_result(line)
        finally:
            self._reading = False

    async def ask(self, question: str) -> str:
        """An approval question: asked now, answered by the next line."""
        if not self._reading:
            return await self.read_line(question)
        self.out.write(question)
        self.out.flush()
        answer: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self._questions.append(answer)
        return await answer

    def stop(self) -> None:
        """End input now: the next read sees EOF."""
        self._lines.put_nowait(None)

    def close(self) -> None:
        asyncio.get_running_loop().remove_reader(self._fd)
        os.set_blocking(self._fd, self._blocking)


class ChatCompleter(Completer):
    """``/commands`` at the start of the line, ``@agent`` names at the start of a word."""

    def __init__(self, commands: Iterable[str], agent_names: Callable[[], Iterable[str]]) -> None:
        self.commands = sorted(commands)
        self.agent_names = agent_names

    def get_completions(
        self, document: Document, complete_event: CompleteEvent
    ) -> Iterator[Completion]:
        before = document.text_before_cursor
        word = before.split(" ")[-1] if before else ""
        if before.startswith("/") and " " not in before:
            for command in self.commands:
                if command.startswith(before):
                    yield Completion(command, start_position=-len(before))
        elif word.startswith("@"):
            prefix = word[1:].lower()
            for name in sorted(self.agent_names()):
                if name.lower().startswith(prefix):
                    yield Completion("@" + name, start_position=-len(word))


class PromptInput:
    """chat's prompt on a terminal. ``lines()`` yields what the person enters; an open
    approval question takes the next line instead, and hides the status bar meanwhile."""

    def __init__(
        self,
        *,
        completer: Completer,
        status: Callable[[], list[str]],
        history_file: Path | None,
    ) -> None:
        history = _AnswersLeftOut()
        if history_file is not None:
            with contextlib.suppress(OSError):
                history_file.parent.mkdir(parents=True, exist_ok=True)
                history = _AnswersLeftOut(FileHistory(str(history_file)))
        history.keep = lambda: not self._questions
        self._status = status
        self._questions: collections.deque[tuple[str, asyncio.Future[str]]] = collections.deque()
        self.session: PromptSession[str] = PromptSession(
            history=history,
            completer=completer,
            complete_while_typing=False,
            bottom_toolbar=self._toolbar,
            refresh_interval=0.5,
        )
        _status_bar_without_cursor_reports(self.session)
        self._patch = patch_stdout(raw=True)

    def __enter__(self) -> PromptInput:
        self._patch.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._patch.__exit__(None, None, None)
        for _, answer in self._questions:
            if not answer.done():
                answer.set_exception(EOFError())

    @property
    def asking(self) -> bool:
        return bool(self._questions)

    def _message(self) -> str:
        return self._questions[0][0] if self._questions else "you> "

    def _toolbar(self) -> str | None:
        if self._questions:
            return None  # nothing redraws under an open question
        lines = self._status()
        return "\n".join(lines) if lines else None

    async def read(self) -> str:
        """The next line for the conversation (questions are answered on the way).
        Ctrl-C raises KeyboardInterrupt, Ctrl-D EOFError."""
        while True:
            try:
                line = await self.session.prompt_async(self._message)
            except (KeyboardInterrupt, EOFError):
                if self._questions:  # Ctrl-C or Ctrl-D at a question: the answer is no
                    _, answer = self._questions.popleft()
                    if not answer.done():
                        answer.set_exception(EOFError())
                # Ctrl-C goes on to the chat, as anywhere: it cancels the turn that asked.
                raise
            if self._questions:
                _, answer = self._questions.popleft()
                if not answer.done():
                    answer.set_result(line)
                continue
            return line

    async def ask(self, question: str) -> str:
        """Ask in the prompt (an approval): the whole question becomes the prompt until
        it is answered, so it is drawn at once and nothing draws over it."""
        if is_dumb_terminal():  # no redrawing there: the question goes out as text
            print(question, flush=True)
            question = "you> "
        answer: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self._questions.append((question.lstrip("\n"), answer))
        self._redraw()
        try:
            return await answer
        finally:
            self._redraw()

    def _redraw(self) -> None:
        app = self.session.app
        if app.is_running:
            app.invalidate()


def _status_bar_without_cursor_reports(session: PromptSession[str]) -> None:
    """Draw the status bar on a terminal that never answers a cursor position request
    (some CI and editor terminals, ``PROMPT_TOOLKIT_NO_CPR=1``) too. prompt_toolkit draws
    its bottom toolbar only once it knows the rows below the cursor, which such a terminal
    never says: the answer in progress (shown there) stayed unseen until the turn ended.
    Under the prompt is as good a place for it as the bottom of the screen. The library's
    warning about such a terminal goes: nothing is missing on it now."""
    app = session.app
    no_reports = Condition(lambda: app.renderer.cpr_support == CPR_Support.NOT_SUPPORTED)
    for container in walk(session.layout.container):
        if (
            isinstance(container, ConditionalContainer)
            and isinstance(container.content, Window)
            and container.content.style == "class:bottom-toolbar"
        ):
            container.filter = (
                Condition(lambda: session.bottom_toolbar is not None)
                & ~is_done
                & (renderer_height_is_known | no_reports)
            )
    app.renderer.cpr_not_supported_callback = app.invalidate


class _AnswersLeftOut(History):
    """A history that leaves out the answers to approval questions (``y`` is not worth
    finding again with Up or Ctrl-R)."""

    def __init__(self, inner: History | None = None) -> None:
        super().__init__()
        self.inner = inner or InMemoryHistory()
        self.keep: Callable[[], bool] = lambda: True

    def load_history_strings(self) -> Iterable[str]:
        return self.inner.load_history_strings()

    def store_string(self, string: str) -> None:
        self.inner.store_string(string)

    def append_string(self, string: str) -> None:
        if self.keep():  # called as the line is accepted, before the question is closed
            super().append_string(string)
