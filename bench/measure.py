"""Measurements taken around one run: CPU of the parent and of its children, peak RSS,
memory of live sub-agent processes, and the dispatch latencies read off the server's log."""

from __future__ import annotations

import os
import resource
import statistics
import threading
from collections.abc import Iterable
from typing import Any

import psutil

_PAGE = os.sysconf("SC_PAGE_SIZE")


def cpu_self() -> float:
    """CPU seconds of this process, every thread included."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def cpu_descendants() -> float:
    """CPU seconds of this process's children and what they reaped.

    agentcell's and the floor's sub-agents are children of a fork server, which reaps
    them: their CPU lands in the fork server's ``cutime``/``cstime``, read here through
    psutil. A ProcessPoolExecutor's workers are our own children (``RUSAGE_CHILDREN``
    once reaped). Read before a run and after its processes are gone, the difference is
    what the run's child processes spent.
    """
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    total = usage.ru_utime + usage.ru_stime
    for child in psutil.Process().children():
        try:
            t = child.cpu_times()
        except psutil.Error:
            continue
        total += t.user + t.system + t.children_user + t.children_system
    return total


def cpu_direct_children() -> float:
    """CPU seconds of this process's live children themselves, without what they reaped:
    for agentcell, its fork servers' own work (forking, the spares' requests), apart from
    the sub-agents they started."""
    total = 0.0
    for child in psutil.Process().children():
        try:
            t = child.cpu_times()
        except psutil.Error:
            continue
        total += t.user + t.system
    return total


def cpu_machine() -> float:
    """Busy CPU seconds of the whole machine (every process, every core)."""
    t = psutil.cpu_times()
    return t.user + t.nice + t.system + t.irq + t.softirq + getattr(t, "steal", 0.0)


class PeakRSS:
    """Samples this process's RSS every 10 ms in a thread (reading /proc/self/statm is
    cheap enough not to disturb the run)."""

    def __init__(self) -> None:
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, name="peak-rss", daemon=True)

    def __enter__(self) -> PeakRSS:
        self.peak = rss_self()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, rss_self())

    def _sample(self) -> None:
        while not self._stop.wait(0.01):
            self.peak = max(self.peak, rss_self())


def rss_self() -> int:
    with open("/proc/self/statm", "rb") as f:
        return int(f.read().split()[1]) * _PAGE


def memory_snapshot(pids: Iterable[int]) -> dict[str, Any]:
    """RSS of this process, RSS and USS of each live sub-agent process (bytes).

    USS (memory unique to a process) is what a child really adds; its RSS also counts
    pages shared with the fork server and its siblings.
    """
    children = []
    for pid in pids:
        try:
            info = psutil.Process(pid).memory_full_info()
        except psutil.Error:
            continue  # ended between listing and reading
        children.append([info.rss, info.uss])
    return {"parent_rss": rss_self(), "children": children}


def dispatch_latencies(log: dict[str, Any]) -> list[float]:
    """Seconds from the end of the main agent's first reply (its task calls) to each
    sub-agent's first request, from the server's own clock."""
    rows = log.get("requests") or []
    sent = [row[1] for row in rows if row[2] == "main" and row[3] == 0]
    if not sent:
        return []
    first: dict[str, float] = {}
    for arrival, _done, role, *_ in rows:
        if role != "main" and (role not in first or arrival < first[role]):
            first[role] = arrival
    return sorted(t - sent[0] for t in first.values())


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0–100) by linear interpolation; NaN for no values."""
    if not values:
        return float("nan")
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[min(98, max(0, int(q) - 1))]
