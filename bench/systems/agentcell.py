"""agentcell itself: the public ``Orchestrator`` API, one child process per sub-agent."""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from agentcell.orchestrator import AgentActivity, AgentDefinition, Orchestrator, Settings
from agentcell.orchestrator.backends._forkserver import WorkerPool
from agentcell.orchestrator.config._mcp import McpServerConfig
from agentcell.orchestrator.config._settings import ProviderLimits
from agentcell.orchestrator.journal._file import encode_record, read_journal
from agentcell.orchestrator.journal._place import JOURNAL_FILE, journal_dir
from agentcell.protocol import TextDelta

from bench import analysis
from bench.script import Spec
from bench.systems._base import (
    WORKER_DESCRIPTION,
    Options,
    Outcome,
    System,
    outcome,
    worker_prompt,
)
from bench.systems._engine_tools import TOOLS


class Agentcell(System):
    name = "agentcell"
    packages = ("agentcell", "multiprocess", "msgspec", "httpx")
    processes = True

    def __init__(self) -> None:
        self.orch: Orchestrator | None = None
        self.pool: WorkerPool | None = None
        self.workdir = ""
        self.options = Options()
        self.journals: list[Path] = []
        self.run_dir: Path | None = None  # the last run's records (record on)
        self.events = 0
        self.chars = 0

    def settings(self, n: int, options: Options) -> Settings:
        settings = Settings(
            model="openai:bench",
            approval="allow",
            max_workers=max(1, n),
            max_turns=8,
            subagent_max_turns=16,
            # The bench's own tool module, imported once in the fork server instead of in
            # every child (README "Preloading your tools' modules"): what a user with
            # custom tools is told to do.
            preload=["bench.tools"],
        )
        # A wide fan-out raises the run's sub-agent budget, as its user would in the
        # configuration ([budgets] max_subagents, 256 by default).
        budget = settings.budgets.max_subagents
        if budget is not None and n > budget:
            settings.budgets.max_subagents = n
        if options.warm is not None:
            settings.warm_spares = options.warm
        settings.call_ahead = options.call_ahead
        if options.limits:
            settings.limits = {"openai": ProviderLimits(**options.limits)}  # type: ignore[arg-type]
        return settings

    async def open(self, n: int, options: Options) -> None:
        self.workdir = tempfile.mkdtemp(prefix="agentcell-bench-")
        self.options = options
        settings = self.settings(n, options)
        tools = [tool.name for tool in TOOLS]
        if options.analysis:  # its built-in file tools, over the tree in its workdir
            analysis.corpus_into(self.workdir)
            tools = list(analysis.TOOL_NAMES)
        servers = mcp_servers(options.mcp)
        settings.mcp_servers = servers
        worker = AgentDefinition(
            name="worker",
            description=WORKER_DESCRIPTION,
            system_prompt=worker_prompt(options),
            tools=[*tools, *(f"mcp__{name}__echo" for name in servers)],
            model="inherit",
            mcp_servers=list(servers),
        )
        self.pool = None
        self.orch = Orchestrator(
            settings=settings,
            workdir=self.workdir,
            load_agent_files=False,
            record=options.record,
            agents=[worker],
            tools=TOOLS,
            pool=self.pool,
        )
        # The internal switch the journal workload measures it by (records stay on).
        self.orch._calls.journaled = options.journal
        await self.orch.__aenter__()
        if options.count_events:
            self.orch.bus.subscribe(self._on_event)
        await self.warm_up(settings)

    async def warm_up(self, settings: Settings) -> None:
        assert self.orch is not None
        # The starting line of a long-lived parent: the warm spares are up, and the fork
        # server has forked before (its first fork costs ~0.1 s more than later ones, and
        # without spares the run would pay it).
        await self.orch.pool.warmed()
        # And its shared MCP servers, started when it opened, are up (as its spares are).
        await self.orch.runner.shared_mcp.started()
        if settings.warm_spares == 0:
            lease = await self.orch.pool.acquire()
            await lease.release()

    def _on_event(self, event: Any) -> None:
        if (
            isinstance(event, AgentActivity)
            and event.agent_id != "main"
            and isinstance(event.event, TextDelta)
        ):
            self.events += 1
            self.chars += len(event.event.text)

    async def run(self, spec: Spec) -> Outcome:
        assert self.orch is not None
        self.events = self.chars = 0
        report = await self.orch.run(spec.prompt())
        answers = [r.text if r.ok else f"{r.status.value}: {r.error}" for r in report.subagents]
        result = outcome(spec.n, answers, main_ok=report.ok, detail=report.error)
        result.events, result.chars = self.events, self.chars
        self.run_dir = Path(report.run_dir) if self.options.record and report.run_dir else None
        if self.run_dir is not None:
            self.journals.append(journal_dir(self.run_dir))  # removed at close
        return result

    def after_run(self) -> dict[str, Any]:
        # Read after the clock: the journal's figures are the bench's, not the run's.
        return journal_figures(self.run_dir) if self.run_dir is not None else {}

    async def close(self) -> None:
        if self.orch is not None:
            await self.orch.aclose()
            self.orch = None
        if self.pool is not None:
            await self.pool.close()
            self.pool = None
        shutil.rmtree(self.workdir, ignore_errors=True)
        for folder in self.journals:
            shutil.rmtree(folder, ignore_errors=True)
        self.journals.clear()

    def child_pids(self) -> list[int]:
        return self.orch.pool.pids() if self.orch is not None else []


def journal_figures(run_dir: Path) -> dict[str, Any]:
    """The run's journal: its bytes, its model turns (relayed requests), and the mean
    bytes a request's record takes by the sub-agent's turn (1st, 2nd, …): flat when each
    record holds what the turn added, growing when it held the history."""
    path = journal_dir(run_dir) / JOURNAL_FILE
    if not path.is_file():
        return {"journal_bytes": 0, "journal_turns": 0}
    records = read_journal(path).records
    by_turn: dict[int, list[int]] = {}
    turns: dict[str, int] = {}
    for record in records:
        if record["k"] == "ask":
            turn = turns[record["agent"]] = turns.get(record["agent"], 0) + 1
            fields = {k: v for k, v in record.items() if k != "k"}
            by_turn.setdefault(turn, []).append(len(encode_record("ask", fields)))
    return {
        "journal_bytes": path.stat().st_size,
        "journal_turns": sum(turns.values()),
        "journal_ask_bytes_by_turn": [
            sum(sizes) / len(sizes) for _, sizes in sorted(by_turn.items())
        ],
    }


#: The project's own stdio test server: ``--start-delay`` makes it as slow to start as a
#: real one launched by npx or uvx (a second), so that a start per sub-agent would show.
MCP_SERVER = Path(__file__).resolve().parents[2] / "tests" / "support" / "mcp_server.py"
MCP_START_DELAY_S = 1.0


def mcp_servers(count: int) -> dict[str, McpServerConfig]:
    """``count`` shared servers for the mcp workload (``slow1``, ``slow2``, …)."""
    args = [str(MCP_SERVER), "--start-delay", str(MCP_START_DELAY_S)]
    return {
        f"slow{k}": McpServerConfig(command=sys.executable, args=args) for k in range(1, count + 1)
    }
