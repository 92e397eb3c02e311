"""The child process target ``bench.profile`` gives the pool: agentcell's, under cProfile.

A module of its own (not ``bench.profile``, which runs as ``__main__``): dill sends
functions of ``__main__`` by value, without the module globals they use.
"""

from __future__ import annotations

import contextlib
import cProfile
import json
import marshal
import os
import resource
import sys
from typing import Any

from agentcell.worker.child._main import child_main


def _usage() -> tuple[float, float, int]:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime, usage.ru_stime, usage.ru_minflt


def profiled_child(out_dir: str, profile: bool, *args: Any, phases: bool = False) -> None:
    """agentcell's child target, under cProfile unless ``profile`` is false (the CPU and
    page-fault accounting is kept either way). Give it to the pool bound with
    ``functools.partial``: the fork server's environment is an allowlist, so settings
    cannot travel there as variables. The child leaves through ``os._exit`` from inside
    its loop, so the files are written by a wrapper around that call. With ``phases``,
    the CPU and wall time of each phase of its life are recorded too (``bench.phases``)."""
    user0, system0, faults0 = _usage()
    modules_at_start = set(sys.modules)
    phase_totals = None
    if phases:
        from bench.phases import instrument

        phase_totals = instrument()
    profiler = cProfile.Profile() if profile else None
    real_exit = os._exit
    pid = os.getpid()
    # Opened now: the sub-agent's sandbox will not let it open files here later.
    account = open(f"{out_dir}/child-{pid}.json", "w")  # noqa: SIM115
    stats = open(f"{out_dir}/child-{pid}.prof", "wb") if profiler is not None else None  # noqa: SIM115

    def exit_after_dump(code: int) -> None:
        if profiler is not None:
            profiler.disable()
        user, system, faults = _usage()
        with contextlib.suppress(OSError):
            if profiler is not None and stats is not None:
                profiler.create_stats()
                marshal.dump(profiler.stats, stats)  # what dump_stats writes
                stats.close()
            account.write(
                json.dumps(
                    {
                        "cpu_before_target_s": user0 + system0,
                        "user_in_target_s": user - user0,
                        "system_in_target_s": system - system0,
                        "faults_before_target": faults0,
                        "faults_in_target": faults - faults0,
                        "phases": phase_totals or {},
                        "imported_in_target": sorted(set(sys.modules) - modules_at_start),
                    }
                )
            )
            account.close()
        real_exit(code)

    os._exit = exit_after_dump
    if profiler is not None:
        profiler.enable()
    child_main(*args)
