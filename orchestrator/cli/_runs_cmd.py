"""``agentcell runs list|show``."""

from __future__ import annotations

import json
from pathlib import Path

import click
from agentcell.orchestrator._records import list_runs, load_run
from rich.console import Console
from rich.table import Table


def list_recorded(workdir: Path, *, as_json: bool) -> None:
    runs = list_runs(workdir)
    if as_json:
        click.echo(json.dumps(runs, indent=2))
        return
    if not runs:
        click.echo(f"no recorded runs under {workdir / '.agentcell' / 'runs'}")
        return
    table = Table(box=None, pad_edge=False)
    for column in ("run", "status", "time", "sub-agents", "tokens", "prompt"):
        table.add_column(column, no_wrap=column != "prompt", overflow="ellipsis")
    for run in runs:
        seconds = run.get("duration_ms", 0) / 1000
        table.add_row(
            run["run_id"],
            run.get("status", "?"),
            f"{seconds:.1f}s" if seconds else "",
            str(len(run.get("subagents", []))),
            str(
                run.get("usage", {}).get("input_tokens", 0)
                + run.get("usage", {}).get("output_tokens", 0)
            ),
            (run.get("prompt") or "").splitlines()[0][:60] if run.get("prompt") else "",
        )
    Console(highlight=False).print(table)


def show_recorded(workdir: Path, run_id: str, *, as_json: bool) -> None:
    summary, transcripts = load_run(workdir, run_id)
    if as_json:
        click.echo(json.dumps({"summary": summary, "transcripts": transcripts}, indent=2))
        return
    console = Console(highlight=False)
    console.print(f"[bold]run {summary['run_id']}[/bold]: {summary.get('status', '?')}")
    if summary.get("prompt"):
        console.print(f"prompt: {summary['prompt']}", markup=False)
    if summary.get("model"):
        console.print(f"model: {summary['model']}", markup=False)
    for sub in summary.get("subagents", []):
        line = (
            f"  {sub['agent_id']:>4} {sub['agent_type']:<16} {sub['status']:<10} "
            f"{sub['turns']} turns, {sub['tool_calls']} tool calls, "
            f"{sub['duration_ms'] / 1000:.1f} s"
        )
        if sub.get("error"):
            line += f" — {sub['error']}"
        console.print(line, markup=False)
    for agent_id, lines in transcripts.items():
        tools = [
            ln["event"]["name"]
            for ln in lines
            if ln.get("kind") == "event" and ln["event"].get("kind") == "tool_start"
        ]
        called = ", ".join(tools) or "none"
        console.print(f"\n[bold]{agent_id}[/bold]: {len(lines)} records; tools called: {called}")
    if summary.get("final_text"):
        console.print("\n[bold]final answer[/bold]")
        console.print(summary["final_text"], markup=False)
