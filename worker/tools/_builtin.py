"""The tools every agent can be given by name."""

from __future__ import annotations

from agentcell.worker.tools._base import Tool
from agentcell.worker.tools._bash import Bash
from agentcell.worker.tools._files import EditFile, Glob, Grep, ReadFile, WriteFile

_BUILTIN_CLASSES: tuple[type[Tool], ...] = (ReadFile, WriteFile, EditFile, Glob, Grep, Bash)

#: The built-in tool names, in the order ``builtin_tools`` returns them.
BUILTIN_TOOL_NAMES: tuple[str, ...] = tuple(cls.name for cls in _BUILTIN_CLASSES)


def builtin_tools() -> list[Tool]:
    """Fresh instances of every built-in tool: read_file, write_file, edit_file, glob,
    grep, bash."""
    return [cls() for cls in _BUILTIN_CLASSES]
