"""The instruction files' prompt section, kept across a run's delegations.

Looking the AGENTS.md / CLAUDE.md files up (``_context``: five candidates, each resolved
and checked, then the found ones read beneath their root) costs some 29 ``stat`` calls
per sub-agent on the event loop, and gives the same text every time until a file or a
folder it is searched in changes. So the section is kept, and before each use checked
against a mark taken of every searched folder and every file found: one ``lstat`` each
(and a ``stat`` through a link, whose target could change without the link changing),
compared on (device, inode, mode, size, mtime, ctime). Any difference is a full lookup
again, through the same ``read_beneath`` as before, so a file swapped for a link out of
its root after it was kept is refused exactly as it would have been.

Why check rather than invalidate when a child that could write settles: the user (or an
editor, or a git checkout) changes these files too, outside any child; a check sees
every change, at 4 to 9 ``lstat`` calls. A change is missed only within one timestamp
tick of the kernel's clock (a few ms) that keeps the size the same. The marks are taken
before the files are read, so a change while they are read is seen at the next use.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from agentcell.orchestrator.prompt._context import (
    instruction_candidates,
    instruction_sources,
    render_instructions,
)

Mark = tuple[object, ...]


class InstructionCache:
    """``prompt(workdir, home)``: what ``instructions_prompt`` would answer, looked up
    again only when a searched folder or a found file changed."""

    def __init__(self) -> None:
        self._kept: dict[tuple[Path, Path], tuple[list[Path], tuple[Mark, ...], str]] = {}
        #: How many full lookups were made (not answered from what was kept): for tests.
        self.lookups = 0

    def prompt(self, workdir: Path, home: Path) -> str:
        key = (workdir, home)
        kept = self._kept.get(key)
        if kept is not None:
            watched, marks, text = kept
            if _marks(watched) == marks:
                return text
        folders = _searched_folders(workdir, home)
        folder_marks = _marks(folders)  # before the lookup: a change during it is seen
        found = instruction_sources(workdir, home)
        files = [path for _root, path in found]
        file_marks = _marks(files)  # before the read, for the same reason
        text = render_instructions(found)
        self.lookups += 1
        self._kept[key] = ([*folders, *files], (*folder_marks, *file_marks), text)
        return text


def _searched_folders(workdir: Path, home: Path) -> list[Path]:
    folders: list[Path] = []
    for _root, path in instruction_candidates(workdir, home):
        if path.parent not in folders:
            folders.append(path.parent)
    return folders


def _marks(paths: list[Path]) -> tuple[Mark, ...]:
    return tuple(_mark(path) for path in paths)


def _mark(path: Path) -> Mark:
    """What changes when ``path`` (a folder or a file) is changed, replaced or made a
    link; ``()`` when there is nothing there."""
    try:
        info = os.lstat(path)
    except OSError:
        return ()
    mark = _fields(info)
    if stat.S_ISLNK(info.st_mode):
        try:
            mark += _fields(os.stat(path))
        except OSError:
            mark += ("dangling",)
    return mark


def _fields(info: os.stat_result) -> Mark:
    return (
        info.st_dev,
        info.st_ino,
        info.st_mode,
        info.st_size,
        info.st_mtime_ns,
        info.st_ctime_ns,
    )
