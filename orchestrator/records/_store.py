"""Run records on disk: ``<workdir>/.agentcell/runs/<run-id>/``.

Each run directory holds ``summary.json`` (the same object ``agentcell run --json``
prints), ``main.jsonl`` and one ``<agent-id>.jsonl`` per sub-agent (written by the
sub-agent's own process), and ``tool-outputs/`` for long tool outputs.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import secrets
import time
from pathlib import Path
from typing import Any

import msgspec
from agentcell.orchestrator.delegation._results import SubAgentResult
from agentcell.orchestrator.journal._place import run_state
from agentcell.orchestrator.records._key import verified_record
from agentcell.orchestrator.records._missing import summary_from_records
from agentcell.protocol import Message
from agentcell.worker import Redactor, real_folder

RUNS_DIR = Path(".agentcell") / "runs"
log = logging.getLogger("agentcell.records")


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
        _private_runs_folder(path.parent)
        try:
            path.mkdir(mode=0o700)
        except FileExistsError:
            continue  # the same millisecond and the same last digit: draw again
        return path


def _private_runs_folder(root: Path) -> None:
    """The records folder: 0700 whatever the umask, with a ``.gitignore`` of its own so
    that transcripts are never committed by accident."""
    root.parent.mkdir(mode=0o755, parents=True, exist_ok=True)  # never writable to others
    root.mkdir(mode=0o700, exist_ok=True)
    os.chmod(root, 0o700)
    ignore = root / ".gitignore"
    if not ignore.is_file():
        _write_private(ignore, "# agentcell: run records (transcripts), never committed\n*\n")


def _write_private(path: Path, text: str) -> None:
    """Write ``path`` 0600 whatever the umask, replacing it whole (never through a link):
    a temporary file, flushed to the disk, then renamed over it. A failed write (a full
    disk) leaves what ``path`` held before, and no temporary file."""
    tmp = path.with_name(path.name + ".tmp")
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC | os.O_NOFOLLOW
    try:
        with os.fdopen(os.open(tmp, flags, 0o600), "w") as file:
            os.fchmod(file.fileno(), 0o600)
            file.write(text)
            file.flush()
            os.fsync(file.fileno())  # a full disk says so here at the latest, not later
        tmp.replace(path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def subagent_json(result: SubAgentResult) -> dict[str, Any]:
    return {
        "agent_id": result.agent_id,
        "agent_type": result.agent_type,
        "name": result.name,  # what its team called it ("" if it was not named)
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
        "parent_id": result.parent_id,
        "started_at": result.started_at,
        "worktree": result.worktree,
        "branch": result.branch,
        "commit": result.commit,
        "diff_stat": result.diff_stat,
        "sandbox": result.sandbox,
        "network_log": result.network_log,  # what its bash reached, what was refused
        "no_process": result.no_process,  # it never got one: the run is an error
        "warnings": result.warnings,  # its own record cut by a full disk, among others
    }


def write_summary(run_dir: Path, summary: dict[str, Any]) -> None:
    text = Redactor.from_env()(json.dumps(summary, indent=2)) + "\n"
    _write_private(run_dir / "summary.json", text)


def write_summary_or_say(run_dir: Path, summary: dict[str, Any]) -> None:
    """``write_summary`` for a ``delegate``, a ``map`` or a chat turn, whose results reach
    the caller whatever the disk: a full one is one logged line (the previous summary, if
    any, kept), never an exception that would lose them."""
    try:
        write_summary(run_dir, summary)
    except OSError as exc:
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        log.warning(
            "the disk is full (%s): %s could not be written; free space on that disk",
            exc.strerror,
            run_dir / "summary.json",
        )


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


def find_run_dir(workdir: Path, run_id: str) -> Path:
    """The folder of the run ``run_id`` names: its whole id, or any unique prefix or
    suffix of it (as git takes short hashes); ``LookupError`` naming the choices."""
    root = workdir / RUNS_DIR
    folders = [p for p in root.iterdir() if p.is_dir()] if root.is_dir() and run_id else []
    exact = [p for p in folders if p.name == run_id]
    if exact:
        return exact[0]
    matches = sorted(p for p in folders if p.name.startswith(run_id) or p.name.endswith(run_id))
    if not matches:
        raise LookupError(f"no run {run_id!r} under {root} (see: agentcell runs list)")
    if len(matches) > 1:
        names = ", ".join(p.name for p in matches[:5])
        raise LookupError(f"{run_id!r} matches several runs ({names}); give more of the id")
    return matches[0]


def recorded_model(workdir: Path, run_id: str) -> str | None:
    """The main model a recorded run used (``runs resume`` continues with it)."""
    model = _read_summary(find_run_dir(workdir, run_id)).get("model")
    return model if isinstance(model, str) and model else None


def load_run(workdir: Path, run_id: str) -> tuple[dict[str, Any], dict[str, list[dict[str, Any]]]]:
    """A run's summary and its transcripts by agent id. ``run_id`` may be a unique prefix
    or suffix."""
    path = find_run_dir(workdir, run_id)
    transcripts: dict[str, list[dict[str, Any]]] = {}
    for file in sorted(path.glob("*.jsonl")):
        lines = []
        for line in file.read_text().splitlines():
            try:
                value = json.loads(line)
            except json.JSONDecodeError:
                value = None
            # Every reader takes a line for an object: anything else is unreadable to it.
            lines.append(
                value if isinstance(value, dict) else {"kind": "unreadable", "text": line[:200]}
            )
        transcripts[file.stem] = lines
    summary = _read_summary(path)
    summary.setdefault("run_id", path.name)
    return summary, transcripts


def _read_summary(path: Path) -> dict[str, Any]:
    return {**_summary_file(path), **_lineage(path)}


def _summary_file(path: Path) -> dict[str, Any]:
    file = path / "summary.json"
    state = run_state(path)
    if not file.is_file() or state[0] == "interrupted":
        # What its transcripts and journal say, and what is missing. A killed run's
        # summary.json, if any, was not the parent's last word (a sub-agent may have
        # written it): its journal is.
        return summary_from_records(path, state)
    try:
        data: dict[str, Any] = json.loads(file.read_text())
    except (OSError, json.JSONDecodeError):
        return {"status": "unreadable"}
    return data


def recorded_main_session(workdir: Path, run_id: str) -> tuple[str, list[Message]]:
    """A recorded run's id and its main agent's last session (``agentcell runs resume``);
    ``LookupError`` naming what is missing."""
    path = find_run_dir(workdir, run_id)
    entries = [e for e in _verified_entries(path / "main.jsonl") if e.get("kind") == "messages"]
    if not entries:
        raise LookupError(
            f"run {path.name} recorded no main-agent session to continue "
            "(it ended before its first answer, or it was a direct sub-agent run)"
        )
    try:
        messages = msgspec.convert(entries[-1]["messages"], list[Message])
    except (KeyError, msgspec.ValidationError) as exc:
        raise LookupError(f"run {path.name}: its recorded session is unreadable ({exc})") from None
    return path.name, messages


def _verified_entries(record: Path) -> list[dict[str, Any]]:
    """The entries of a main-agent record whose chain holds (``LookupError`` otherwise)."""
    if not record.is_file():
        return []
    return [json.loads(line) for line in verified_record(record)]


LINEAGE = "resumed-from.json"


def mark_resumed(run_dir: Path, resumed_id: str) -> None:
    """Note in a new run's own folder that it resumes run ``resumed_id``: written before
    the run starts, beside its summary (which each turn rewrites), so a run that fails, or
    is killed, still names the run it went on from; the resumed run's folder is never
    written to."""
    _write_private(run_dir / LINEAGE, json.dumps({"resumed_from": resumed_id}) + "\n")


def _lineage(path: Path) -> dict[str, Any]:
    try:
        data = json.loads((path / LINEAGE).read_text())
    except (OSError, ValueError):
        return {}
    found = data.get("resumed_from") if isinstance(data, dict) else None
    return {"resumed_from": found} if isinstance(found, str) else {}
