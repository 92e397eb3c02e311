"""What a bash line might run, read generously, for deny and ask rules (never to allow).

The allow side proves a line plain (``_shell.plain_commands``) or asks. A deny rule must
catch what the shell would run however it is spelt: quoted (``'rm'``, ``r''m``,
``\\rm``), inside a compound command (``if :; then rm x; fi``, ``{ rm x; }``, ``! rm x``,
a loop, a function), after a redirection (``>/dev/null rm x``) or a quoted assignment
(``A='a b' rm x``), inside a substitution (``echo $(rm x)``). An attack review found every
one of these passing ``Bash(rm *)`` while the allow side, which parses, read them as
``rm``.

``simple_commands`` parses the line with bashlex and returns the words of every simple
command anywhere in it, unquoted, and the files it reads and writes by redirection
(``< .env``, ``> config/x``).
Where bashlex cannot read the line (a ``case``, a line too long to parse), each piece
between operators is split as a POSIX shell splits words (quotes and backslashes taken
off), with reserved words, assignments and redirections dropped: an over-approximation,
which is what a deny rule wants.
"""

from __future__ import annotations

import dataclasses
import functools
import re
import shlex
from typing import Any

#: Longer lines are split, not parsed (bashlex's time grows with them).
MAX_PARSED = 8192
#: Words that open or close a compound command, never a program.
_RESERVED = frozenset(
    {"if", "then", "elif", "else", "fi", "do", "done", "while", "until", "for", "in", "case",
     "esac", "select", "function", "{", "}", "!", "[[", "]]", "time", "coproc"}
)  # fmt: skip
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\[[^]]*\])?\+?=")
_OPERATOR = re.compile(r"[;&|()\n]+")
_REDIRECT = re.compile(r"&?[<>][<>&|]*")  # > >> < << <> >& <& &> &>> >|
_INPUT = frozenset({"<", "<>", "<&"})


@dataclasses.dataclass(frozen=True, slots=True)
class LineWords:
    """What a line runs (``commands``), reads by redirection (``inputs``) and writes by
    redirection (``outputs``); ``parsed``: bashlex read it (else the words come from the
    fallback split). Frozen: ``simple_commands`` hands the same one to every rule."""

    commands: tuple[tuple[str, ...], ...]
    inputs: tuple[str, ...]
    parsed: bool
    outputs: tuple[str, ...] = ()


@dataclasses.dataclass(slots=True)
class _Found:
    commands: list[tuple[str, ...]] = dataclasses.field(default_factory=list)
    inputs: list[str] = dataclasses.field(default_factory=list)
    outputs: list[str] = dataclasses.field(default_factory=list)

    def words(self, parsed: bool) -> LineWords:
        return LineWords(tuple(self.commands), tuple(self.inputs), parsed, tuple(self.outputs))


@functools.lru_cache(maxsize=64)  # one line, read by every deny, ask, read and edit rule
def simple_commands(line: str) -> LineWords:
    """Every simple command of ``line`` as its words, and the files it redirects in."""
    line = line.replace("\\\n", "")  # the shell removes a backslash-newline first
    if len(line) <= MAX_PARSED:
        from agentcell.worker.rules._bashlex_fast import bashlex  # see _shell.plain_commands

        try:
            trees = bashlex.parse(line)
        except Exception:  # bashlex raises several kinds: fall back to the split
            trees = None
        if trees is not None:
            found = _Found()
            try:
                for tree in trees:
                    _walk(tree, found)
            except RecursionError:  # nested past Python's limit: the split reads it flat
                return _split(line)
            return found.words(parsed=True)
    return _split(line)


def _walk(node: Any, found: _Found) -> None:
    if node.kind == "command":
        words = tuple(part.word for part in node.parts if part.kind == "word")
        if words:
            found.commands.append(words)
    if node.kind == "redirect" and hasattr(node.output, "word"):
        if node.type in _INPUT:
            found.inputs.append(node.output.word)
        if ">" in node.type:
            found.outputs.append(node.output.word)
    for name in ("parts", "list", "command", "output"):
        child = getattr(node, name, None)
        for each in child if isinstance(child, list) else [child]:
            if hasattr(each, "kind"):
                _walk(each, found)


def _split(line: str) -> LineWords:
    """The fallback: POSIX words, cut at the operators, each command's reserved words,
    assignments and redirections dropped."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|()<>")
    lexer.whitespace_split = True
    try:
        tokens = list(lexer)
    except ValueError:  # an unclosed quote: the shell refuses it; judge the raw words
        tokens = line.split()
    found = _Found()
    words: list[str] = []
    for token in [*tokens, ";"]:
        if _OPERATOR.fullmatch(token):
            _take(words, found)
            words = []
        else:
            words.append(token)
    return found.words(parsed=False)


def _take(words: list[str], found: _Found) -> None:
    kept: list[str] = []
    target_of = ""  # the redirection whose target the next word is
    for word in words:
        if target_of:
            if target_of in _INPUT:
                found.inputs.append(word)
            if ">" in target_of:
                found.outputs.append(word)
            target_of = ""
            continue
        if _REDIRECT.fullmatch(word):
            target_of = word
            if kept and kept[-1].isdigit():  # 2>/dev/null: the descriptor is no word
                kept.pop()
            continue
        if not kept and (word in _RESERVED or _ASSIGNMENT.match(word)):
            continue
        kept.append(word)
    if kept:
        found.commands.append(tuple(kept))
