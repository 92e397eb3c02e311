"""The modules the fork server imports once so that each child starts warm.

Lazy imports are not covered by preloading a package, so the submodules a child really uses
are listed too; tests/orchestrator/backends/test_pool.py checks a child imports nothing
heavy on its own.
"""

from __future__ import annotations

import importlib
import json
import sys
import threading
from collections.abc import MutableMapping

PRELOAD_MODULES: list[str] = [
    "asyncio",
    "json",
    "msgspec",
    "msgspec.msgpack",
    "msgspec.json",
    "dill",
    # Unpickling the Process object a child is started from imports these (the
    # Connection's file descriptor travels as a popen_forkserver reference).
    "multiprocess.popen_fork",
    "multiprocess.popen_forkserver",
    "agentcell.protocol",
    "psutil",
    # Not httpx and its stack (httpcore, h11, h2, anyio, idna): a sub-agent's model
    # requests go through the parent, and the ~12 MiB they add to the template cost every
    # fork and exit ~1 ms (bench/README.md). A child that sends directly (a model object
    # of the caller's, a Ray node's route, an http MCP server) imports them itself;
    # the ``preload`` setting can put them back.
    #
    # The allow rules' shell parser (bashlex), imported at its first use: here so that
    # no child imports it again; through the module that reads its parse tables (a plain
    # ``import bashlex`` builds them, ~0.1 s).
    "agentcell.worker.rules._bashlex_fast",
    "agentcell.worker.child._proc",
    "agentcell.worker.child._main",
    "agentcell.worker.child._agent",
    "agentcell.worker.engine._loop",
    "agentcell.worker.models._openai",
    "agentcell.worker.models._anthropic",
    "agentcell.worker.tools._builtin",
    "agentcell.worker.models._doubles",
]

#: Imported last: it records what loaded and arms the fork server's exit hook.
BOOT_MODULE = "agentcell.worker.child._forkserver_boot"

#: How the fork server learns the caller's own preload list (the ``preload`` setting,
#: ``WorkerPool(preload=)``) and the parent's ``sys.path``: multiprocess passes its fork
#: server a ``sys_path`` it then ignores, and imports its own list with only
#: ``ImportError`` caught, so a module that raised anything else would end the fork
#: server. The boot module imports these itself, each failure caught and reported.
PRELOAD_VARIABLE = "AGENTCELL_PRELOAD"


#: Set for the fork server's interpreter, taken out again by its boot module. It starts
#: as ``python -c``, which would put the folder the orchestrator was started in first on
#: its path: a cloned repository's own ``httpx.py`` or ``dill.py`` there would be
#: imported by the fork server, outside every sandbox, trusted or not (Python 3.11+).
SAFE_PATH_VARIABLE = "PYTHONSAFEPATH"


def preload_environment(modules: list[str]) -> dict[str, str]:
    """What the fork server's environment carries: ``modules`` and this ``sys.path``,
    and no current folder on its own path."""
    request = json.dumps({"modules": list(modules), "path": list(sys.path)})
    return {PRELOAD_VARIABLE: request, SAFE_PATH_VARIABLE: "1"}


def take_preload_request(environ: MutableMapping[str, str]) -> tuple[list[str], list[str]]:
    """In the fork server: (the caller's modules, the parent's ``sys.path``), taken out of
    ``environ`` (children need not carry it); no modules and this ``sys.path`` if unset."""
    environ.pop(SAFE_PATH_VARIABLE, None)  # the fork server's own, not its children's
    raw = environ.pop(PRELOAD_VARIABLE, None)
    if not raw:
        return [], list(sys.path)
    request = json.loads(raw)
    return [str(m) for m in request["modules"]], [str(p) for p in request["path"]]


def import_preload(modules: list[str], path: list[str]) -> list[str]:
    """In the fork server: import ``modules`` on the parent's ``path``; one line for each
    that failed, or that started a thread at import (a thread does not survive a fork:
    its children would have none of it)."""
    problems: list[str] = []
    own_path = sys.path[:]
    sys.path[:] = [*path, *(p for p in own_path if p not in path)]
    try:
        for name in modules:
            threads = threading.active_count()
            try:
                importlib.import_module(name)
            except BaseException as exc:  # SystemExit too: the fork server must live on
                problems.append(f"{name} ({type(exc).__name__}: {_one_line(exc)})")
                continue
            if threading.active_count() > threads:
                problems.append(f"{name} (started a thread at import: unsafe to fork)")
    finally:
        sys.path[:] = own_path
    return problems


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text[:200] or "no message"
