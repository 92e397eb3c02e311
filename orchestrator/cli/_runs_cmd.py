"""``agentcell runs list|show``: recorded runs read back.

``runs show ID`` says what each sub-agent was asked, how it ended, what it answered, which
tools it used (with counts), its time and tokens; ``runs show ID AGENT`` prints that
agent's transcript. Everything shown comes from files an agent (or a model) wrote, so
all of it is printed literally.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
from agentcell.orchestrator._resume_run import journaled_model
from agentcell.orchestrator._text import literal, one_line, plural, visible
from agentcell.orchestrator.cli._display import output_console
from agentcell.orchestrator.cli._run_cmd import run_once
from agentcell.orchestrator.config._settings import Settings
from agentcell.orchestrator.journal._replay import read_past
from agentcell.orchestrator.records._key import key_path, user_key
from agentcell.orchestrator.records._store import (
    find_run_dir,
    list_runs,
    load_run,
    recorded_main_session,
    recorded_model,
)
from agentcell.orchestrator.teams._mail import run_messages
from agentcell.orchestrator.telemetry._usage_text import usage_split
from agentcell.worker import RecordTampered, Session, record_key, verified_lines
from rich.console import Console
from rich.table import Table

PREVIEW = 160


def list_recorded(workdir: Path, *, as_json: bool) -> None:
    runs = list_runs(workdir)
    if as_json:
        click.echo(json.dumps(runs, indent=2))
        return
    if not runs:
        click.echo(f"no recorded runs under {workdir / '.agentcell' / 'runs'}")
        return
    console = output_console()
    table = Table(box=None, pad_edge=False)
    columns = ["run", "kind", "status", "time", "sub-agents", "tokens", "prompt"]
    resumes = any(run.get("resumed_from") for run in runs)
    if resumes:  # which run each resume went on from
        columns.insert(2, "resumes")
    for column in columns:
        table.add_column(column, no_wrap=True, overflow="ellipsis")
    for run in runs:
        seconds = run.get("duration_ms", 0) / 1000
        table.add_row(
            literal(run["run_id"]),
            literal(run.get("kind", "run")),
            *([literal(str(run.get("resumed_from") or ""))] if resumes else []),
            literal(
                run.get("status", "?") + (" · record incomplete" if run.get("missing") else "")
            ),
            f"{seconds:.1f}s" if seconds else "",
            str(len(run.get("subagents", []))),
            str(_tokens(run.get("usage", {}))),
            literal(one_line(run.get("prompt") or "", 60)),
        )
    console.print(table)


def show_recorded(workdir: Path, run_id: str, agent: str | None = None, *, as_json: bool) -> None:
    summary, transcripts = load_run(workdir, run_id)
    if agent is not None:
        if agent not in transcripts:
            raise LookupError(_no_transcript(summary, transcripts, agent))
        _warn_if_changed(find_run_dir(workdir, run_id) / f"{agent}.jsonl")
        _show_agent(summary, transcripts[agent], agent, as_json=as_json)
        return
    subagents = [
        _subagent_view(sub, transcripts.get(sub["agent_id"], []))
        for sub in summary.get("subagents", [])
    ]
    messages = _messages(find_run_dir(workdir, run_id))
    if as_json:
        click.echo(json.dumps({**summary, "subagents": subagents, "messages": messages}, indent=2))
        return
    console = output_console()
    say = _printer(console)
    head = f"run {summary['run_id']}: {summary.get('status', '?')}"
    if summary.get("model"):
        head += f" · {summary['model']}"
    if summary.get("duration_ms"):
        head += f" · {summary['duration_ms'] / 1000:.1f} s"
    head += f" · {_tokens(summary.get('usage', {}))} tokens ({usage_split(_usage(summary))})"
    say(head, "bold")
    if summary.get("carried_usage"):  # a resume: the killed run's share, counted above
        say(f"of which spent by the run it resumed: {_tokens(summary['carried_usage'])} tokens")
    _say_lineage(say, workdir, summary)
    turns = summary.get("turns")
    if turns:  # a chat: every turn
        for turn in turns:
            say(f"\nturn {turn['turn']} ({turn['kind']}): {turn['prompt']}", "bold")
            text = turn.get("final_text") or turn.get("error") or ""
            say(f"  {turn['status']}: {one_line(text, PREVIEW)}")
            if turn.get("subagents"):  # whose results this turn got
                say(f"  sub-agents: {', '.join(turn['subagents'])}")
            if turn.get("background"):
                say(f"  started in the background: {', '.join(turn['background'])}")
    elif summary.get("prompt"):
        say(f"prompt: {summary['prompt']}")
    if summary.get("error"):
        say(f"error: {summary['error']}", "red")
    if summary.get("missing"):  # no summary.json: read from the transcripts
        say(f"record incomplete, missing: {'; '.join(map(str, summary['missing']))}", "yellow")
    if subagents:
        say(f"\n{plural(len(subagents), 'sub-agent')}:", "bold")
    for sub in subagents:
        say(_subagent_line(sub))
        if sub["prompt"]:
            say(f"      prompt: {one_line(sub['prompt'], PREVIEW)}")
        outcome = sub["final_text"] if sub["status"] == "completed" else sub["error"]
        say(f"      result: {one_line(outcome or '(none)', PREVIEW)}")
        tools = ", ".join(f"{name} ×{count}" for name, count in sub["tools_used"].items())
        say(f"      tools:  {tools or 'none'}")
        for line in sub.get("network_log") or []:
            say(
                f"      network: {one_line(line, PREVIEW)}",
                "red" if line.startswith("refused") else "",
            )
    _say_messages(say, messages, {s["agent_id"]: s.get("name", "") for s in subagents})
    if summary.get("final_text") and not turns:
        say("\nfinal answer", "bold")
        say(summary["final_text"])
    if subagents:
        say(f"\nOne agent's transcript: agentcell runs show {summary['run_id']} AGENT")


def _messages(run_dir: Path) -> list[dict[str, Any]]:
    """The run's messages between its agents, from its journal (none without one)."""
    try:
        return run_messages(read_past(run_dir).team)
    except LookupError:
        return []


