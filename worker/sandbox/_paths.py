"""The paths every sandbox reads besides the system folders: the Python runtime the
sub-agent runs on (with its source checkout), git's configuration, the version managers'
trees (interpreters bash may run) and the run's extra read folders — worked out once in
the fork server (``warm_path_cache``) and inherited by every sub-agent it forks."""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

from agentcell.worker.sandbox import _bash_userns, _landlock_held, _seccomp
from agentcell.worker.sandbox import _landlock_rules as _common_rules


def read_paths(workdir: str, extra: Iterable[str] = ()) -> list[str]:
    """The Python runtime this process runs (with its source checkout), git's and the
    version managers' folders, and ``extra``: what is read-only besides the system
    folders (``_common_rules.allow_common``), and depends on the workdir."""
    home = os.path.realpath(os.path.expanduser("~"))
    paths: list[str] = []
    runtime = _runtime_paths(
        home,
        tuple(sys.path),
        (sys.prefix, sys.base_prefix, sys.exec_prefix),
        sys.executable,
    )
    real_workdir = os.path.realpath(workdir)
    for real in runtime:
        # Never a folder that holds the workdir's surroundings as a whole.
        if real_workdir.startswith(real.rstrip("/") + "/") or real == workdir:
            continue
        paths.append(real)
    # git treats an unreadable global config as fatal: its configuration (not the rest of
    # the home) is readable.
    paths += [os.path.join(home, ".gitconfig"), os.path.join(home, ".config", "git")]
    paths += version_manager_paths(home, os.environ, real_workdir)
    return paths + [os.path.realpath(os.path.expanduser(p)) for p in extra]


@functools.lru_cache(maxsize=8)
def _runtime_paths(
    home: str, sys_path: tuple[str, ...], prefixes: tuple[str, ...], executable: str
) -> tuple[str, ...]:
    """The runtime's folders, resolved, without "/" and any that holds the home. Cached:
    the fork server computes it once (``warm_path_cache``) and every sub-agent process
    inherits the answer instead of resolving some twenty paths again."""
    runtime = set(prefixes)
    runtime.add(os.path.dirname(os.path.realpath(executable)))
    runtime.update(entry for entry in sys_path if entry)
    # The folder this package is installed from (an editable install: the source checkout).
    runtime.add(str(Path(__file__).resolve().parents[2]))
    base = os.path.realpath(prefixes[1])
    if _contains(home, base):
        # A Python manager in the home (~/.pyenv): its shims on PATH need all of it.
        runtime.add(os.path.join(home, os.path.relpath(base, home).split(os.sep)[0]))
    found = []
    for entry in sorted(runtime):
        real = os.path.realpath(entry)
        # Never a folder that holds the home as a whole.
        if real in ("/", "") or _contains(real, home):
            continue
        found.append(real)
    return tuple(found)


#: Version managers' trees in the home (interpreters, their libraries, pyenv's shims):
#: bash runs the ``python3`` PATH finds there, so each whole tree is readable+executable.
_MANAGER_TREES = (
    ".pyenv",
    ".local/share/uv/python",
    "miniconda3",
    "anaconda3",
    "miniforge3",
    "mambaforge",
    ".conda",
    ".asdf",
    ".local/share/mise",
)
#: The same, named by the environment where a user moved them.
_MANAGER_VARIABLES = ("PYENV_ROOT", "UV_PYTHON_INSTALL_DIR", "CONDA_PREFIX", "CONDA_ROOT")


def version_manager_paths(home: str, environ: Mapping[str, str], workdir: str | None) -> list[str]:
    """The version managers' trees present here, resolved, read-only (never written: no
    write right is given). Never the home itself or a folder holding it or the workdir
    (a ``CONDA_PREFIX=$HOME`` would open all of ``~/.ssh``)."""
    named = tuple(environ.get(name, "") for name in _MANAGER_VARIABLES)
    trees = _manager_trees(home, named)
    return [real for real in trees if workdir is None or not _contains(real, workdir)]


@functools.lru_cache(maxsize=8)  # worked out in the fork server (warm_path_cache)
def _manager_trees(home: str, named: tuple[str, ...]) -> tuple[str, ...]:
    """The trees present for ``home`` and the variables' values ``named``: looked up
    once per fork server, like ``_runtime_paths`` (a tree installed later is granted to
    the children of the next one)."""
    candidates = [os.path.join(home, tree) for tree in _MANAGER_TREES]
    candidates += [value for value in named if value]
    found: list[str] = []
    for candidate in candidates:
        real = os.path.realpath(os.path.expanduser(candidate))
        if real in ("/", "") or not os.path.isdir(real) or real in found:
            continue
        if _contains(real, home):
            continue
        found.append(real)
    return tuple(found)


def warm_path_cache(sys_path: Iterable[str] | None = None) -> None:
    """Work out, once in the fork server, the paths every sandbox allows, for the
    ``sys_path`` its children will have (the parent's); its children inherit the result,
    and the descriptors of those that are the same for every child (``hold_shared_paths``)."""
    home = os.path.realpath(os.path.expanduser("~"))
    runtime = _runtime_paths(
        home,
        tuple(sys.path if sys_path is None else sys_path),
        (sys.prefix, sys.base_prefix, sys.exec_prefix),
        sys.executable,
    )
    key = _common_rules.etc_key_now()
    _common_rules.etc_paths(key)
    _seccomp.warm()
    _bash_userns.warm()
    stable = [*_common_rules.SYSTEM_READ, *runtime, *version_manager_paths(home, os.environ, None)]
    _landlock_held.hold([*stable, "/etc", *_common_rules.DEVICES])
    _landlock_held.hold_etc(_common_rules.etc_paths(key), key)


def _contains(folder: str, path: str) -> bool:
    return os.path.realpath(path).startswith(folder.rstrip("/") + "/") or folder == path
