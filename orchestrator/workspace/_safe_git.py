"""git as the parent runs it: never a program that an agent, or a repository, named.

The parent (unsandboxed, as the user) runs git on trees a sub-agent wrote: its worktree,
whose ``.git`` file and admin folder (``.git/worktrees/<name>/``) the agent may rewrite, and
the user's repository, whose ``.git/`` a plain sub-agent may have written. git runs
programs named in those places: hooks, ``core.fsmonitor``, filter drivers named in
``.gitattributes``, pagers, editors, transports' helpers. So every git command of the
parent goes through :class:`SafeGit`:

- the repository is never discovered from a tree an agent wrote: ``GIT_DIR``,
  ``GIT_COMMON_DIR`` and ``GIT_WORK_TREE`` are paths agentcell verified (:class:`GitPlace`);
- every key in :data:`HARDENING` and every driver in :data:`DRIVER_KEYS` is set in the
  command scope (``GIT_CONFIG_COUNT``), which git reads after every config file, so it wins
  over the system, global, repository and worktree files alike, and reaches the git
  processes git starts itself (``worktree add``'s checkout, git-lfs's own git calls);
- a driver (filter, git-lfs extension or transfer agent) keeps its program only when the
  user's own global config, or the system's, sets it — read from those files alone; every
  other driver key found in the effective config is blanked (an empty command: git stores
  and checks out the bytes as they are). Only config names a driver: an attribute that
  names one nobody configured runs nothing, so the attributes need no parsing;
- no transport at all (``GIT_ALLOW_PROTOCOL`` empty), no system config or attributes, no
  terminal prompt, ``cat`` as pager and ``true`` as editor, and ``--no-ext-diff
  --no-textconv`` on the diff family.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
from collections.abc import Iterable, Mapping
from pathlib import Path

#: Set on every git command of the parent, over anything a config file says. Each names a
#: program git would run (or a state that lets an agent steer what the commit holds).
HARDENING: tuple[tuple[str, str], ...] = (
    ("core.hooksPath", "/dev/null"),  # no hook: .git/hooks, a tracked .husky, a global one
    ("core.fsmonitor", "false"),  # a hook program, run on every index refresh
    ("core.untrackedCache", "false"),  # an index cache an agent can forge: don't trust it
    ("core.splitIndex", "false"),  # the index is one file agentcell can copy
    ("core.pager", "cat"),
    ("core.editor", "true"),
    ("sequence.editor", "true"),
    ("core.askPass", ""),  # empty: no askpass program (SSH_ASKPASS is not consulted either)
    ("credential.helper", ""),  # empty: resets the list of helpers
    ("commit.gpgSign", "false"),  # gpg.program / gpg.ssh.program never run
    ("tag.gpgSign", "false"),
    ("submodule.recurse", "false"),  # never enter a submodule, whose config we did not read
    ("maintenance.auto", "false"),  # no `git maintenance run --auto` after a commit
    ("gc.auto", "0"),
)

#: The environment git gets beside the verified paths (every other ``GIT_*`` is dropped).
ENVIRONMENT: Mapping[str, str] = {
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_ATTR_NOSYSTEM": "1",
    "GIT_TERMINAL_PROMPT": "0",
    "GIT_PAGER": "cat",
    "GIT_EDITOR": "true",
    "GIT_SEQUENCE_EDITOR": "true",
    # Listed protocols only, over protocol.<name>.allow: none, so no ssh (core.sshCommand),
    # git:// (core.gitProxy), http (credential helpers, askpass), ext::, nor a lazy fetch.
    "GIT_ALLOW_PROTOCOL": "",
    "GIT_NO_REPLACE_OBJECTS": "1",  # the commit is built from the objects as they are
    "GIT_LITERAL_PATHSPECS": "1",  # a path an agent named is a path, never a pattern
}

#: Variables outside ``GIT_*`` that git reads for a program to run.
_DROPPED = ("PAGER", "EDITOR", "VISUAL", "SSH_ASKPASS")

#: Drivers: ``section.<name>.key`` families whose value is a command. Each such key found
#: in the effective config is blanked, unless the user's global or the system config sets
#: it (then the value from there is passed, so a repository cannot change it). The
#: neutral value is what git does without the driver (git-lfs's: the call fails).
DRIVER_KEYS: Mapping[str, Mapping[str, str]] = {
    "filter": {"clean": "", "smudge": "", "process": "", "required": "false"},
    "lfs.extension": {"clean": "", "smudge": ""},
    "lfs.customtransfer": {"path": ""},
}

#: Commands whose output may pass through a diff driver or an external diff program.
_FLAGS: Mapping[str, tuple[str, ...]] = {
    "diff": ("--no-ext-diff", "--no-textconv"),
    "log": ("--no-ext-diff", "--no-textconv"),
    "show": ("--no-ext-diff", "--no-textconv"),
    "status": ("--ignore-submodules=all",),
}


class GitError(Exception):
    """git could not be run as the parent runs it; the message says why."""


@dataclasses.dataclass(frozen=True, slots=True)
class GitPlace:
    """A repository as agentcell verified it: git is told these, never left to find them."""

    git_dir: Path
    common_dir: Path
    work_tree: Path


def base_environment(source: Mapping[str, str] | None = None) -> dict[str, str]:
    """``source`` (the parent's environment) without ``GIT_*`` and the program variables,
    plus :data:`ENVIRONMENT`: no place or config yet."""
    env = {
        key: value
        for key, value in (os.environ if source is None else source).items()
        if not key.startswith("GIT_") and key not in _DROPPED
    }
    env.update(ENVIRONMENT)
    return env


def _config_env(pairs: Iterable[tuple[str, str]]) -> dict[str, str]:
    """``GIT_CONFIG_COUNT``/``KEY_n``/``VALUE_n``: the command scope, with no parsing of
    ``key=value`` (a driver's name may hold ``=``)."""
    env: dict[str, str] = {}
    count = 0
    for count, (key, value) in enumerate(pairs, start=1):
        env[f"GIT_CONFIG_KEY_{count - 1}"] = key
        env[f"GIT_CONFIG_VALUE_{count - 1}"] = value
    env["GIT_CONFIG_COUNT"] = str(count)
    return env


async def _exec(argv: list[str], env: Mapping[str, str], cwd: Path | str) -> tuple[int, bytes]:
    proc = await asyncio.create_subprocess_exec(
        *argv,
        cwd=cwd,
        env=dict(env),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await proc.communicate()
    return proc.returncode or 0, out


def _parse_with_origins(raw: bytes, untrusted: Iterable[Path]) -> dict[str, str]:
    """``git config -z --show-origin --list``: an origin, then its entry; entries from a
    file under one of ``untrusted`` (a file your config includes from inside the
    repository, say) are left out."""
    roots = [str(root).rstrip("/") + "/" for root in untrusted]
    fields = raw.decode(errors="surrogateescape").split("\0")
    found: dict[str, str] = {}
    for origin, entry in zip(fields[::2], fields[1::2], strict=False):
        path = os.path.realpath(origin.removeprefix("file:"))
        if not origin.startswith("file:") or any(path.startswith(r) for r in roots):
            continue
        key, _, value = entry.partition("\n")
        found[key] = value
    return found


def _driver_of(key: str) -> tuple[str, str, str] | None:
    """``filter.<name>.clean`` → ("filter", name, "clean"); None for any other key.
    Section and key are lower case in a listing; the name keeps its case."""
    for family, keys in DRIVER_KEYS.items():
        prefix = family + "."
        if key.lower().startswith(prefix) and "." in key[len(prefix) :]:
            name, _, leaf = key[len(prefix) :].rpartition(".")
            if name and leaf.lower() in keys:
                return family, name, leaf.lower()
    return None


async def trusted_config(env: Mapping[str, str], untrusted: Iterable[Path]) -> dict[str, str]:
    """The user's global config and the system's (both out of an agent's reach), with
    their includes unless one lies under ``untrusted``: the only places a driver's
    program may come from."""
    plain = {k: v for k, v in env.items() if k != "GIT_CONFIG_NOSYSTEM"}
    roots = list(untrusted)
    merged: dict[str, str] = {}
    for scope in ("--system", "--global"):  # global after system: it wins, as in git
        argv = ["git", "config", "-z", "--includes", "--show-origin", "--list", scope]
        code, out = await _exec(argv, plain, "/")
        if code == 0:
            merged.update(_parse_with_origins(out, roots))
    return merged


def driver_overrides(names: Iterable[str], trusted: Mapping[str, str]) -> list[tuple[str, str]]:
    """For every driver key in ``names`` (the effective config's keys) or ``trusted``: the
    trusted value where the user's global or the system config sets that key, else the
    neutral one. Keys nobody set stay unset: git has no way to unset a key, and an empty
    ``process`` would also switch off the driver's ``clean`` and ``smudge`` — which is what
    happens, safely, when a repository adds a ``process`` to a filter of yours."""
    own: dict[tuple[str, str, str], str] = {}
    for key, value in trusted.items():
        found = _driver_of(key)
        if found is not None:
            own[found] = value
    present = {found for key in names if (found := _driver_of(key)) is not None} | set(own)
    return [
        (f"{family}.{name}.{leaf}", own.get((family, name, leaf), DRIVER_KEYS[family][leaf]))
        for family, name, leaf in sorted(present)
    ]


def blanked_filters(overrides: Iterable[tuple[str, str]]) -> set[str]:
    """The filters among ``overrides`` that had a command blanked (a repository's own
    filter, or yours with a ``process`` a repository added)."""
    blanked: set[str] = set()
    for key, value in overrides:
        found = _driver_of(key)
        if found and found[0] == "filter" and found[2] != "required" and value == "":
            blanked.add(found[1])
    return blanked


def place_environment(place: GitPlace) -> dict[str, str]:
    return {
        "GIT_DIR": str(place.git_dir),
        "GIT_COMMON_DIR": str(place.common_dir),
        "GIT_WORK_TREE": str(place.work_tree),
    }


class SafeGit:
    """git commands in one verified place, with the drivers settled once (:meth:`open`)."""

    def __init__(
        self, place: GitPlace, env: Mapping[str, str], blanked: Iterable[str] = ()
    ) -> None:
        self.place = place
        self._env = dict(env)
        #: Filters the config names whose program this runner does not run: a file they
        #: cover goes in as its bytes (see :func:`blanked_filters`).
        self.blanked = frozenset(blanked)

    @classmethod
    async def open(cls, place: GitPlace) -> SafeGit:
        """Read which drivers the effective config names (in this place, as the commands
        will see it), and settle each one from the user's own config or blank it."""
        base = base_environment()
        env = base | place_environment(place) | _config_env(HARDENING)
        code, out = await _exec(
            ["git", "config", "-z", "--name-only", "--list"], env, place.work_tree
        )
        if code != 0:
            why = " ".join(_text(out).split())
            raise GitError(f"git cannot read the configuration of {place.work_tree}: {why}")
        names = [name for name in out.decode(errors="surrogateescape").split("\0") if name]
        # Folders an agent may write: the repository's own files are never "yours".
        untrusted = {place.work_tree, place.git_dir, place.common_dir, place.common_dir.parent}
        trusted = await trusted_config(base, untrusted)
        drivers = driver_overrides(names, trusted)
        env = base | place_environment(place) | _config_env([*HARDENING, *drivers])
        return cls(place, env, blanked_filters(drivers))

    def command(
        self, *args: str, config: Iterable[tuple[str, str]] = ()
    ) -> tuple[list[str], dict[str, str]]:
        """The argv and environment of ``git args...`` (for a caller that runs it itself).
        ``config`` adds keys to the command scope (after the hardening, never over it)."""
        env = dict(self._env)
        extra = list(config)
        if extra:
            count = int(env["GIT_CONFIG_COUNT"])
            for index, (key, value) in enumerate(extra, start=count):
                if key.lower() in _HARDENED_KEYS or _driver_of(key) is not None:
                    raise ValueError(f"{key} is set by the git runner itself")
                env[f"GIT_CONFIG_KEY_{index}"] = key
                env[f"GIT_CONFIG_VALUE_{index}"] = value
            env["GIT_CONFIG_COUNT"] = str(count + len(extra))
        if not args or args[0].startswith("-"):  # options before it would skip the flags
            raise ValueError(f"a git subcommand comes first, not {args[:1]}")
        args = (args[0], *_FLAGS.get(args[0], ()), *args[1:])
        return ["git", "--no-pager", *args], env

    async def run(
        self, *args: str, config: Iterable[tuple[str, str]] = (), strip: bool = True
    ) -> tuple[int, str]:
        """Run ``git args...`` in the work tree: exit status and output (stdout and stderr;
        ``strip=False`` for ``-z`` output, whose first path may start with a space)."""
        argv, env = self.command(*args, config=config)
        code, out = await _exec(argv, env, self.place.work_tree)
        return code, _text(out) if strip else out.decode(errors="surrogateescape")


_HARDENED_KEYS = frozenset(key.lower() for key, _ in HARDENING)


def _text(out: bytes) -> str:
    return out.decode(errors="replace").strip()


async def discover(workdir: Path) -> GitPlace | None:
    """The repository ``workdir`` is in, found from the user's own folder (the one git
    discovery the parent makes), or None outside one. Real, absolute paths; GitError
    when git cannot read it."""
    env = base_environment() | _config_env(HARDENING)
    argv = ["git", "rev-parse", "--path-format=absolute"]
    argv += ["--show-toplevel", "--git-dir", "--git-common-dir"]
    code, out = await _exec(argv, env, workdir)
    text = _text(out)
    if code != 0 and "not a git repository" in text:
        return None
    lines = text.splitlines()
    if code != 0 or len(lines) != 3:
        raise GitError(f"git cannot read the repository at {workdir}: {' '.join(text.split())}")
    top, git_dir, common = _real(lines)
    return GitPlace(git_dir=git_dir, common_dir=common, work_tree=top)


def _real(paths: list[str]) -> list[Path]:
    return [Path(os.path.realpath(path)) for path in paths]
