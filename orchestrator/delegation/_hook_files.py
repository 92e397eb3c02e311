"""Which entries of a sub-agent's workdir hold a file that a parent-side hook runs.

A hook command runs in the parent, with your rights and outside every sandbox. When it
names a file inside the workdir (``./scripts/guard.sh``, ``python3 hooks/check.py``,
``"$CLAUDE_PROJECT_DIR"/tools/lint.sh``), a sub-agent that may write the workdir could
rewrite that file, and the parent would run what it wrote at the next hook. Files under
``.claude/`` are protected paths already; for any other, the entry of the workdir that
holds it (``scripts``, ``hooks``, ``tools``, or the file itself at the top) goes
read-only to the sub-agent as well (``AgentSpec.hook_folders``, bound by the child:
``worker/_mountns.py``). The whole entry, since a sub-agent that may rename a folder
above the file could put another file at its path.

Only the words of each command that name an existing file or folder inside the workdir
count (after ``$CLAUDE_PROJECT_DIR`` is put in); a script that a hook's script runs in
turn, by a name its command does not show, is not seen. Keep such helpers beside the
script the command names, or under ``.claude/hooks/``.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Iterable

from agentcell.orchestrator.config import HookCommand


def hook_folders(commands: Iterable[HookCommand], *, cwd: str, project_dir: str) -> list[str]:
    """The entries of ``cwd`` (a sub-agent's workdir, where its hooks run) that hold a
    file some command of ``commands`` names, sorted; ``project_dir`` is what
    ``$CLAUDE_PROJECT_DIR`` stands for in them."""
    root = os.path.realpath(cwd)
    found: set[str] = set()
    for command in commands:
        for word in _words(command.command, project_dir):
            path = os.path.join(cwd, word)  # as the shell finds it: from the hook's cwd
            if not os.path.lexists(path):
                continue
            for spelled in (os.path.normpath(path), os.path.realpath(path)):
                entry = _entry_of(spelled, root)
                if entry:
                    found.add(entry)
    return sorted(found)


def _words(command: str, project_dir: str, depth: int = 0) -> list[str]:
    """The words of a shell command line, operators apart, ``--flag=value`` split; a
    quoted word with spaces (``sh -c 'cd x && ./y.sh'``) is read as a command line too."""
    text = command.replace("${CLAUDE_PROJECT_DIR}", project_dir)
    text = text.replace("$CLAUDE_PROJECT_DIR", project_dir)
    lexer = shlex.shlex(text, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    try:
        tokens = list(lexer)
    except ValueError:  # an unclosed quote: the shell refuses it too
        return []
    words = [part for token in tokens for part in token.split("=") if part]
    if depth < 2:
        for token in tokens:
            if any(space in token for space in " \t\n"):
                words += _words(token, project_dir, depth + 1)
    return words


def _entry_of(path: str, root: str) -> str:
    """The first component of ``path`` below ``root`` ("" if it is not below it)."""
    relative = os.path.relpath(path, root)
    if relative == "." or relative.startswith(".."):
        return ""
    return relative.split(os.sep, 1)[0]
