"""What a run folder without ``summary.json`` still says (``runs list``, ``runs show``).

A run that is still going, or was killed, or whose disk was full when it ended, has no
summary. Its transcripts are still there: the main agent's ``start`` and ``result`` lines
and one record per sub-agent. This reads them (a last line cut mid-write is skipped) so
that such a run is listed with what is known, and ``missing`` names what is not, rather
than as "unfinished · 0 sub-agents".
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agentcell.orchestrator.journal._file import read_journal
from agentcell.orchestrator.journal._place import JOURNAL_FILE, journal_dir, run_state

#: Said of a run folder with no summary: why there may be none.
NO_SUMMARY = "summary.json (the run is still going, was killed, or its disk was full)"


def summary_from_records(path: Path, known: tuple[str, int | None] | None = None) -> dict[str, Any]:
    """A summary of the run at ``path`` made from its transcripts and journal (``known``:
    its ``run_state``, when the caller has it)."""
    main = _entries(path / "main.jsonl")
    start = next((e for e in main if e.get("kind") == "start"), {})
    result = next((e["result"] for e in reversed(main) if _is_result(e)), None)
    state, pid = known or run_state(path)
    if state == "interrupted":  # whatever a line says, its journal says it never ended
        result = None
    summary: dict[str, Any] = {
        "status": str(result.get("status", "unfinished")) if result else "unfinished",
        "final_text": str(result.get("text", "")) if result else "",
        "error": str(result.get("error", "")) if result else "",
        "model": str(start.get("model") or ""),
        "prompt": str(start.get("prompt") or ""),
        "subagents": [
            _subagent(file) for file in sorted(path.glob("*.jsonl")) if file.stem != "main"
        ],
        "missing": [NO_SUMMARY],
    }
    if not result:
        summary["missing"].append("the main agent's result line in main.jsonl")
        # Its journal says which: the run is going (its orchestrator holds it) or was
        # interrupted (nobody does, and it never ended).
        if state == "running":
            summary.update(status="running", pid=pid)
        elif state == "interrupted":
            summary["status"] = "interrupted"
    journaled = journaled_subagents(path)
    if journaled is not None:
        # The parent's own account, which no sub-agent can write, over their transcripts.
        subagents, journaled_main = journaled
        summary["subagents"] = subagents
        summary.update(journaled_main)
    return summary


def journaled_subagents(
    run_dir: Path,
) -> tuple[list[dict[str, Any]], dict[str, str]] | None:
    """Each sub-agent the run's journal says was started, with the result it journaled
    (``interrupted``: started, never ended), and the main agent's prompt and model as
    journaled; None for a run with no journal."""
    path = journal_dir(run_dir) / JOURNAL_FILE
    try:
        records = read_journal(path).records
    except (OSError, ValueError):
        return None
    started: dict[str, dict[str, Any]] = {}
    main: dict[str, str] = {}
    for record in records:
        if record["k"] == "fact" and record.get("what") == "main":
            main = {"prompt": str(record.get("prompt", "")), "model": str(record.get("model", ""))}
        if record["k"] != "fact" or not isinstance(record.get("agent"), str):
            continue
        if record.get("what") == "started":
            started[record["agent"]] = {
                "agent_id": record["agent"],
                "agent_type": str(record.get("agent_type", "")),
                "description": str(record.get("description", "")),
                "status": "interrupted",
                "final_text": "",
                "error": "agentcell stopped before this sub-agent ended",
                "tool_calls": 0,
            }
        elif record.get("what") == "ended" and isinstance(record.get("result"), dict):
            started[record["agent"]] = {"agent_id": record["agent"], **record["result"]}
    return list(started.values()), main


def _subagent(record: Path) -> dict[str, Any]:
    entries = _entries(record)
    start = next((e for e in entries if e.get("kind") == "start"), {})
    result = next((e["result"] for e in reversed(entries) if _is_result(e)), None)
    return {
        "agent_id": record.stem,
        "agent_type": str(start.get("agent_type") or ""),
        "status": str(result.get("status", "unfinished")) if result else "unfinished",
        "final_text": str(result.get("text", "")) if result else "",
        "error": str(result.get("error", "")) if result else "",
        "tool_calls": int(result.get("tool_calls", 0)) if result else 0,
    }


def _is_result(entry: dict[str, Any]) -> bool:
    return entry.get("kind") == "result" and isinstance(entry.get("result"), dict)


def _entries(record: Path) -> list[dict[str, Any]]:
    try:
        lines = record.read_bytes().splitlines()
    except OSError:
        return []
    entries = []
    for line in lines:
        try:
            entry = json.loads(line)
        except ValueError:
            continue  # cut mid-write (a crash, a full disk)
        if isinstance(entry, dict):
            entries.append(entry)
    return entries
