"""What a bash line runs, when that can be proved: the words of each simple command.

An allow rule such as ``bash(git *)`` may only auto-allow a line whose every command is
plainly that program. ``plain_commands`` parses the line with a real shell parser
(bashlex) and returns the word lists, or None whenever the line does anything a glob on
the words cannot see: leading assignments (``GIT_SSH_COMMAND=… git``, ``PATH=. git``),
command or process substitution, parameter expansion, redirection to a path outside the
workdir, compound commands and functions, a program named by a path (``./git``,
``/tmp/x/git`` are other programs than the ``git`` PATH finds), or a wrapper that runs
another program (``env``, ``xargs``, ``sh -c``; arguments that name one, ``git -c``,
``git clone -u``, ``git config alias.x``, ``find -exec``, …: see ``_exec_args``). None
means "not proved safe": the caller asks (or denies in the background). The wrappers
Claude Code strips (``timeout 30``, ``nice -n 5``, ``nohup``, ``command``, …: see
``_wrappers``) are taken off first, so the words are those of the command they run.
"""

from __future__ import annotations

import posixpath
import re
from typing import Any

from agentcell.worker.rules._exec_args import runs_another
from agentcell.worker.rules._wrappers import stripped

#: Programs whose job is to run another program given in their arguments.
WRAPPERS = frozenset(
    {
        ".",
        "builtin",
        "busybox",
        "chroot",
        "command",
        "doas",
        "env",
        "eval",
        "exec",
        "flock",
        "ionice",
        "nice",
        "noglob",
        "nohup",
        "nsenter",
        "parallel",
        "script",
        "setsid",
        "source",
        "stdbuf",
        "strace",
        "su",
        "sudo",
        "taskset",
        "time",
        "timeout",
        "trap",
        "unbuffer",
        "unshare",
        "watch",
        "xargs",
    }
)
_NOT_STRIPPED_IN_BASH = frozenset({"noglob"})
SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "fish", "csh", "tcsh", "ash"})
# Characters whose meaning a parser differential could hide: never in an allowed line.
_OPAQUE = re.compile(r"`|\$\(|\$\{|<\(|>\(|[\x00-\x08\x0b-\x1f\x7f]")
_GROUPING = frozenset({"(", ")", "{", "}"})
_OUTPUT_DEVICES = frozenset({"/dev/null", "/dev/stdout", "/dev/stderr"})
#: Longer lines are not parsed (the parser's time grows with them): they ask.
MAX_LINE = 8192


class _NotPlain(Exception):
    pass


def plain_commands(line: str) -> list[list[str]] | None:
    """The words of every simple command of ``line``, or None if it is not provably plain."""
    if not line.strip() or len(line) > MAX_LINE or _OPAQUE.search(line):
        return None
    # Imported at first use, not by every command-line start (the fork server preloads
    # it for the children); through _bashlex_fast, which reads its parse tables.
    from agentcell.worker.rules._bashlex_fast import bashlex

    try:
        trees = bashlex.parse(line)
    except Exception:  # bashlex raises several kinds: anything it cannot read is not plain
        return None
    commands: list[list[str]] = []
    try:
        for tree in trees:
            _walk(tree, commands)
    except _NotPlain:
        return None
    return commands or None


def _walk(node: Any, out: list[list[str]]) -> None:
    step = _STEPS.get(node.kind)
    if step is None:  # if/for/while/case/functions, reserved words out of place: not proved
        raise _NotPlain(node.kind)
    step(node, out)


def _each_part(node: Any, out: list[list[str]]) -> None:  # a list or a pipeline
    for part in node.parts:
        _walk(part, out)


def _grouped(node: Any, out: list[list[str]]) -> None:
    """( … ) and { …; }: what runs is between the reserved words that group it."""
    for part in node.list:
        if getattr(part, "word", None) not in _GROUPING:
            _walk(part, out)


def _command(node: Any, out: list[list[str]]) -> None:
    out.append(_simple(node))


def _between(node: Any, out: list[list[str]]) -> None:
    """; && || & | |&: what runs is in the commands around them."""


_STEPS = {
    "list": _each_part,
    "pipeline": _each_part,
    "compound": _grouped,
    "command": _command,
    "operator": _between,
    "pipe": _between,
}


def _simple(node: Any) -> list[str]:
    words: list[str] = []
    for part in node.parts:
        take = _PARTS.get(part.kind)
        if take is None:  # an assignment (GIT_SSH_COMMAND=… git): not proved
            raise _NotPlain(part.kind)
        take(part, words)
    if not words:
        raise _NotPlain("no program")
    # ``timeout 30 npm test`` is judged as ``npm test``, as Claude Code does; zsh's
    # ``noglob`` is kept: under bash it is whatever program PATH finds by that name.
    words = stripped(words, keep=_NOT_STRIPPED_IN_BASH)
    program = words[0]
    if "/" in program or program in WRAPPERS or program in SHELLS:
        raise _NotPlain(program)
    runs = runs_another(words)
    if runs is not None:
        raise _NotPlain(runs)
    return words


def _word(node: Any, words: list[str]) -> None:
    words.append(_text(node))


def _redirect(node: Any, words: list[str]) -> None:
    _check_redirect(node)


_PARTS = {"word": _word, "redirect": _redirect}
#: The one part a word may hold and still mean what it shows (where a ``~`` leads, a
#: redirection's check sees it).
_AS_WRITTEN = frozenset({"tilde"})


def _text(word: Any) -> str:
    """What a word says, if it has no parameter expansion or substitution in it."""
    if any(part.kind not in _AS_WRITTEN for part in getattr(word, "parts", []) or []):
        raise _NotPlain("expansion")
    return str(word.word)


def _check_redirect(node: Any) -> None:
    if node.type in ("<<", "<<<", "<<-"):
        raise _NotPlain("here-document")
    target = node.output
    if isinstance(target, int):  # 2>&1: onto another descriptor
        return
    path = _text(target)  # else a word: bashlex gives no other kind of target
    if path in _OUTPUT_DEVICES:
        return
    if path.startswith(("/", "~")) or ".." in posixpath.normpath(path).split("/"):
        raise _NotPlain("redirect outside the workdir")