def _say_messages(say: Any, messages: list[dict[str, Any]], names: dict[str, str]) -> None:
    if messages:
        say(f"\n{plural(len(messages), 'message')} between agents:", "bold")
    for message in messages:
        sender, recipient = (
            f"{names[who]} ({who})" if names.get(who) else who
            for who in (message["sender"], message["recipient"])
        )
        read = message["read_at_turn"]
        when = f"read at its turn {read}" if read else "never read"
        if read == 0:
            when = "continued it"
        text = one_line(message["text"], PREVIEW)
        say(f"  {message['id']} {sender} → {recipient}, {when}: {text}")


def _say_lineage(say: Any, workdir: Path, summary: dict[str, Any]) -> None:
    """Which run this one resumed, and which runs resumed it (each is a run of its own)."""
    if summary.get("resumed_from"):
        say(f"resumes run {summary['resumed_from']}")
    later = [
        run["run_id"] for run in list_runs(workdir) if run.get("resumed_from") == summary["run_id"]
    ]
    if later:
        say(f"resumed since as: {', '.join(reversed(later))}")


def _subagent_view(sub: dict[str, Any], lines: list[dict[str, Any]]) -> dict[str, Any]:
    start = next((ln for ln in lines if ln.get("kind") == "start"), {})
    used = collections.Counter(
        ln["event"].get("name", "?")
        for ln in lines
        if ln.get("kind") == "event" and ln.get("event", {}).get("kind") == "tool_start"
    )
    return {**sub, "prompt": start.get("prompt", ""), "tools_used": dict(used.most_common())}


