"""Writes kept to the working directories: Claude Code's
``permissions.blockWritesOutsideWorkingDirectories``, for the main agent.

Sub-agents are walled to their workdir by the sandbox already (Landlock: a write anywhere
else fails whatever wrote it). The main agent runs in the orchestrator's own process, so
``PermissionPolicy(write_roots=…)`` asks this wall first, and refuses, before the call
runs, what would write outside the workdir and the additional directories
(``additionalDirectories``): ``write_file`` and ``edit_file`` by their path, and ``bash``
by its output redirections (``>``, ``>>``, ``>|``, ``&>``, ``<>``, ``2>``, in any
command of the line, substitutions included), each resolved as bash would (relative to
the workdir, ``~`` as the home, every link followed). What it cannot place is refused as
well, with why: a redirection to an expansion (``> "$OUT"``), a relative one in a line
that changes folder (``cd /tmp && echo > f``), a line with ``>`` the parser cannot read.
As with Claude Code's key, what a program writes by itself (``cp``, ``tee FILE``) is not
judged here: only redirections are.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

SETTING = "permissions.blockWritesOutsideWorkingDirectories"
#: Where output may always go: the terminal's own streams and the bit bucket.
_DEVICES = ("/dev/null", "/dev/stdout", "/dev/stderr", "/dev/tty")
_OUTPUT = frozenset({">", ">>", ">|", "&>", "&>>", "<>", ">&"})
_CHANGES_FOLDER = frozenset({"cd", "pushd", "popd"})
_FILE_TOOLS = frozenset({"write_file", "edit_file"})


class WriteWall:
    """Why a call would write outside ``roots`` (the workdir first), if it would."""

    def __init__(self, workdir: Path, more: Sequence[str | Path] = ()) -> None:
        self.workdir = Path(workdir)
        self.roots = [os.path.realpath(p) for p in (workdir, *more)]

    def refusal(self, tool: str, args: Any) -> str | None:
        """The denial's reason for a call of ``tool`` with ``args``; None: it may run."""
        if tool in _FILE_TOOLS:
            path = str(getattr(args, "path", "") or "")
            why = None if self._inside(path) else f"{path} is outside the working directories"
        elif tool == "bash":
            why = self.bash_refusal(str(getattr(args, "command", "") or ""))
        else:
            return None
        if why is None:
            return None
        return f"{why}: {SETTING} is on, so writes stay in {', '.join(self.roots)}"

    def bash_refusal(self, line: str) -> str | None:
        """Why ``line`` would write outside the roots by a redirection, or None."""
        if ">" not in line:
            return None  # no output redirection can be in it
        found = _redirections(line)
        if found is None:
            return "the command line cannot be read to place its '>' redirections"
        targets, changes_folder = found
        for target in targets:
            if target is None:
                return "a redirection goes to an expansion, which cannot be placed"
            if changes_folder and not target.startswith(("/", "~")):
                return f"the relative redirection '> {target}' follows a change of folder"
            if not self._inside(target):
                return f"the redirection '> {target}' is outside the working directories"
        return None

    def _inside(self, path: str) -> bool:
        if path in _DEVICES or path.startswith("/dev/fd/"):
            return True
        if path == "~" or path.startswith("~/"):
            path = str(Path.home()) + path[1:]
        elif path.startswith("~"):
            return False  # another user's home: not ours to place
        resolved = os.path.realpath(os.path.join(self.workdir, path))
        return any(resolved == r or resolved.startswith(r.rstrip("/") + "/") for r in self.roots)


def _redirections(line: str) -> tuple[list[str | None], bool] | None:
    """The targets of ``line``'s output redirections (None for one that is an expansion)
    and whether it changes folder; None when the parser cannot read it."""
    from agentcell.worker.rules._bashlex_fast import bashlex

    try:
        trees = bashlex.parse(line)
    except Exception:  # bashlex raises several kinds: unread
        return None
    targets: list[str | None] = []
    changes_folder = False
    for node in (n for tree in trees for n in _nodes(tree)):
        if node.kind == "command":
            words = [p for p in node.parts if p.kind == "word"]
            changes_folder |= bool(words) and words[0].word in _CHANGES_FOLDER
        elif node.kind == "redirect" and node.type in _OUTPUT:
            target = node.output
            if isinstance(target, int):
                continue  # 2>&1: onto another descriptor
            plain = all(p.kind == "tilde" for p in getattr(target, "parts", None) or [])
            targets.append(str(target.word) if plain else None)
    return targets, changes_folder


def _nodes(node: Any) -> Iterator[Any]:
    """``node`` and every node beneath it (command substitutions' commands too)."""
    yield node
    for name in ("parts", "list"):
        for child in getattr(node, name, None) or []:
            yield from _nodes(child)
    for name in ("command", "output"):
        child = getattr(node, name, None)
        if child is not None and hasattr(child, "kind"):
            yield from _nodes(child)
