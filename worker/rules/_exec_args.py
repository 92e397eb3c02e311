"""Arguments that make a program run another program of the caller's choosing.

A wildcard allow rule (``bash(git *)``) means "this program, with any arguments", never
"whatever this program can be told to start": ``git clone -u CMD``, ``git config
alias.x '!CMD'``, ``find -exec``, ``tar --to-command``, ``rsync -e``, ``ssh -o
ProxyCommand=`` each name a command. ``runs_another`` returns the first such argument
of a simple command's words (or None), and ``plain_commands`` refuses to auto-allow a
line that has one: the call then asks.

What this does not cover, by design: a program the user's own configuration names (git's
aliases and pager in ``~/.gitconfig``, ssh for an ssh remote, gpg for a signature) and
tools whose job is to run a project's code (``npm run``, ``make``, ``pytest``, ``python``):
a wildcard rule on those allows whatever the project defines.
"""

from __future__ import annotations

import itertools
import re

#: Options before git's subcommand that run a program, read config from elsewhere, or
#: point git at another repository (whose config names programs).
_GIT_GLOBAL = (
    "-c",
    "-C",
    "--config-env",
    "--exec-path",
    "--git-dir",
    "--work-tree",
    "--namespace",
    "--super-prefix",
    "--list-cmds",
)
#: Options of any git subcommand that name a program, a template (hooks) or config.
_GIT_OPTIONS = (
    "--upload-pack",
    "--receive-pack",
    "--exec",
    "--extcmd",
    "--config",
    "--template",
    "--tool",
    "--sendmail-cmd",
    "--to-cmd",
    "--cc-cmd",
    "--textconv",
    "--ext-diff",
    "--open-files-in-pager",
    "--show-signature",
    "--verify-signatures",
    "--gpg-sign",
    "--recurse-submodules",
)
#: Short options (also inside a cluster such as ``-qu``) that take a program, by subcommand.
_GIT_SHORT = {
    "clone": "uc",
    "ls-remote": "u",
    "fetch-pack": "u",
    "archive": "",
    "rebase": "xi",
    "difftool": "xt",
    "mergetool": "t",
    "grep": "O",
    "commit": "cS",
    "merge": "S",
    "tag": "usv",
    "revert": "S",
    "cherry-pick": "S",
    "am": "S",
    "pull": "S",
}
#: Subcommands whose job is to run a program or a script.
_GIT_RUNNERS = frozenset(
    {
        "difftool",
        "mergetool",
        "filter-branch",
        "instaweb",
        "web--browse",
        "send-email",
        "daemon",
        "upload-pack",
        "receive-pack",
        "shell",
        "p4",
        "svn",
        "cvsimport",
        "cvsexportcommit",
        "quiltimport",
        "verify-commit",
        "verify-tag",
        "credential",
        "run-command",
        "hook",
    }
)
#: Subcommand pairs that run a command: ``git submodule foreach``, ``git bisect run``.
_GIT_RUNNER_PAIRS = {"submodule": ("foreach",), "bisect": ("run",)}
#: Config sections (and ``section.key`` names) whose values name a program, a file that
#: may name one, or a place git fetches from; written by ``git config`` they are refused.
_GIT_CONFIG_SECTIONS = frozenset(
    {
        "alias",
        "core",
        "filter",
        "diff",
        "merge",
        "pager",
        "sequence",
        "gpg",
        "credential",
        "include",
        "includeif",
        "interactive",
        "url",
        "protocol",
        "submodule",
        "init",
        "sendemail",
        "difftool",
        "mergetool",
        "web",
        "browser",
        "man",
        "instaweb",
        "trailer",
        "uploadpack",
        "receive",
        "remote",
        "safe",
        "ssh",
        "hook",
        "uploadarchive",
        "fsmonitor",
        "log",
        "help",
    }
)
_GIT_CONFIG_FILE_OPTIONS = ("--file", "-f", "--global", "--system", "--edit", "-e", "--blob")

#: Other programs' options that run a command (``opt`` or ``opt=value``; short options
#: also glued to their value), and single letters that do so inside a short-option cluster.
_OPTIONS: dict[str, tuple[str, ...]] = {
    "find": ("-exec", "-execdir", "-ok", "-okdir", "-fprint", "-fprintf", "-fls"),
    "tar": (
        "--to-command",
        "--use-compress-program",
        "-I",
        "--checkpoint-action",
        "--info-script",
        "--new-volume-script",
        "-F",
        "--rsh-command",
        "--rmt-command",
    ),
    "rsync": ("-e", "--rsh", "--rsync-path", "--config", "--daemon"),
    "rg": ("--pre",),
    "ssh": ("-o", "-F", "-J", "-S"),
    "scp": ("-o", "-F", "-J", "-S"),
    "sftp": ("-o", "-F", "-J", "-S"),
    "awk": ("-f", "--file", "-l", "--load", "-E", "--exec"),
    "gawk": ("-f", "--file", "-l", "--load", "-E", "--exec"),
    "mawk": ("-f",),
    "nawk": ("-f",),
    "zip": ("-T", "--test", "-TT", "--unzip-command"),
}
_CLUSTERS: dict[str, str] = {
    "tar": "IF",
    "rsync": "e",
    "ssh": "oFJS",
    "scp": "oFJS",
    "sftp": "oFJS",
    "awk": "fE",
    "gawk": "flE",
    "mawk": "f",
    "nawk": "f",
    "zip": "T",
}
#: Text inside an awk program that runs a command (or loads code).
_AWK_RUNS = ("system", "|", "getline", "@load")


