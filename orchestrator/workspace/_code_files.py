"""Which entries of a sub-agent's workdir hold code that runs outside the walls.

Three kinds of code from the workdir run with your rights and no sandbox: a hook's
command (the parent runs it), a stdio MCP server's program (a child starts it before
its walls go up), and the module of a custom tool you passed in (a child imports it
while it unpickles the tool, before its walls). A sub-agent that may write the workdir
could rewrite any of them, and the next hook, server or child would run what it wrote.
Files under ``.claude/`` are protected paths already; for the others, the entry of the
workdir that holds the file (``scripts``, ``tools``, or the file itself at the top) goes
read-only to every sub-agent (``AgentSpec.code_entries``, bound by the child in
``worker/sandbox/_mountns.py``), and one that is absent is held by a placeholder, so that it
cannot be made either. The whole entry, since a sub-agent that may rename a folder above
the file could put another file at its path.

What a command *runs* counts, not every word in it: its program when written as a path
(``./scripts/guard.sh``, ``"$CLAUDE_PROJECT_DIR"/tools/lint.sh``), and an interpreter's
script or module (``python3 hooks/check.py``, ``bash -c '…'``, ``python -m tools.guard``);
``make`` adds the makefile and ``npx`` ``node_modules``. The arguments of a linter
(``ruff check src tests``) do not, or no sub-agent could edit the code. Every entry a
chain of links passes through counts. Not seen: code a program finds by itself (a
formatter's plugins, a test runner's ``conftest.py``) and names built at run time
(``$(git rev-parse --show-toplevel)``, globs): keep such hooks' code under
``.claude/hooks/``.
"""

from __future__ import annotations

import logging
import os
import re
import shlex
import shutil
import sys
from collections.abc import Iterable, Iterator, Mapping

from agentcell.orchestrator.config._hooks import name_once

log = logging.getLogger("agentcell.hooks")

#: Programs that run the script (or ``-m`` module) named after their options.
_INTERPRETERS = re.compile(
    r"(python[\d.]*|pypy[\d.]*|bash|sh|dash|zsh|ksh|fish|node|nodejs|deno|bun|ruby|perl|php|"
    r"tsx|ts-node|lua|Rscript|pwsh|osascript)"
)
#: Words that run the next word as the program.
_WRAPPERS = frozenset({"env", "exec", "command", "nohup", "time", "nice", "timeout", "uv", "run"})
#: What a program reads from the folder it runs in, by its name.
_READS = {
    "make": ("Makefile", "makefile", "GNUmakefile"),
    "npx": ("node_modules",),
    "bunx": ("node_modules",),
    "npm": ("node_modules", "package.json"),
    "pnpm": ("node_modules", "package.json"),
    "yarn": ("node_modules", "package.json"),
}
_OPERATORS = frozenset({";", "&&", "||", "|", "&", "(", ")", ";;", "|&", "\n"})


def code_entries(
    commands: Iterable[list[str] | str], modules: Iterable[str], *, cwd: str, project_dir: str
) -> list[str]:
    """The entries of ``cwd`` (a sub-agent's workdir, where its hooks run and its MCP
    servers start) holding a file that ``commands`` run — each a shell line (a hook) or
    a program and its arguments (an MCP server) — or one of the ``modules`` files;
    sorted. ``project_dir`` is what ``$CLAUDE_PROJECT_DIR`` stands for."""
    root = os.path.realpath(cwd)
    paths: list[str] = list(modules)
    for command in commands:
        words = command if isinstance(command, list) else _shell_words(command)
        words = [_put_in(w, cwd, project_dir) for w in words]
        paths += _run_paths(words, cwd, 0)
        paths += _file_words(words, cwd)
    found: set[str] = set()
    for path in paths:
        full = os.path.normpath(os.path.join(cwd, path))
        found |= _entries_on_the_way(full, root)
        _say_other_links(full, root)
    return sorted(found)


