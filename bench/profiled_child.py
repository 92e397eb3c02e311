"""The child process target ``bench.profile`` gives the pool: agentcell's, under cProfile.

A module of its own (not ``bench.profile``, which runs as ``__main__``): dill sends
functions of ``__main__`` by value, without the module globals they use.
"""

from __future__ import annotations

import contextlib
import cProfile
import json
import os
import resource
from pathlib import Path
from typing import Any

from agentcell.worker import child_main


def _usage() -> tuple[float, float, int]:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime, usage.ru_stime, usage.ru_minflt


def profiled_child(out_dir: str, profile: bool, *args: Any) -> None:
    """agentcell's child target, under cProfile unless ``profile`` is false (the CPU and
    page-fault accounting is kept either way). Give it to the pool bound with
    ``functools.partial``: the fork server's environment is an allowlist, so settings
    cannot travel there as variables. The child leaves through ``os._exit`` from inside
    its loop, so the files are written by a wrapper around that call."""
    user0, system0, faults0 = _usage()
    profiler = cProfile.Profile() if profile else None
    real_exit = os._exit

    def exit_after_dump(code: int) -> None:
        if profiler is not None:
            profiler.disable()
        user, system, faults = _usage()
        pid = os.getpid()
        with contextlib.suppress(OSError):
            if profiler is not None:
                profiler.dump_stats(f"{out_dir}/child-{pid}.prof")
            Path(f"{out_dir}/child-{pid}.json").write_text(
                json.dumps(
                    {
                        "cpu_before_target_s": user0 + system0,
                        "user_in_target_s": user - user0,
                        "system_in_target_s": system - system0,
                        "faults_before_target": faults0,
                        "faults_in_target": faults - faults0,
                    }
                )
            )
        real_exit(code)

    os._exit = exit_after_dump
    if profiler is not None:
        profiler.enable()
    child_main(*args)