def _subagent_line(sub: dict[str, Any]) -> str:
    line = f"  {sub['agent_id']:>4}  {sub['agent_type']}"
    if sub.get("description"):
        line += f' "{one_line(sub["description"], 40)}"'
    if sub.get("background"):
        line += " (background)"
    running = (sub.get("duration_ms", 0) - sub.get("queued_ms", 0)) / 1000
    line += f"  {sub['status']}  {running:.1f} s"
    if sub.get("queued_ms"):
        line += f" (+{sub['queued_ms'] / 1000:.1f} s queued)"
    line += f"  {plural(sub.get('turns', 0), 'turn')}  {_tokens(sub.get('usage', {}))} tokens"
    line += f" ({usage_split(_usage(sub))})"
    return line


def _no_transcript(
    summary: dict[str, Any], transcripts: dict[str, list[dict[str, Any]]], agent: str
) -> str:
    """Why ``agent`` has no transcript: the run had no such agent, or it ended before it
    wrote one (the summary says how)."""
    run = summary["run_id"]
    listed = [s for s in summary.get("subagents") or [] if isinstance(s, dict)]
    sub = next((s for s in listed if s.get("agent_id") == agent), None)
    if sub is None:
        known = ", ".join(sorted({*transcripts, *(str(s.get("agent_id")) for s in listed)}))
        return f"run {run} has no agent {agent!r} (agents: {known or 'none'})"
    how = str(sub.get("status") or "?")
    if sub.get("error"):
        how += f": {one_line(str(sub['error']), PREVIEW)}"
    who = f"{agent} ({sub.get('agent_type') or '?'})"
    return (
        f"run {run}: {who} has no transcript: it was not recorded (the sub-agent ended "
        f"{how}); what the run knows of it: agentcell runs show {run}"
    )


def _warn_if_changed(record: Path) -> None:
    """One line on stderr when ``record`` does not verify as ``runs resume`` checks it (its
    MAC chain): it is still shown, but it is not what its agent wrote."""
    problem = _record_problem(record)
    if problem:
        click.echo(f"agentcell: warning: {visible(problem)}; shown as it is now", err=True)


def _record_problem(record: Path) -> str:
    """What is wrong with ``record`` by the check ``runs resume`` makes (its chain of MACs
    under its key, ``verified_lines``); "" when it verifies."""
    if not key_path().is_file():  # never made here: a new key would fail every line
        return f"cannot check {record}: there is no record key at {key_path()}"
    try:
        verified_lines(record, record_key(user_key(), record.parent.name, record.stem))
    except RecordTampered as exc:
        return str(exc)
    except OSError as exc:
        return f"cannot check {record}: {exc}"
    return ""


def _show_agent(
    summary: dict[str, Any],
    lines: list[dict[str, Any]],
    agent: str,
    *,
    as_json: bool,
) -> None:
    if as_json:
        click.echo(
            json.dumps({"run_id": summary["run_id"], "agent": agent, "records": lines}, indent=2)
        )
        return
    console = output_console()
    say = _printer(console)
    start = next((ln for ln in lines if ln.get("kind") == "start"), {})
    say(
        f"{agent} {start.get('agent_type', '')} · {start.get('model', '')} · run "
        f"{summary['run_id']}",
        "bold",
    )
    # The last "messages" record holds the whole conversation (chat appends turns).
    messages = next(
        (ln["messages"] for ln in reversed(lines) if ln.get("kind") == "messages"), None
    )
    if messages is None:  # it never finished a turn cleanly: what its events said
        say("(no messages recorded; its events follow)", "yellow")
        for ln in lines:
            if ln.get("kind") == "event":
                say(f"  {_event_text(_fields(ln.get('event')))}")
    else:
        for message in messages if isinstance(messages, list) else [messages]:
            _print_message(say, message)
    for ln in lines:
        if ln.get("kind") == "result":
            result = _fields(ln.get("result"))
            text = f"\n── end: {result.get('status', '?')}"
            if result.get("error"):
                text += f": {result['error']}"
            say(text, "bold")