def _say_other_links(path: str, root: str) -> None:
    """A file of the workdir with other hard links may be changed through one of them
    (the read-only entry holds only this name): said, once per process."""
    try:
        links = os.stat(path).st_nlink
        is_file = os.path.isfile(path)
    except OSError:
        return
    if is_file and links > 1 and _entry_of(os.path.realpath(path), root):
        line = f"{path}: it runs outside the walls and has {links - 1} other hard link(s): a "
        line += "sub-agent may change it through one of them; make it a file of its own"
        name_once(line)


def module_files(objects: Iterable[object], preloaded: Iterable[str] = ()) -> list[str]:
    """The files of the modules the ``objects`` (custom tools) come from, where a child
    imports them again: not ``__main__`` (its objects travel by value), nor a module the
    fork server preloaded (a child finds it loaded, and reads nothing of it)."""
    loaded = set(preloaded)
    files = []
    for obj in objects:
        function = getattr(obj, "fn", obj)
        name = getattr(function, "__module__", None) or ""
        path = getattr(sys.modules.get(name), "__file__", None)
        if not path or name == "__main__":
            continue
        if name in loaded:  # by its name only: preloading a package loads no submodule
            continue
        files.append(path)
    return files


def _shell_words(command: str) -> list[str]:
    lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    try:
        return list(lexer)
    except ValueError:  # an unclosed quote: the shell refuses it too
        return []


def _put_in(word: str, cwd: str, project_dir: str) -> str:
    """``$CLAUDE_PROJECT_DIR`` and ``$PWD`` (with or without braces, or a default)
    replaced in one word, after the line was split (a path may hold a quote)."""
    word = _PROJECT_DIR.sub(lambda _: project_dir, word)
    return _PWD.sub(lambda _: cwd, word)


_PROJECT_DIR = re.compile(r"\$\{CLAUDE_PROJECT_DIR(:?[-=][^}]*)?\}|\$CLAUDE_PROJECT_DIR\b")
_PWD = re.compile(r"\$\{PWD(:?[-=][^}]*)?\}|\$PWD\b")


def _file_words(words: list[str], cwd: str) -> list[str]:
    """Every word (or ``--flag=value``'s value) naming a file that exists: whatever the
    program, a file named in its command may be what it runs (``poetry run python
    x.py``, ``npx tsx x.ts``, ``< in.json python3 x.py``). Folders named are left alone:
    a linter's ``src tests`` would leave no sub-agent able to edit the code."""
    parts = [part for word in words for part in word.split("=") if part]
    return [part for part in parts if os.path.isfile(os.path.join(cwd, part))]


def _run_paths(words: list[str], cwd: str, depth: int) -> list[str]:
    """The paths the simple commands of ``words`` run, from ``cwd`` and then from where
    a ``cd`` among them goes (``cd scripts && ./guard.sh``)."""
    paths: list[str] = []
    here = cwd
    for command in _simple_commands(words):
        if command[0] == "cd":
            here = os.path.join(here, command[1]) if len(command) > 1 else cwd
            continue
        paths += [os.path.join(here, p) for p in _command_paths(command, here, depth)]
    return paths


def _simple_commands(words: list[str]) -> Iterator[list[str]]:
    current: list[str] = []
    for word in words:
        if word in _OPERATORS:
            if current:
                yield current
            current = []
        elif word not in ("if", "then", "else", "elif", "fi", "do", "done", "while", "!"):
            current.append(word)
    if current:
        yield current


def _command_paths(words: list[str], cwd: str, depth: int) -> list[str]:
    """A program written as a path (absent too: held, so that it cannot be made), what
    it reads by its name (where it exists), an interpreter's script."""
    words = _without_prefix(words)
    if not words:
        return []
    program, rest = words[0], words[1:]
    paths = [program] if "/" in program else _on_the_path(program)
    name = os.path.basename(program)
    paths += [p for p in _READS.get(name, ()) if os.path.lexists(os.path.join(cwd, p))]
    if _INTERPRETERS.fullmatch(name):
        paths += _script_paths(rest, cwd, depth)
    return paths


