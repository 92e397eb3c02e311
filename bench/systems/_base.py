"""The interface every system under test implements, and what a run of it returns."""

from __future__ import annotations

import dataclasses
import tempfile
from importlib import metadata
from typing import Any, ClassVar

from bench import analysis
from bench.script import Spec

MAIN_PROMPT = "You are the main agent of a benchmark. Delegate every job with your task tool."
WORKER_PROMPT = "You are a benchmark worker. Use your tool as asked, then report."
WORKER_DESCRIPTION = "Runs one benchmark job and reports."


@dataclasses.dataclass(slots=True)
class Options:
    warm: int | None = None  # agentcell: warm spare processes (None: its default)
    count_events: bool = False  # count the sub-agents' text deltas reaching the parent
    limits: dict[str, float] | None = None  # agentcell: its provider limiter ([limits.openai])
    prestart: bool = False  # ProcessPoolExecutor: start every worker before the clock
    analysis: bool = False  # the analysis workload: file tools over a source tree
    call_ahead: bool = False  # agentcell: first model requests sent while processes start
    record: bool = True  # agentcell: run records and journal, on as shipped
    journal: bool = True  # agentcell, with records: journal the run (off: its cost measured)
    mcp: int = 0  # agentcell: shared MCP servers its sub-agents call (the mcp workload)


@dataclasses.dataclass(slots=True)
class Outcome:
    ok: bool  # the main agent answered and every sub-agent completed
    completed: int  # sub-agents that completed
    detail: str = ""  # why not ok
    events: int = 0  # sub-agent text events handled by the parent (count_events)
    chars: int = 0  # the text they carried
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)  # more fields of its row


def worker_prompt(options: Options) -> str:
    """The sub-agents' system prompt: the analysis workload's project guide, or the
    one-liner of the others."""
    return analysis.guide() if options.analysis else WORKER_PROMPT


def analysis_tree(options: Options) -> str:
    """For the analysis workload, a fresh folder holding the source tree (the peers'
    file tools read it; agentcell's tools read their working directory); else ""."""
    if not options.analysis:
        return ""
    folder = tempfile.mkdtemp(prefix="agentcell-bench-tree-")
    analysis.corpus_into(folder)
    analysis.set_root(folder)
    return folder


class System:
    """One way of running a main agent that fans out to sub-agents."""

    name: ClassVar[str]
    #: Packages whose versions are recorded with the results.
    packages: ClassVar[tuple[str, ...]] = ()
    #: Sub-agents run in child processes (their memory is sampled per child).
    processes: ClassVar[bool] = False
    #: Why the events workload cannot be measured for this system ("" if it can).
    no_events: ClassVar[str] = ""

    def available(self) -> str:
        """Why this system cannot run here ("" if it can)."""
        return ""

    async def open(self, n: int, options: Options) -> None:
        """Set up for runs of fan-out ``n`` (not timed)."""

    async def run(self, spec: Spec) -> Outcome:
        """One main-agent run of ``spec`` (timed)."""
        raise NotImplementedError

    def after_run(self) -> dict[str, Any]:
        """More fields of the last run's row, read once its clock has stopped."""
        return {}

    async def close(self) -> None:
        """Tear down what ``open`` set up (not timed)."""

    def child_pids(self) -> list[int]:
        """Live processes running sub-agents (for memory samples)."""
        return []

    def versions(self) -> dict[str, str]:
        found = {}
        for package in self.packages:
            try:
                found[package] = metadata.version(package)
            except metadata.PackageNotFoundError:
                found[package] = "not installed"
        return found


def outcome(n: int, answers: list[str], *, main_ok: bool = True, detail: str = "") -> Outcome:
    """An ``Outcome`` from the sub-agents' answers (the script's answers start with "job")."""
    completed = sum(1 for text in answers if text.lstrip().startswith("job "))
    ok = main_ok and completed == n
    if not ok and not detail:
        bad = [text for text in answers if not text.lstrip().startswith("job ")]
        detail = f"{completed}/{n} sub-agents completed" + (
            f"; e.g. {bad[0][:300]!r}" if bad else ""
        )
    return Outcome(ok=ok, completed=completed, detail=detail)
