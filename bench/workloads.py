"""The workloads: what each sub-agent does, which systems run it, and its ideal time."""

from __future__ import annotations

import dataclasses
from typing import Any

from bench.analysis import FILES
from bench.systems import SYSTEMS

RAY = "agentcell (ray)"
ALL = [name for name in SYSTEMS if name != RAY]  # Ray runs only where a row says so
PEERS = ["deepagents", "openai-agents", "pydantic-ai"]
# One actor (a fresh Ray worker process) per sub-agent: on 2 cores, N=128 would take
# minutes. The Ray rows stop at 32 sub-agents (about a minute a workload there), and run
# in --full only: the quick run must stay under 10 minutes.
RAY_ROWS = ((RAY, "", {"max_n": 32, "timeout_s": 120.0}),)
# The rate-limited server: K requests in flight, R per second. agentcell's limiter is
# set a little under it, as one would for a real account (clocks and latencies differ).
RL_K = 8
RL_RPS = 40.0
RL_LIMITS = {"max_concurrent": RL_K, "requests_per_minute": RL_RPS * 60 * 0.9}
#: The analysis workload's model turns per sub-agent (nine file-tool calls, then an answer).
ANALYSIS_TURNS = 10
#: A system name the run replaces by the peer fastest at io N=128 in that same run.
FASTEST_PEER = "the fastest peer at io N=128"
#: The wide fan-out: Claude Code's workflows run up to 1,000 agents per run.
WIDE_N = 1000
#: Runs of each headline cell (N in ``headline_ns``), interleaved across the systems
#: that decide its ratio: the first sweep, then ``HEADLINE_RUNS - 1`` rounds more.
HEADLINE_RUNS = 3


