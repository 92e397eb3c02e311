"""What the command line prints after a run: the answer (or JSON), the table, the last line."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import click
from agentcell.orchestrator._main_run import report_json
from agentcell.orchestrator._orchestrator import Orchestrator, RunReport
from agentcell.orchestrator._text import literal, visible
from agentcell.orchestrator.cli._agents_cmd import mode_diagnostics
from agentcell.orchestrator.cli._display import results_table
from agentcell.orchestrator.telemetry._usage_text import usage_split
from agentcell.worker import Redactor


def emit_report(
    report: RunReport,
    console: Any,
    *,
    as_json: bool,
    quiet: bool,
    prompt: str = "",
    model: str = "",
    answer_shown: bool = False,
    extra: dict[str, Any] | None = None,
) -> None:
    """``answer_shown``: the answer has been streamed to stdout already; ``extra``: more
    fields for the JSON object."""
    redact = Redactor.from_env()
    if as_json:
        shown = {**report_json(report, prompt=prompt, model=model), **(extra or {})}
        click.echo(redact(json.dumps(shown, indent=2)))
    elif report.final_text and not answer_shown:
        click.echo(visible(redact(report.final_text)))
    if quiet and not as_json and not report.ok:
        # --quiet drops progress, not the reason a run failed (JSON carries it already)
        failed = f"agentcell: {report.status.value}: {redact(report.error or 'no answer')}"
        console.print(literal(failed, style="red"), highlight=False)
    if not quiet:
        if report.subagents:
            console.print()
            console.print(results_table(report.subagents, width=console.width))
        status = report.status.value
        line = (
            f"\n{status} in {report.duration_ms / 1000:.1f} s · {report.usage.total_tokens} tokens"
            f" ({usage_split(report.usage)})"
        )
        if report.cost_usd is not None:
            line += f" · ${report.cost_usd:.4f}"
        if report.run_dir:
            line += f" · record: {report.run_dir}"
        console.print(literal(line, style="green" if report.ok else "red"), highlight=False)
        if not report.ok and report.error:
            console.print(literal(f"  {redact(report.error)}", style="red"), highlight=False)


def print_diagnostics(orch: Orchestrator, console: Any, left_out: Sequence[str] = ()) -> None:
    """What ``run`` and ``chat`` say about the agent files, one line each: only what
    leaves an agent out or lets it do less than its file says (``agents validate``
    says the rest), then the agents left out for want of a model."""
    found = [d for d in orch.registry.diagnostics if d.at_run]
    found += mode_diagnostics(orch.registry, orch.settings, orch.workdir)
    for diagnostic in found:
        console.print(
            literal(f"agentcell: {diagnostic.level}: {diagnostic}", style="yellow"),
            highlight=False,
            soft_wrap=True,  # one line, however wide: a terminal wraps it, a pipe keeps it
        )
    for line in left_out:
        console.print(literal(f"agentcell: warning: {line}", style="yellow"), soft_wrap=True)