def _on_the_path(program: str) -> list[str]:
    """Where ``PATH`` finds ``program`` (a project's ``.venv/bin`` may be on it)."""
    found = shutil.which(program)
    return [found] if found else []


def _without_prefix(words: list[str]) -> list[str]:
    """The command from its program on: assignments (``A=1``), wrappers (``env``,
    ``timeout 10``, ``nice -n 5``) and their options and numbers left out."""
    wrapped = False
    while words:
        word = words[0]
        if word in _WRAPPERS or word == "[":
            wrapped = True
        elif not (
            ("=" in word and not word.startswith(("/", ".", "-")))
            or (wrapped and (word.startswith("-") or _DURATION.fullmatch(word)))
        ):
            return words
        words = words[1:]
    return words


_DURATION = re.compile(r"[\d.]+[smhd]?")


def _script_paths(rest: list[str], cwd: str, depth: int) -> list[str]:
    """What an interpreter runs: ``-m``'s module (its first part, as a folder or a file,
    where it exists), ``-c``'s line (a shell's, read as one), else the first word with a
    script's name (held even if absent, so that it cannot be made) or, failing that, the
    first that is a file. Other words are options' values (``-I lib``, ``-X dev``) or
    subcommands (``bun test``)."""
    existing = ""
    for i, word in enumerate(rest):
        if word == "-m" and i + 1 < len(rest):
            top = rest[i + 1].split(".")[0]
            return [p for p in (top, f"{top}.py") if os.path.lexists(os.path.join(cwd, p))]
        if _INLINE.fullmatch(word) and i + 1 < len(rest):  # -c, or -ec, -lc, -Bc
            if depth < 2:  # sh -c 'cd x && ./y.sh': a command line of its own
                return _run_paths(_shell_words(rest[i + 1]), cwd, depth + 1)
            return []
        if word.startswith("-"):
            continue
        if _SCRIPT.search(word):
            return [word]
        if not existing and os.path.isfile(os.path.join(cwd, word)):
            existing = word
    return [existing] if existing else []


_INLINE = re.compile(r"-[A-Za-z]*c")
_SCRIPT = re.compile(r"\.(py|sh|bash|zsh|js|mjs|cjs|ts|mts|rb|pl|php|lua|R|ps1)$")


def _entries_on_the_way(path: str, root: str) -> set[str]:
    """The entries of ``root`` that ``path`` passes through, following each link (a
    chain of them too: every hop's entry, since any may be re-pointed)."""
    found: set[str] = set()
    todo, hops = [os.path.normpath(path)], _HOPS
    while todo and hops:
        hops -= 1
        current = todo.pop()
        entry = _entry_of(current, root)
        if entry:
            found.add(entry)
        parts = current.split(os.sep)
        for end in range(2, len(parts) + 1):
            prefix = os.sep.join(parts[:end])
            if os.path.islink(prefix):
                target = os.path.join(os.path.dirname(prefix), os.readlink(prefix))
                todo.append(os.path.normpath(os.path.join(target, *parts[end:])))
                break
    if todo:
        log.warning("%s: more than %d links on the way; later ones not followed", path, _HOPS)
    return found


#: The most paths one name is followed through (the kernel's own limit for links is 40).
_HOPS = 40


def _entry_of(path: str, root: str) -> str:
    """The first component of ``path`` below ``root`` ("" if it is not below it)."""
    relative = os.path.relpath(path, root)
    if relative in (".", "..") or relative.startswith(f"..{os.sep}"):
        return ""  # the folder itself, or outside it ("..hooks" is an entry of it)
    return relative.split(os.sep, 1)[0]


def mcp_commands(servers: Mapping[str, object] | Iterable[object]) -> list[list[str]]:
    """The program and arguments of each stdio server among ``servers``."""
    values = servers.values() if isinstance(servers, Mapping) else servers
    found = []
    for server in values:
        command = getattr(server, "command", "")
        if getattr(server, "type", "stdio") == "stdio" and command:
            found.append([command, *getattr(server, "args", [])])
    return found