def runs_another(words: list[str]) -> str | None:
    """The first argument in ``words`` (a simple command, program first) that makes the
    program run another program, or None."""
    program, *args = words
    if program == "git":
        return _git(args)
    if program == "sed":
        return _sed(args)
    for word in args:
        if _names_option(word, _OPTIONS.get(program, ())):
            return word
        if _in_cluster(word, _CLUSTERS.get(program, "")):
            return word
    first = next(iter(args), "-")
    if program == "tar" and not _is_option(first) and set(first) & set("IF"):
        return first  # old style: tar xIf PROGRAM …
    if program in ("rsync", "scp"):  # a remote side: ssh runs
        return next((w for w in args if ":" in w and not w.startswith("-")), None)
    if program in ("awk", "gawk", "mawk", "nawk"):
        return next((w for w in args if any(t in w for t in _AWK_RUNS)), None)
    return None


def _is_option(word: str) -> bool:
    return word.startswith("-")


def _names_option(word: str, options: tuple[str, ...], abbreviated: bool = False) -> bool:
    """``word`` is one of ``options`` (or ``option=value``), or, for a program that takes
    unique prefixes of long options (git), a prefix of one (``--upl=`` for
    ``--upload-pack``; options glued to a value are found as clusters)."""
    name = word.partition("=")[0]
    return any(name == o or (abbreviated and len(name) > 2 and o.startswith(name)) for o in options)


def _in_cluster(word: str, letters: str) -> bool:
    """A short-option word (``-qu``, ``-uCMD``) holding one of ``letters``."""
    return _is_option(word) and not word.startswith("--") and any(ch in letters for ch in word)


def _git(args: list[str]) -> str | None:
    options = list(itertools.takewhile(_is_option, args))  # before the subcommand
    for word in options:
        if _names_option(word, _GIT_GLOBAL) or word.startswith(("-c", "-C")):
            return word
    command, *rest = args[len(options) :] or [""]
    if command in _GIT_RUNNERS:
        return command
    pair = next((w for w in rest if w in _GIT_RUNNER_PAIRS.get(command, ())), None)
    if pair is not None:
        return f"{command} {pair}"
    for word in rest:
        if word == "--":
            break  # paths from here on
        if _names_option(word, _GIT_OPTIONS, abbreviated=True):
            return word
        if _in_cluster(word, _GIT_SHORT.get(command, "")):
            return word
    if command == "config":
        return _git_config(rest)
    return None


def _git_config(args: list[str]) -> str | None:
    """``git config``: a write (or read, it does not matter) of a key that names a program,
    or a config file other than the repository's own."""
    for word in args:
        if _names_option(word, _GIT_CONFIG_FILE_OPTIONS, abbreviated=True):
            return word
        if not _is_option(word) and word.partition(".")[0].lower() in _GIT_CONFIG_SECTIONS:
            return word
    return None


#: sed options that change nothing about what its script may do.
_SED_FLAGS = frozenset(
    {
        *("-n", "-E", "-r", "-i", "-s", "-u", "-z", "--quiet", "--silent", "--in-place"),
        *("--regexp-extended", "--separate", "--unbuffered", "--null-data", "--posix"),
    }
)
_SED_ADDRESS = r"(?:\d+|\$|/[^/\\\n]*/)"
#: One sed command that neither runs a program (``e``, the ``e`` flag) nor writes a file
#: (``w``, ``W``, the ``w`` flag): print, delete, quit, ``s`` with harmless flags, ``y``.
_SED_COMMAND = re.compile(
    rf"\s*(?:{_SED_ADDRESS}(?:,{_SED_ADDRESS})?!?)?\s*"
    r"(?:[pdqQPDnNgGhHxlz=]"
    r"|s(?P<d>[^\\\s\w])(?:(?!(?P=d))[^\\\n])*(?P=d)(?:(?!(?P=d))[^\\\n])*(?P=d)[gpiI\d]*"
    r"|y/[^/\\\n]*/[^/\\\n]*/)\s*"
)


def _sed(args: list[str]) -> str | None:
    """Only ``sed [harmless flags] SCRIPT [FILE …]`` whose every command is one of
    ``_SED_COMMAND`` is plain: ``-e``, ``-f``, ``e``, ``w`` and what this cannot read ask."""
    options = list(itertools.takewhile(_is_option, args))
    unknown = next((o for o in options if o not in _SED_FLAGS), None)
    if unknown is not None:
        return unknown
    script, *_ = args[len(options) :] or [""]
    pieces = script.replace("\n", ";").split(";")
    return None if all(_SED_COMMAND.fullmatch(p) for p in pieces) else script
