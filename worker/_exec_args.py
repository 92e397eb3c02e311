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
    "sed": ("-f", "--file"),
    "zip": ("-T", "--test", "-TT", "--unzip-command"),
}
_CLUSTERS: dict[str, str] = {
    "tar": "IF",
    "rsync": "e",
    "ssh": "oFJS",
    "scp": "oFJS",
    "sftp": "oFJS",
}
#: Text inside an awk program that runs a command.
_AWK_RUNS = ("system", "|", "getline", "@load")


def runs_another(words: list[str]) -> str | None:
    """The first argument in ``words`` (a simple command, program first) that makes the
    program run another program, or None."""
    program, args = words[0], words[1:]
    if program == "git":
        return _git(args)
    for word in args:
        if _names_option(word, _OPTIONS.get(program, ())):
            return word
        if _in_cluster(word, _CLUSTERS.get(program, "")):
            return word
    old_style = program == "tar" and args and not args[0].startswith("-")
    if old_style and set(args[0]) & set(_CLUSTERS["tar"]):  # tar xIf …
        return args[0]
    if program in ("rsync", "scp") and any(":" in w and not w.startswith("-") for w in args):
        return next(w for w in args if ":" in w)  # a remote side: ssh runs
    if program in ("awk", "gawk", "mawk", "nawk"):
        return next((w for w in args if any(t in w for t in _AWK_RUNS)), None)
    if program == "sed":
        return _sed(args)
    return None


def _names_option(word: str, options: tuple[str, ...], *, abbreviated: bool = False) -> bool:
    """``word`` is one of ``options``, with ``=value``, glued to its value (short ones),
    or, for a program that takes unique prefixes of long options (git), a prefix of one."""
    name = word.split("=", 1)[0]
    for option in options:
        if word == option or word.startswith(option + "="):
            return True
        if abbreviated and name.startswith("--") and len(name) > 3 and option.startswith(name):
            return True
        if len(option) == 2 and option[0] == "-" and option[1] != "-" and word.startswith(option):
            return True  # -Ivalue, -ecmd
    return False


def _in_cluster(word: str, letters: str) -> bool:
    return (
        bool(letters)
        and word.startswith("-")
        and not word.startswith("--")
        and any(ch in letters for ch in word[1:])
    )


def _git(args: list[str]) -> str | None:
    index = 0
    while index < len(args) and args[index].startswith("-"):  # options before the command
        word = args[index]
        if _names_option(word, _GIT_GLOBAL, abbreviated=True) or word.startswith("-c"):
            return word
        index += 1
    if index == len(args):
        return None
    command, rest = args[index], args[index + 1 :]
    if command in _GIT_RUNNERS:
        return command
    if any(word in _GIT_RUNNER_PAIRS.get(command, ()) for word in rest):
        return f"{command} {next(w for w in rest if w in _GIT_RUNNER_PAIRS[command])}"
    for word in rest:
        if word == "--":
            break
        if _names_option(word, _GIT_OPTIONS, abbreviated=True):
            return word
        if _in_cluster(word, _GIT_SHORT.get(command, "")):
            return word
        if command == "archive" and word.startswith("--remote"):
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
        if word.startswith("-"):
            continue
        section = word.split(".", 1)[0].lower()
        if section in _GIT_CONFIG_SECTIONS:
            return word
    return None


def _sed(args: list[str]) -> str | None:
    """GNU sed runs a command for its ``e`` command and ``s///e`` flag, and writes files
    with ``w``/``W``: a script with any of them (or one this cannot read) is not plain."""
    scripts: list[str] = []
    words = iter(args)
    for word in words:
        if _names_option(word, _OPTIONS["sed"]):
            return word
        if word in ("-e", "--expression"):
            scripts.append(next(words, ""))
        elif word.startswith(("--expression=", "-e")) and len(word) > 2:
            scripts.append(word.split("=", 1)[1] if word.startswith("--") else word[2:])
        elif not word.startswith("-") and not scripts:
            scripts.append(word)
            break
    return next((s for s in scripts if not _sed_plain(s)), None)


#: sed commands that neither run a program nor write a file (``s`` is read apart).
_SED_SAFE = frozenset("pPdDnNgGhHxlqQz=FTtby:aicrRv#")
_SED_ADDRESS = " \t0123456789$,!~+"


def _sed_plain(script: str) -> bool:
    for command in script.replace("\n", ";").split(";"):
        body = command.lstrip(_SED_ADDRESS + "{")
        while body.startswith("/"):  # an address /regex/
            end = body.find("/", 1)
            if end < 0:
                return False
            body = body[end + 1 :].lstrip(_SED_ADDRESS)
        body = body.lstrip("{ \t").rstrip("} \t")
        if not body:
            continue
        if body[0] == "s":
            parts = body[2:].split(body[1]) if len(body) > 1 else []
            if len(parts) < 3 or "\\" in body or set(parts[2]) & set("ewW"):
                return False
        elif body[0] not in _SED_SAFE:
            return False  # e, w, W, or what this cannot read
    return True
