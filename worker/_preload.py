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
    "protocol",
    "psutil",
    "httpx",
    "httpcore",
    "h11",
    "anyio",
    "anyio._backends._asyncio",
    "worker._proc",
    "worker._child",
    "worker._agent",
    "worker._engine",
    "worker.models._openai",
    "worker.models._anthropic",
    "worker.tools._builtin",
    "worker.testing",
]

#: Imported last: it records what loaded and arms the fork server's exit hook.
BOOT_MODULE = "worker._forkserver_boot"
