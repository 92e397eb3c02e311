"""What one io sub-agent's process costs against the floor of its design, measured by
``bench.run`` itself in the same run (report.py's headline and tables).

The floor is a bare ``os.fork()`` of the same template (agentcell's fork server, its
preloads, ``gc.freeze``) over its whole life: ``bench.start_cost``'s first row. The
per-phase CPU of one child (``bench.profile --phases``, an io fan-out of ``PHASES_N``)
says where an agentcell child's CPU goes; its table is printed when the ratio is above
``PROFILE_ABOVE``, and ``phases.png`` draws it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
START_COST_N = 200  # bare forks (a tick is 10 ms: the mean needs many)
PHASES_N = 32
PROFILE_ABOVE = 2.5
#: The top-level phases, which do not nest in one another: the bar chart's bars.
TOP_PHASES = (
    "harden (setsid, prctl, oom, fds, faulthandler)",
    "spare's cgroup, made before its Hello",
    "spare's temp folder and common Landlock rules, before its Hello",
    "open the pipe",
    "dill.loads of the Start's objects",
    "resolve the model",
    "build the engine (registry, hooks)",
    "enter the sandbox (all)",
    "engine.run (3 model turns + tools)",
    "reap descendants at exit",
)


def _tool(module: str, args: list[str], out: Path) -> str:
    """Run ``python -m module`` with ``--out out``; "" or why it failed, in one line."""
    try:
        done = subprocess.run(
            [sys.executable, "-m", module, *args, "--out", str(out)],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=180,
        )
    except subprocess.TimeoutExpired:
        return f"{module} took over 180 s"
    if done.returncode:
        tail = (done.stderr.strip().splitlines() or [f"exit code {done.returncode}"])[-1]
        return f"{module} failed: {tail[:200]}"
    return ""


def measure(out: Path) -> dict[str, Any]:
    """The bare fork's whole-life CPU, and one child's CPU by phase."""
    found: dict[str, Any] = {}
    error = _tool(
        "bench.start_cost", ["--n", str(START_COST_N), "--rounds", "1"], out / "start_cost"
    )
    if error:
        found["start_cost_error"] = error
    else:
        rows = json.loads((out / "start_cost" / "start_cost.json").read_text())
        found["bare_fork_life_cpu_ms"] = rows["bare"]["life_cpu_ms"]
        found["noop_child_life_cpu_ms"] = rows["agentcell"]["life_cpu_ms"]
    error = _tool("bench.profile", ["--phases", "--n", str(PHASES_N)], out / "profile")
    if error:
        found["phases_error"] = error
    else:
        summary = json.loads((out / "profile" / "summary.json").read_text())
        children = summary.get("children") or {}
        found["phases"] = children.get("phases") or []
        found["phase_child_life_cpu_ms"] = children.get("life_cpu_ms")
        found["phase_exit_cpu_ms"] = children.get("exit_cpu_ms")
        found["phase_before_target_cpu_ms"] = children.get("cpu_before_target_ms")
    return found


def figures(results: dict[str, Any], child_cpu_ms_io_128: float | None) -> dict[str, float | None]:
    """``child_cpu_x_limit_io_128``: agentcell's CPU per io sub-agent process at N=128 ÷
    the bare fork's whole-life CPU, both from this run."""
    floor = (results.get("child_cost") or {}).get("bare_fork_life_cpu_ms")
    if child_cpu_ms_io_128 is None or not floor:
        return {"child_cpu_x_limit_io_128": None}
    return {"child_cpu_x_limit_io_128": child_cpu_ms_io_128 / floor}


def bars(results: dict[str, Any]) -> list[tuple[str, float]]:
    """(phase, CPU ms) of one child, the top-level phases in order, then the part before
    the child's own code ran and its exit (what the kernel spends tearing it down)."""
    cost = results.get("child_cost") or {}
    rows = {label: cpu for label, cpu, *_ in cost.get("phases") or []}
    found = [(label.split(" (")[0], rows[label]) for label in TOP_PHASES if label in rows]
    before, after = cost.get("phase_before_target_cpu_ms"), cost.get("phase_exit_cpu_ms")
    if isinstance(before, int | float):
        found.insert(0, ("fork server → child start-up", before))
    if isinstance(after, int | float):
        found.append(("exit and reaping", after))
    return found


def section(results: dict[str, Any], ratio: float | None) -> str:
    """The report's section: the floor, the ratio, and above PROFILE_ABOVE the phase
    table of one child."""
    cost = results.get("child_cost") or {}
    lines = ["## One sub-agent process against a bare fork", ""]
    for key in ("start_cost_error", "phases_error"):
        if cost.get(key):
            lines.append(f"- not measured: {cost[key]}")
    floor = cost.get("bare_fork_life_cpu_ms")
    if floor:
        lines.append(
            f"- bare os.fork() of the template, whole life: {floor:.2f} ms CPU "
            f"(`bench.start_cost`, {START_COST_N} children); agentcell child running a noop "
            f"handler: {cost.get('noop_child_life_cpu_ms', float('nan')):.2f} ms"
        )
    if ratio is not None:
        lines.append(
            f"- io, N=128: agentcell's CPU per sub-agent process ÷ the bare fork's = {ratio:.1f}"
        )
    phases = cost.get("phases") or []
    if phases and (ratio is None or ratio > PROFILE_ABOVE):
        lines += [
            "",
            f"Above {PROFILE_ABOVE}: where one child's CPU goes (`bench.profile --phases`, io "
            f"N={PHASES_N}, mean per child; inclusive, nested rows indented; whole life "
            f"{cost.get('phase_child_life_cpu_ms') or float('nan'):.1f} ms):",
            "",
            "| phase | CPU ms | wall ms | calls | page faults |",
            "|---|---|---|---|---|",
        ]
        lines += [
            f"| {label} | {cpu:.2f} | {wall:.2f} | {calls:.1f} | {faults:.0f} |"
            for label, cpu, wall, calls, faults in phases
        ]
        for key, label in (
            ("phase_before_target_cpu_ms", "fork server → child start-up (before its code)"),
            ("phase_exit_cpu_ms", "exit and reaping (whole life − start-up − its code)"),
        ):
            if isinstance(cost.get(key), int | float):
                lines.append(f"| {label} | {cost[key]:.2f} | — | — | — |")
    return "\n".join(lines)


def plot(results: dict[str, Any], out: Path, plt: Any) -> list[str]:
    """``phases.png``: one child's CPU by phase (``bars``), beside the bare fork's life."""
    found = bars(results)
    if not found:
        return []
    floor = (results.get("child_cost") or {}).get("bare_fork_life_cpu_ms")
    labels = [label for label, _ in found]
    fig, ax = plt.subplots(figsize=(9, 0.8 + 0.38 * len(found)))
    ax.barh(labels, [ms for _, ms in found], color="tab:blue")
    if floor:
        ax.axvline(
            floor, color="k", ls="--", lw=0.8, label=f"bare fork, whole life ({floor:.2f} ms)"
        )
        ax.legend(fontsize=7, loc="lower right")
    ax.invert_yaxis()
    ax.set(
        xlabel="CPU ms per child (mean)",
        title=f"one io sub-agent process: CPU by phase (io, N={PHASES_N})",
    )
    ax.title.set_fontsize(10)
    ax.grid(True, axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(out / "phases.png", dpi=110)
    plt.close(fig)
    return ["phases.png"]
