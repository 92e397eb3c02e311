"""Process targets for ``bench.start_cost`` (a module of their own: the child imports
them by name, as it does agentcell's own target, rather than receiving them by value).

Every probe writes one fixed-size record per child: the monotonic clock when the child
first ran Python code of ours, and its CPU and minor page faults so far (``CLOCK_MONOTONIC``
is one clock for every process of the machine, so a parent's timestamp before the start
and a child's at its first line can be subtracted).
"""

from __future__ import annotations

import os
import resource
import struct
import time
from typing import Any

#: t_ns, user_us, system_us, minor faults
RECORD = struct.Struct("<qqqq")


def snapshot() -> bytes:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return RECORD.pack(
        time.monotonic_ns(),
        int(usage.ru_utime * 1e6),
        int(usage.ru_stime * 1e6),
        usage.ru_minflt,
    )


def report_start(conn: Any) -> None:
    """The multiprocess forkserver path: the target's first line, then leave at once."""
    conn.send_bytes(snapshot())
    os._exit(0)


def bare_forks(conn: Any, n: int) -> None:
    """A template for bare ``os.fork()`` starts: this process is a forkserver child (a copy
    of the same warmed fork server); it forks ``n`` children one after the other, each
    writing its first-line record and leaving, and reports per child: the fork time, the
    child's record and its whole-life CPU and faults (``wait4``)."""
    read_end, write_end = os.pipe()
    out = []
    for _ in range(n):
        t0 = time.monotonic_ns()
        pid = os.fork()
        if pid == 0:
            os.write(write_end, snapshot())
            os._exit(0)
        record = os.read(read_end, RECORD.size)
        _, _, usage = os.wait4(pid, 0)
        t_end = time.monotonic_ns()
        life = (int(usage.ru_utime * 1e6), int(usage.ru_stime * 1e6), usage.ru_minflt)
        out.append((t0, *RECORD.unpack(record), t_end, *life))
    conn.send(out)
    os._exit(0)
