"""The modules the fork server imports once so that each child starts warm.

Lazy imports are not covered by preloading a package, so the submodules a child really
uses are listed too; tests/test_pool.py checks a child imports nothing heavy on its own.
"""

from __future__ import annotations

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
    "httpx",
    "httpcore",
    "h11",
    "anyio",
    "anyio._backends._asyncio",
    "agentcell.worker._proc",
    "agentcell.worker._child",
    "agentcell.worker._agent",
    "agentcell.worker._engine",
    "agentcell.worker.models._openai",
    "agentcell.worker.models._anthropic",
    "agentcell.worker.tools._builtin",
    "agentcell.worker.testing",
]

#: Imported last: it records what loaded and arms the fork server's exit hook.
BOOT_MODULE = "agentcell.worker._forkserver_boot"
