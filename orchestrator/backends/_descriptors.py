"""File descriptors for a pool's children: the soft ``RLIMIT_NOFILE`` raised to fit.

The parent holds about ``PER_WORKER`` descriptors for each live child (its pipe's end,
its process sentinel, and the model connection it relays for it) besides ``RESERVE`` of
its own (stdio, the fork servers, the event loop, logs, the journal, MCP servers). A
common soft limit of 1024 therefore runs out near 250 children. At start the pool
raises the soft limit (up to the hard limit, which an unprivileged process may do) when
``max_workers`` needs more; when even the hard limit is too low, it runs fewer children
at once and says so in one warning, naming the limit and the fix.
"""

from __future__ import annotations

import logging
import resource

log = logging.getLogger("agentcell.pool")

PER_WORKER = 3
RESERVE = 256


def needed(max_workers: int) -> int:
    """Descriptors a parent running ``max_workers`` children at once may hold."""
    return RESERVE + PER_WORKER * max_workers


def workers_that_fit(max_workers: int) -> int:
    """``max_workers``, after raising the soft descriptor limit to fit it if needed; or
    the children that the hard limit leaves room for (at least one), with a warning."""
    want = needed(max_workers)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= want:
        return max_workers
    # Up to the hard limit (or just what is needed, where the hard limit is unlimited:
    # some systems refuse an unlimited soft limit).
    raised = want if hard == resource.RLIM_INFINITY else hard
    if raised > soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (raised, hard))
            soft = raised
        except (ValueError, OSError):  # a sandbox may refuse it: the limit stays
            pass
    if soft >= want:
        log.info(
            "raised the open-file limit (RLIMIT_NOFILE) to %d for %d workers", soft, max_workers
        )
        return max_workers
    fit = max(1, (soft - RESERVE) // PER_WORKER)
    log.warning(
        "max_workers=%d needs about %d open files but the limit (RLIMIT_NOFILE) is %d: "
        "running at most %d sub-agents at once; raise it (ulimit -n %d) to run all %d",
        max_workers,
        want,
        soft,
        fit,
        want,
        max_workers,
    )
    return fit