def _fields(value: Any) -> dict[str, Any]:
    """A record's object, or an empty one: a record edited by hand (or written by a
    hostile sub-agent) may hold anything where an object belongs."""
    return value if isinstance(value, dict) else {}


def _shown(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, default=str)


def _print_message(say: Any, message: Any) -> None:
    if not isinstance(message, dict):
        say(f"\n── (not a message) {_shown(message)}", "yellow")
        return
    role = message.get("role", "?")
    if role == "tool":
        say(f"\n── tool result ({message.get('name', '')})", "dim")
    else:
        say(f"\n── {role}", "bold")
    if message.get("content"):
        say(message["content"])
    calls = message.get("tool_calls")
    for call in map(_fields, calls if isinstance(calls, list) else []):
        say(f"→ {_shown(call.get('name', '?'))} {_shown(call.get('arguments', ''))}", "cyan")


def _event_text(event: dict[str, Any]) -> str:
    kind = event.get("kind", "?")
    if kind == "tool_start":
        return f"→ {_shown(event.get('name', '?'))} {_shown(event.get('arguments', ''))}"
    if kind == "text":
        return _shown(event.get("text", ""))
    return _shown(kind)


def _printer(console: Console) -> Any:
    def say(text: Any, style: str = "") -> None:
        console.print(literal(_shown(text), style=style), soft_wrap=True)

    return say


def _usage(record: dict[str, Any]) -> dict[str, Any]:
    usage = record.get("usage")
    return usage if isinstance(usage, dict) else {}


def _tokens(usage: dict[str, Any]) -> int:
    return int(usage.get("input_tokens", 0)) + int(usage.get("output_tokens", 0))


# -- runs resume of an interrupted run ---------------------------------------------------
# Finished from its journal: a one-shot run's answer printed (its exit code the run's); an
# interrupted chat's last turn finished, then the chat goes on from the session it left;
# ``PROMPT`` makes either one more run on that session, and exits.


@dataclasses.dataclass(frozen=True)
class Resuming:
    """What ``runs resume`` was given, for the runs it makes."""

    workdir: Path
    agents_dirs: tuple[Path, ...]
    inline: Any
    as_json: bool
    load: Callable[..., Settings]  # the command line's settings loader


def finish_interrupted(
    how: Resuming, run_dir: Path, killed: tuple[str, bool], then: str | None, flags: dict[str, Any]
) -> int:
    """Finish the run in ``run_dir`` (``killed``: its last prompt, whether a chat); then
    ``then`` as one more run, or (a chat) the chat. Returns the exit code."""
    prompt, chat = killed
    workdir = how.workdir.resolve()
    if flags.get("model") is None:  # the journal names the model it ran with
        flags["model"] = journaled_model(run_dir)

    def once(prompt: str, settings: Settings, session: Session | None, resumed: str) -> int:
        return asyncio.run(
            run_once(
                prompt,
                settings,
                workdir=workdir,
                agents_dirs=how.agents_dirs,
                agents=how.inline,
                timeout_s=None,
                as_json=how.as_json,
                quiet=how.as_json,
                session=session,
                resumed_from=resumed,  # with no session: finish that run
            )
        )

    code = once(prompt, how.load(how.workdir, **flags), None, run_dir.name)
    finished = [r["run_id"] for r in list_runs(workdir) if r.get("resumed_from") == run_dir.name]
    if code != 0 or not finished or (then is None and not chat):
        return code
    resumed_id, messages = recorded_main_session(workdir, finished[0])
    settings = how.load(how.workdir, **{**flags, "model": recorded_model(workdir, resumed_id)})
    if then is None:  # a chat: it goes on from where its finished turn left it
        from agentcell.orchestrator.cli._chat import run_chat

        return asyncio.run(
            run_chat(
                settings,
                workdir,
                how.agents_dirs,
                agents=how.inline,
                session=Session(messages),
                resumed_from=resumed_id,
            )
        )
    return once(then, settings, Session(messages), resumed_id)
