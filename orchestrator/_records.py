"""Run records on disk: ``<workdir>/.agentcell/runs/<run-id>/``.

Each run directory holds ``summary.json`` (the same object ``agentcell run --json``
prints), ``main.jsonl`` and one ``<agent-id>.jsonl`` per sub-agent (written by the
sub-agent's own process), and ``tool-outputs/`` for long tool outputs.
"""

from __future__ import annotations

import json
import os
import secrets
import time
from pathlib import Path
from typing import Any

import msgspec
from agentcell.orchestrator.delegation import SubAgentResult
from agentcell.protocol import Message
from agentcell.worker import Redactor, real_folder

RUNS_DIR = Path(".agentcell") / "runs"


def new_run_dir(workdir: Path) -> Path:
    """A fresh run directory. Its id sorts in creation order (to the millisecond: the
    first three hex digits of the suffix), so runs made in the same second list right."""
    while True:
        now = time.time()
        ms = int(now * 1000) % 1000
        run_id = time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
        path = workdir / RUNS_DIR / f"{run_id}-{ms:03x}{secrets.randbelow(16):x}"
        # Real folders beneath the workdir (0700): a repository's .agentcell/runs that is a
        # link (to $HOME, say) raises OutsideRoot naming it, never takes the records.
        os.close(real_folder(workdir, path.parent, create=True))
        try:
            path.mkdir()
        except FileExistsError:
            continue  # the same millisecond and the same last digit: draw again
        return path


def subagent_json(result: SubAgentResult) -> dict[str, Any]:
    return {
        "agent_id": result.agent_id,
        "agent_type": result.agent_type,
        "description": result.description,
        "status": result.status.value,
        "final_text": result.text,
        "error": result.error,
        "usage": msgspec.to_builtins(result.usage),
        "cost_usd": result.cost_usd,
        "model": result.model,
        "duration_ms": round(result.duration_ms, 1),
        "queued_ms": round(result.queued_ms, 1),
        "turns": result.turns,
        "tool_calls": result.tool_calls,
        "pid": result.pid,
        "node": result.node,
        "peak_rss_bytes": result.peak_rss_bytes,
        "exit_code": result.exit_code,
        "signal": result.signal,
        "background": result.background,
        "depth": result.depth,
        "worktree": result.worktree,
        "branch": result.branch,
        "commit": result.commit,
        "diff_stat": result.diff_stat,
        "sandbox": result.sandbox,
    }


def write_summary(run_dir: Path, summary: dict[str, Any]) -> None:
    tmp = run_dir / "summary.json.tmp"
    tmp.write_text(Redactor.from_env()(json.dumps(summary, indent=2)) + "\n")
    tmp.replace(run_dir / "summary.json")


def list_runs(workdir: Path) -> list[dict[str, Any]]:
    """Summaries of the recorded runs, newest first (unfinished runs included)."""
    root = workdir / RUNS_DIR
    if not root.is_dir():
        return []
    runs = []
    for path in sorted(root.iterdir(), reverse=True):
        if not path.is_dir():
            continue
        summary = _read_summary(path)
        summary.setdefault("run_id", path.name)
        summary.setdefault("run_dir", str(path))
        runs.append(summary)
    return runs


def load_run(workdir: Path, run_id: str) -> tuple[dict[str, Any], dict[str, list[dict[str, Any]]]]:
    """A run's summary and its transcripts by agent id. ``run_id`` may be a unique prefix."""
    root = workdir / RUNS_DIR
    matches = sorted(p for p in root.glob(f"{run_id}*") if p.is_dir()) if root.is_dir() else []
    if not matches:
        raise LookupError(f"no run {run_id!r} under {root} (see: agentcell runs list)")
    if len(matches) > 1 and not any(p.name == run_id for p in matches):
        names = ", ".join(p.name for p in matches[:5])
        raise LookupError(f"{run_id!r} matches several runs ({names}); give more of the id")
    path = next((p for p in matches if p.name == run_id), matches[0])
    transcripts: dict[str, list[dict[str, Any]]] = {}
    for file in sorted(path.glob("*.jsonl")):
        lines = []
        for line in file.read_text().splitlines():
            try:
                lines.append(json.loads(line))
            except json.JSONDecodeError:
                lines.append({"kind": "unreadable", "text": line[:200]})
        transcripts[file.stem] = lines
    summary = _read_summary(path)
    summary.setdefault("run_id", path.name)
    return summary, transcripts


def _read_summary(path: Path) -> dict[str, Any]:
    file = path / "summary.json"
    if not file.is_file():
        return {"status": "unfinished"}
    try:
        data: dict[str, Any] = json.loads(file.read_text())
    except (OSError, json.JSONDecodeError):
        return {"status": "unreadable"}
    return data


def recorded_main_session(workdir: Path, run_id: str) -> tuple[str, list[Message]]:
    """A recorded run's id and its main agent's last session (``agentcell runs resume``);
    ``LookupError`` naming what is missing."""
    summary, transcripts = load_run(workdir, run_id)
    entries = [e for e in transcripts.get("main", []) if e.get("kind") == "messages"]
    if not entries:
        raise LookupError(
            f"run {summary['run_id']} recorded no main-agent session to continue "
            "(it ended before its first answer, or it was a direct sub-agent run)"
        )
    try:
        messages = msgspec.convert(entries[-1]["messages"], list[Message])
    except (KeyError, msgspec.ValidationError) as exc:
        raise LookupError(
            f"run {summary['run_id']}: its recorded session is unreadable ({exc})"
        ) from None
    return summary["run_id"], messages
