"""A sub-agent's process has one thread when it enters its walls.

Landlock (ABI 7 has no way to apply a ruleset to every thread of a process) restricts
the thread that asks and the threads it starts afterwards, not threads already running:
a thread started before the walls would run whatever it is handed later outside them.
So the numeric libraries are told to start no pool at import (``numeric_libraries``),
and just before the walls the event loop's executor is replaced and any other thread
refuses the run (``before_the_walls``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import errno
import os
import threading
import time

#: What makes the usual numeric libraries run on the calling thread instead of starting a
#: pool of native threads when imported (OpenBLAS under numpy, OpenMP, MKL, numexpr).
ONE_THREAD_VARIABLES = (
    "OPENBLAS_NUM_THREADS",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "NUMEXPR_NUM_THREADS",
)


def numeric_libraries() -> None:
    """Set before a tool's modules are imported (the Start's objects): a library that
    starts threads at import would start them outside the walls, and the run would be
    refused (``before_the_walls``). A value you set yourself is kept."""
    for name in ONE_THREAD_VARIABLES:
        os.environ.setdefault(name, "1")


def before_the_walls() -> None:
    """Leave this process one thread, or refuse the run: Landlock restricts the thread
    that asks and the threads it starts afterwards, not the others already running.

    The event loop's default executor may hold threads by now (an http MCP server's
    name look-up starts them); it is replaced by a fresh one, whose threads start behind
    the walls when first needed, and the old one's threads are ended. Any other thread
    left means code that would run outside the walls: the run is refused, naming it."""
    loop = asyncio.get_running_loop()
    old = getattr(loop, "_default_executor", None)  # asyncio has no public getter
    if old is not None:
        loop.set_default_executor(
            concurrent.futures.ThreadPoolExecutor(thread_name_prefix="asyncio-walled")
        )
        ending = [t.native_id for t in getattr(old, "_threads", ())]
        old.shutdown(wait=True)  # idle by now: their look-ups were awaited
        wait_for_threads_gone(ending)
    others = _others_once_ended()
    if others > 0:
        names = sorted(t.name for t in threading.enumerate() if t is not threading.main_thread())
        names = names or _kernel_names()
        raise OSError(
            errno.EBUSY,
            f"{others} other thread(s) already run in this process "
            f"({', '.join(names) or 'not started by Python'}), and Landlock would not "
            "restrict them; a tool's module that starts a thread at import must start it "
            "later (a native library's pool, as OpenBLAS's: leave OPENBLAS_NUM_THREADS and "
            "OMP_NUM_THREADS at 1, or add the module to preload)",
        )


def _others_once_ended() -> int:
    """The other threads of this process, once those whose Python side has ended (or that
    Python never knew, and that end by themselves) have left the kernel's list: a thread
    a library started and joined (OpenTelemetry's resource detectors run in a pool) may
    still be listed a moment after its join, longer on a loaded machine. A thread Python
    runs is never waited for: it is refused at once."""
    deadline = time.monotonic() + THREAD_EXIT_WAIT_S
    while True:
        others = len(os.listdir("/proc/self/task")) - 1
        alive = [t for t in threading.enumerate() if t is not threading.main_thread()]
        if others <= 0 or alive or time.monotonic() > deadline:
            return others
        time.sleep(0.001)


def _kernel_names() -> list[str]:
    """The other threads as the kernel names them (``comm``): a native thread, or one
    whose Python side has ended, is named nowhere else."""
    names = []
    for tid in os.listdir("/proc/self/task"):
        if int(tid) != threading.get_native_id():
            try:
                with open(f"/proc/self/task/{tid}/comm") as comm:
                    names.append(f"{comm.read().strip()} (thread {tid})")
            except OSError:
                continue  # gone meanwhile
    return sorted(names)


#: The longest wait for an ended thread to leave the kernel's list of this process's.
THREAD_EXIT_WAIT_S = 5.0


def wait_for_threads_gone(native_ids: list[int | None]) -> None:
    """Until the kernel no longer lists ``native_ids`` as this process's threads: before
    3.13, a joined thread may still be there a moment (its Python side is done first)."""
    deadline = time.monotonic() + THREAD_EXIT_WAIT_S
    for tid in native_ids:
        while tid is not None and os.path.exists(f"/proc/self/task/{tid}"):
            if time.monotonic() > deadline:
                return  # the count below then names it, and the run is refused
            time.sleep(0.001)
