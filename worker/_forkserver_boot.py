"""Imported once, by the fork server, as the last module of its preload list.

It records which preloaded modules really loaded (preload failures are silent in
multiprocess) and arms the last link of the death chain: when the orchestrator dies the
fork server sees EOF on its "alive" pipe and exits; on that exit this module kills every
session its children lead, so tool subprocesses go too. The children themselves die by
``PR_SET_PDEATHSIG`` when the fork server goes.

Never import this module anywhere else: a child notices (``BOOT_PID`` is its own pid)
that it was not inherited from the fork server, which means preloading failed.
"""

from __future__ import annotations

import atexit
import gc
import warnings
import os
import sys

from worker import _proc
from worker._preload import PRELOAD_MODULES

BOOT_PID = os.getpid()

#: Modules of the preload list that did not load in the fork server.
MISSING_PRELOAD: list[str] = [m for m in PRELOAD_MODULES if m not in sys.modules]


def _kill_children_sessions() -> None:
    if os.getpid() != BOOT_PID:  # a forked child that somehow ran atexit
        return
    me = str(BOOT_PID)
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rindex(b")") + 2 :].split()
        if fields[1].decode() == me:
            _proc.kill_session(int(entry))


atexit.register(_kill_children_sessions)

# Orphans of a child that died abruptly (a tool's daemon that left its session, say) are
# reparented here rather than to init, so the exit hook above still finds them; the fork
# server reaps them, and its warning about pids it did not fork is expected, not news.
_proc.set_child_subreaper()
warnings.filterwarnings("ignore", message="forkserver: waitpid returned unexpected pid")

# Children inherit these objects; keeping them out of the collector's reach stops a
# child's first garbage collection from touching (and so copying) every shared page.
gc.freeze()
