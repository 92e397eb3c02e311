"""The ``preload`` setting's check: each entry a module this Python can find.

Looked up the way ``import`` would find it (every finder of ``sys.meta_path``, editable
installs included), but without running it: importing is the fork server's job, and a
module's import-time code must not run in the orchestrator for a check. A dotted name's
packages are searched through their ``__path__`` (``submodule_search_locations``), so a
package's ``__init__`` does not run either.
"""

from __future__ import annotations

import importlib.machinery
import sys
from collections.abc import Sequence

#: More would be a list of everything, not what the children share.
MAX_PRELOAD = 64


def preload_problem(names: Sequence[str]) -> str:
    """Why ``names`` cannot be preloaded ("" if they can), naming the first bad one."""
    if len(names) > MAX_PRELOAD:
        return f"at most {MAX_PRELOAD} modules (the ones every sub-agent's tools import)"
    for name in names:
        if not all(part.isidentifier() for part in name.split(".")):
            return (
                f"{name!r} is not a module name: write it as import would, "
                "e.g. mytools or mytools.search"
            )
        if not findable(name):
            return (
                f"no module named {name!r} on this Python's path: fix the name, or install "
                "the module (PYTHONPATH, pip install -e) where the orchestrator runs"
            )
    return ""


def findable(name: str) -> bool:
    """Whether ``import name`` would find a module, without running any of it."""
    if name in sys.modules:
        return True
    path: Sequence[str] | None = None
    parts = name.split(".")
    for depth in range(1, len(parts) + 1):
        full = ".".join(parts[:depth])
        loaded = sys.modules.get(full)
        if loaded is not None:
            path = getattr(loaded, "__path__", None)
            continue
        spec = _find_spec(full, path)
        if spec is None:
            return False
        path = spec.submodule_search_locations
        if path is None and depth < len(parts):
            return False  # a module, not a package: it has no submodules
    return True


def _find_spec(name: str, path: Sequence[str] | None) -> importlib.machinery.ModuleSpec | None:
    for finder in sys.meta_path:
        find = getattr(finder, "find_spec", None)
        if find is None:
            continue
        try:
            spec = find(name, path)
        except (ImportError, ValueError, TypeError):
            continue
        if spec is not None:
            return spec
    return None
