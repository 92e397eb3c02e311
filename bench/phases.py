"""Per-phase CPU and wall time inside one sub-agent process (used by ``bench.profile``).

``instrument()`` wraps, in the child only, the functions that make up a sub-agent's
life — hardening, the pipe and Hello, the Start's objects, model, engine and sandbox,
each model request, the exit clean-up — and adds up, per phase, the process's CPU
(``time.process_time``, every thread) and wall time spent inside them. Phases nest (a
sandbox's cgroup is inside "enter sandbox"), so each row is inclusive. A child runs one
agent, so the CPU measured across an ``await`` is that agent's (a heartbeat is noise).
"""

from __future__ import annotations

import functools
import importlib
import inspect
import resource
import sys
import time
from collections.abc import Callable
from typing import Any

#: (phase, module, attribute path): what a child's life is made of, in order.
PHASES: tuple[tuple[str, str, str], ...] = (
    ("harden (setsid, prctl, oom, fds, faulthandler)", "agentcell.worker.child._main", "_harden"),
    (
        "spare's cgroup, made before its Hello",
        "agentcell.worker.sandbox._cgroup",
        "ProcessCap.prepare",
    ),
    (
        "spare's temp folder and common Landlock rules, before its Hello",
        "agentcell.worker.sandbox._spare",
        "prepare",
    ),
    (
        "pre-connect to the model endpoint",
        "agentcell.worker.models.transports._client",
        "prepare_connection",
    ),
    ("open the pipe", "agentcell.protocol", "PipeChannel.open"),
    ("Hello → Start → run → Result (all of _serve)", "agentcell.worker.child._main", "_serve"),
    ("run_agent (the handler)", "agentcell.worker.child._agent", "run_agent"),
    ("dill.loads of the Start's objects", "dill", "loads"),
    ("resolve the model", "agentcell.worker.child._agent", "resolve_model"),
    ("build the engine (registry, hooks)", "agentcell.worker.child._agent", "build_engine"),
    ("enter the sandbox (all)", "agentcell.worker.child._agent", "enter_sandbox"),
    ("  cgroup pids cap", "agentcell.worker.sandbox._cgroup", "ProcessCap.create"),
    (
        "  Landlock ruleset (with the mounts below)",
        "agentcell.worker.sandbox._apply",
        "_restrict_process",
    ),
    (
        "    grants opened (workdir, tmp, run, memory)",
        "agentcell.worker.sandbox._grants",
        "open_grants",
    ),
    ("    mount namespace + read-only binds", "agentcell.worker.sandbox._mountns", "protect"),
    ("    tmp cap (tmpfs)", "agentcell.worker.sandbox._tmpcap", "cap"),
    ("    landlock_restrict_self", "agentcell.worker.sandbox._landlock", "Ruleset.restrict_self"),
    ("  bash's network namespace + relay", "agentcell.worker.sandbox._apply", "_prepare_egress"),
    ("  bash wall prepared", "agentcell.worker.sandbox._apply", "_prepare_bash_wall"),
    ("  seccomp filter (check + install)", "agentcell.worker.sandbox._apply", "_install_seccomp"),
    ("engine.run (3 model turns + tools)", "agentcell.worker.engine._loop", "Engine.run"),
    ("  model request #1", "agentcell.worker.models._http", "SSEClient.stream#1"),
    ("  model requests #2+", "agentcell.worker.models._http", "SSEClient.stream#2+"),
    ("model.aclose", "agentcell.worker.models._chat_model", "HttpChatModel.aclose"),
    ("reap descendants at exit", "agentcell.worker.child._main", "_reap_descendants"),
)


def _faults() -> int:
    """Minor page faults of this process so far (first touches and copies on write)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


#: Instrumented only where the child has imported them itself: importing the direct
#: HTTP route here would load httpx (~12 MiB) into a child that never uses it.
_ONLY_IF_LOADED = frozenset({"agentcell.worker.models.transports._client"})


def _resolve(module: str, path: str) -> tuple[Any, str]:
    if module in _ONLY_IF_LOADED and module not in sys.modules:
        raise ImportError(module)
    owner: Any = importlib.import_module(module)
    *parents, name = path.split(".")
    for parent in parents:
        owner = getattr(owner, parent)
    return owner, name


def instrument() -> dict[str, list[float]]:
    """Wrap every phase's function; returns {phase: [cpu_s, wall_s, calls, faults]},
    filled as the child runs."""
    totals: dict[str, list[float]] = {}
    by_target: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for label, module, path in PHASES:
        attr, _, which = path.partition("#")
        by_target.setdefault((module, attr), []).append((label, which))
    for (module, attr), labels in by_target.items():
        try:
            owner, name = _resolve(module, attr)
        except (ImportError, AttributeError):
            continue
        raw = owner.__dict__.get(name) if isinstance(owner, type) else getattr(owner, name)
        kind = type(raw) if isinstance(raw, classmethod | staticmethod) else None
        func = raw.__func__ if kind is not None else raw
        wrapped = _wrap(func, labels, totals)
        setattr(owner, name, kind(wrapped) if kind is not None else wrapped)
    return totals


def _wrap(
    func: Callable[..., Any], labels: list[tuple[str, str]], totals: dict[str, list[float]]
) -> Callable[..., Any]:
    calls = [0]

    def label_now() -> str:
        calls[0] += 1
        for label, which in labels:
            if not which or (which == "1" and calls[0] == 1) or (which == "2+" and calls[0] > 1):
                return label
        return labels[0][0]

    def add(label: str, cpu0: float, wall0: float, faults0: int) -> None:
        row = totals.setdefault(label, [0.0, 0.0, 0, 0])
        row[0] += time.process_time() - cpu0
        row[1] += time.perf_counter() - wall0
        row[2] += 1
        row[3] += _faults() - faults0

    if inspect.isasyncgenfunction(func):

        @functools.wraps(func)
        async def agen(*args: Any, **kwargs: Any) -> Any:
            label = label_now()
            cpu0, wall0, faults0 = time.process_time(), time.perf_counter(), _faults()
            try:
                async for item in func(*args, **kwargs):
                    yield item
            finally:
                add(label, cpu0, wall0, faults0)

        return agen
    if inspect.iscoroutinefunction(func):

        @functools.wraps(func)
        async def coro(*args: Any, **kwargs: Any) -> Any:
            label = label_now()
            cpu0, wall0, faults0 = time.process_time(), time.perf_counter(), _faults()
            try:
                return await func(*args, **kwargs)
            finally:
                add(label, cpu0, wall0, faults0)

        return coro

    @functools.wraps(func)
    def plain(*args: Any, **kwargs: Any) -> Any:
        label = label_now()
        cpu0, wall0, faults0 = time.process_time(), time.perf_counter(), _faults()
        try:
            return func(*args, **kwargs)
        finally:
            add(label, cpu0, wall0, faults0)

    return plain