@dataclasses.dataclass(frozen=True)
class Workload:
    name: str
    title: str
    what: str  # one paragraph for the report
    systems: list[str]
    spec: dict[str, Any]  # bench.script.Spec fields (run and n are set per run)
    variants: tuple[tuple[str, dict[str, Any]], ...] = (("", {}),)  # (label, job fields)
    extra: tuple[tuple[str, str, dict[str, Any]], ...] = ()  # (system, label, job fields)
    memory: bool = False
    count_events: bool = False
    # Per run; a run that takes longer is a failed row. Far above the slowest system's
    # time here (~5 s), and low enough that a hung run does not eat the quick budget.
    timeout_s: float = 30.0
    tls: bool = False  # the model over HTTPS (the load server's TLS port, its test CA)
    quick_ns: tuple[int, ...] = (1, 8, 32, 128)
    full_ns: tuple[int, ...] = (1, 8, 32, 128, 256)
    # Above 1: the variants run this many times each, interleaved (a, b, a, b, …), one
    # runner each, so that a pair's two runs see the same machine.
    pairs: int = 1
    # The N of this workload's headline ratios (agentcell ÷ the fastest peer): after the
    # sweep, agentcell and the peers near the fastest run these N again, interleaved,
    # until each has HEADLINE_RUNS runs there (the headline takes their median).
    headline_ns: tuple[int, ...] = ()

    def ideal_s(self, n: int, latency_s: float, tool_s: float, cores: int) -> float:
        """The wall time with free dispatch and unlimited client CPU: the model turns of
        the main agent (2) and of one sub-agent, its streamed answer, and for the cpu
        workload every crunch spread over the cores (one crunch cannot be split)."""
        spec = self.spec
        lat = float(spec.get("lat", latency_s * 1000)) / 1000
        ideal = (int(spec.get("turns", 3)) + 2) * lat
        if spec.get("tps", 0) > 0:
            ideal += spec.get("answer", 4) / spec["tps"]
        if spec.get("tool") == "crunch":
            ideal += -(-n // cores) * tool_s
        return ideal


def workloads(latency_ms: float, quick: bool) -> list[Workload]:
    """Every workload of a run; in --quick, the events workload is left out and the
    baselines (ProcessPoolExecutor, raw floor) run in io only, so that the quick run
    stays under 10 minutes on 2 cores with its medians of 3 and its 1,000 sub-agents."""
    found = _workloads(latency_ms, quick)
    return [w for w in found if w.name != "events"] if quick else found


def _workloads(latency_ms: float, quick: bool) -> list[Workload]:
    lat = latency_ms
    ray_rows = () if quick else RAY_ROWS
    io = {"turns": 3, "tool": "probe", "lat": lat}
    beside = ["agentcell", "in-process engine", *PEERS] if quick else ALL
    return [
        Workload(
            name="io",
            title="io: sub-agents waiting on the model",
            what=(
                f"Each sub-agent makes 3 model turns of {lat:g} ms (two trivial tool calls, then an"
                " answer); the main agent makes 2. Ideal wall time: 5 × latency."
            ),
            systems=ALL,
            spec=io,
            extra=(
                *ray_rows,
                # Its workers started before the clock, like agentcell's spares: pool
                # start-up on the same side of the timed region for both.
                ("ProcessPoolExecutor", "workers started before", {"prestart": True}),
                # Each sub-agent's first model request sent while its process starts.
                ("agentcell", "call ahead", {"call_ahead": True}),
                # What agentcell's run records and journal (on as shipped) cost.
                ("agentcell", "records off", {"record": False}),
            ),
            headline_ns=(32, 128),
        ),
        Workload(
            name="io-1000",
            title=f"io-{WIDE_N}: {WIDE_N:,} sub-agents at once",
            what=(
                f"The io workload at N={WIDE_N:,}: agentcell with max_workers = {WIDE_N:,} (its "
                "soft open-file limit raised to fit), and the peer fastest at io N=128 in this "
                "run (and the next fastest, should that one fail it). Every result delivered "
                "is counted; the parent's peak RSS and the dispatch wait (the main reply's end "
                "→ each sub-agent's first model request) are given."
            ),
            systems=["agentcell", FASTEST_PEER],
            spec=io,
            quick_ns=(WIDE_N,),
            full_ns=(WIDE_N,),
            timeout_s=90.0,
        ),
        Workload(
            name="https-io",
            title="https-io: the io workload over HTTPS",
            what=(
                "The io workload against the load server's TLS port (a trustme test CA that every "
                "system trusts through SSL_CERT_FILE): every new connection pays a TLS handshake, "
                "as against a real API."
            ),
            systems=beside,
            spec=io,
            tls=True,
            quick_ns=(32,),  # the headline's N; the quick run must stay under 10 minutes
            full_ns=(8, 32, 128),
            headline_ns=(32,),
        ),
        Workload(
            name="ratelimit",
            title=f"ratelimit: a provider admitting {RL_K} in flight and {RL_RPS:g} requests/s",
            what=(
                f"The io workload at N=32 against a server that answers 429 with Retry-After past "
                f"{RL_K} concurrent requests or {RL_RPS:g} per second (a token bucket). Wall time "
                "and the 429s each system provoked; agentcell with and without its provider "
                f"limiter ([limits.openai] max_concurrent={RL_K}, requests_per_minute at 90% of "
                "the server's rate)."
            ),
            systems=["agentcell", "in-process engine", *PEERS],
            spec={**io, "rl_k": RL_K, "rl_rps": RL_RPS},
            extra=(("agentcell", "limiter", {"limits": RL_LIMITS}),),
            quick_ns=(32,),
            full_ns=(32, 128),
            timeout_s=60.0,
        ),
        Workload(
            name="analysis",
            title="analysis: sub-agents reading a real source tree",
            what=(
                f"Each sub-agent makes {ANALYSIS_TURNS} model turns of {lat:g} ms: glob, grep and "
                "seven read_file calls over a copy of this repository's worker/ package (a fixed "
                "commit), then an answer; its system prompt is an 18.6 KB project guide, so "
                "every request carries 20–40 KB (the second table: the sub-agents' request "
                "bodies as the server received them). agentcell and the in-process engine use "
                "agentcell's built-in read_file/grep/glob; the peers plain Python functions doing "
                f"the same reads. Ideal wall time: {ANALYSIS_TURNS + 2} × latency."
            ),
            systems=["agentcell", "in-process engine", *PEERS],
            spec={"turns": ANALYSIS_TURNS, "tool": FILES, "lat": lat},
            quick_ns=(1, 8, 32),
            full_ns=(1, 8, 32, 128),
            headline_ns=(32,),
            # On a loaded 2-core machine the peers took 7–19 s at N=32 and pydantic-ai 82 s
            # at N=128 (--full): their client CPU per 30 KB request grows the queue.
            timeout_s=150.0,
        ),
        Workload(
            name="cpu",
            title="cpu: sub-agents running a CPU-heavy tool",
            what=(
                "Each sub-agent calls `crunch` once (a regex over a generated 3 MiB corpus, "
                "holding the GIL) and answers. Ideal: 4 model turns plus ⌈N / cores⌉ crunches."
            ),
            systems=beside,
            spec={"turns": 2, "tool": "crunch", "lat": lat},
            quick_ns=(1, 8),
            full_ns=(1, 8, 32, 128),
            timeout_s=60.0,
        ),
        Workload(
            name="dispatch",
            title="dispatch: from the task call to the sub-agent's first model request",
            what=(
                "Server clock: from the end of the main agent's reply carrying the N task calls to"
                " each sub-agent's first request. agentcell with a warm spare process per"
                " sub-agent (started before the run) and with none."
            ),
            systems=["agentcell"],
            spec={"turns": 1, "tool": "probe", "lat": lat},
            variants=(
                ("warm spares", {"warm": "n"}),
                ("no spares", {"warm": 0}),
                ("call ahead", {"call_ahead": True}),
            ),
            extra=ray_rows,
        ),
        Workload(
            name="memory",
            title="memory: while all N sub-agents are alive",
            what=(
                "The io workload, except that the server holds every sub-agent's first reply until"
                " all N have asked for one; then the parent's RSS and each sub-agent process's RSS"
                " and USS are read. MiB per sub-agent = (parent RSS growth + Σ child USS) / N."
            ),
            systems=beside,
            spec={"turns": 3, "tool": "probe", "lat": lat, "hold": 1},
            memory=True,
            timeout_s=20.0,
        ),
        Workload(
            name="journal",
            title="journal: what journaling a run costs",
            what=(
                "The io workload at N=128 with run records on, with the run's journal (every "
                "relayed request as a delta, every answer, every sub-agent's start and result) "
                "and without it (an internal switch), 5 interleaved pairs: the wall of each, "
                "their ratio's median, and the journal's bytes per model turn, by turn."
            ),
            systems=["agentcell"],
            spec=io,
            variants=(
                ("records only", {"record": True, "journal": False}),
                ("journal", {"record": True, "journal": True}),
            ),
            quick_ns=(128,),
            full_ns=(128,),
            pairs=5,
        ),
        Workload(
            name="mcp",
            title="mcp: a fan-out whose sub-agents use MCP servers",
            what=(
                "The io workload at N=32 whose two tool calls go to two MCP servers (the "
                "project's own stdio test server, each started with a 1 s delay, as npx- and "
                "uvx-launched servers take), shared: started once when the orchestrator "
                "opens, called through the parent. Against the same run with the bench's "
                "own tool and no server, 3 interleaved pairs: the wall of each and the median "
                "of their ratio (the servers' start counts in the start-up, as the spares')."
            ),
            systems=["agentcell"],
            spec={"turns": 3, "tool": "mcp", "lat": lat},
            variants=(("no MCP", {"mcp": 0}), ("shared MCP", {"mcp": 2})),
            quick_ns=(32,),
            full_ns=(32,),
            pairs=3,
        ),
        Workload(
            name="messages",
            title="messages: how soon a message reaches a busy sub-agent",
            what=(
                "The main agent starts N sub-agents in the background by name; each runs a "
                "200 ms tool, again and again, until its message has come. Once all have "
                "asked for their first reply, the main agent messages them all (send_message "
                "to *). "
                "A message's latency: the arrival at the model server of the recipient's "
                "request carrying it, minus the later of its sending and the end of the tool "
                "the recipient was running. Target: p50 ≤ 50 ms at N=8 and N=32."
            ),
            systems=["agentcell"],
            spec={"turns": 2, "tool": "hold", "lat": lat, "msg": 1},
            quick_ns=(8, 32),
            full_ns=(8, 32),
        ),
        Workload(
            name="events",
            title="events: sub-agents streaming many small deltas",
            what=(
                "Each sub-agent answers at once with a stream of 400 one-token deltas at 4000 "
                "tokens/s; the parent counts the text events it handles."
            ),
            systems=["agentcell", "in-process engine", *PEERS],
            spec={"turns": 1, "tool": "probe", "lat": lat, "tps": 4000, "answer": 400},
            count_events=True,
            quick_ns=(1, 8, 32),
            full_ns=(1, 8, 32, 128),
        ),
    ]
