"""``agentcell runs view RUN``: one self-contained HTML page with a lane per agent.

Each lane sits under its parent's and shows what the agent was doing when: queued (no free
process yet), starting (its process booting), model (waiting for its model), tool,
approval (waiting for a person), then how it ended; a crash is marked with its cause, and
each message between agents (from the run's journal) on its sender's lane where it was
sent (✉→) and on its recipient's where it was read (→✉). Hovering a bar or a mark (a
``title`` tooltip) shows the tool call or the message. A chat's turns get a row of
their own above the lanes (a cancelled or failed one marked), and each lane a dashed line
where each turn began.

Everything on the page comes from records an agent, or a model, could have written into,
so every text has its control characters written out (``visible``) and goes through
``html.escape``, and every attribute is quoted; the page has no script at all, and its
content-security policy forbids scripts, fetches, frames and forms from anywhere
(``default-src 'none'``): only its own inline styles apply.
"""

from __future__ import annotations

import dataclasses
import html
import math
from pathlib import Path
from typing import Any

from agentcell.orchestrator._text import visible
from agentcell.orchestrator.journal._replay import read_past
from agentcell.orchestrator.records._store import _write_private, find_run_dir, load_run
from agentcell.orchestrator.teams._mail import run_messages
from agentcell.orchestrator.telemetry._usage_text import usage_split

#: What a page may do: styles of its own, nothing else (no script, image, font, fetch).
CSP = (
    "default-src 'none'; style-src 'unsafe-inline'; script-src 'none'; img-src 'none'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
TITLE_MAX = 600  # characters of a tooltip (a tool call's arguments can be long)
MAX_SEGMENTS = 2000  # bars in one lane
STATES = ("queued", "starting", "model", "tool", "approval")


@dataclasses.dataclass
class Segment:
    state: str
    start: float
    end: float
    title: str = ""


@dataclasses.dataclass
class Lane:
    agent_id: str
    parent_id: str
    agent_type: str = ""
    description: str = ""
    status: str = "unfinished"
    error: str = ""
    usage: dict[str, Any] = dataclasses.field(default_factory=dict)
    cost_usd: float | None = None
    depth: int = 0
    segments: list[Segment] = dataclasses.field(default_factory=list)
    start: float | None = None
    end: float | None = None


def write_timeline(workdir: Path, run_id: str, out: Path | None) -> Path:
    """Write the page of run ``run_id`` to ``out`` (default: ``timeline.html`` in the
    run's folder); returns where it went."""
    summary, transcripts = load_run(workdir, run_id)
    run_dir = find_run_dir(workdir, run_id)
    target = out if out is not None else run_dir / "timeline.html"
    try:
        messages = run_messages(read_past(run_dir).team)  # from its journal, if it has one
    except LookupError:
        messages = []
    try:  # private like the records it shows (their prompts, answers, tool calls)
        _write_private(target, timeline_html(summary, transcripts, messages))
    except OSError as exc:
        raise ValueError(f"cannot write the timeline to {target}: {exc.strerror}") from None
    return target


def timeline_html(
    summary: dict[str, Any],
    transcripts: dict[str, list[dict[str, Any]]],
    messages: list[dict[str, Any]] | None = None,
) -> str:
    lanes = ordered_lanes(build_lanes(summary, transcripts))
    turns = chat_turns(summary)
    starts = [lane.start for lane in lanes if lane.start is not None]
    starts += [turn.start for turn in turns]
    ends = [lane.end for lane in lanes if lane.end is not None] + [turn.end for turn in turns]
    origin = min(starts, default=0.0)
    span = max(max(ends, default=origin) - origin, 1e-3)
    marks = _message_marks(messages or [], origin, span)
    # every lane shows where each turn of a chat began (its first one: where all begin)
    edges = [
        f'<span class="edge" style="left:{_percent(turn.start - origin, span)}%"></span>'
        for turn in turns[1:]
    ]
    rows = "\n".join(
        _lane_html(index, lane, (origin, span), [*marks.get(lane.agent_id, []), *edges])
        for index, lane in enumerate(lanes)
    )
    if turns:
        rows = _turns_html(turns, origin, span) + "\n" + rows
    return _PAGE.format(
        csp=html.escape(CSP),
        title=_esc(f"agentcell run {summary.get('run_id', '')}"),
        head=_head_html(summary, len(lanes), span),
        axis=_axis_html(span),
        legend="".join(f'<span class="key s-{s}">{s}</span>' for s in (*STATES, "crash")),
        rows=rows,
        style=_STYLE,
    )


# -- from records to lanes -------------------------------------------------------------


def build_lanes(
    summary: dict[str, Any], transcripts: dict[str, list[dict[str, Any]]]
) -> list[Lane]:
    """One lane per agent: the main agent's (when it has a record), each sub-agent the
    summary lists, and any other record in the folder (a run that never finished)."""
    lanes: list[Lane] = []
    if "main" in transcripts:
        main = Lane("main", "", agent_type="main", status=str(summary.get("status", "?")))
        main.usage = _dict(summary.get("usage"))
        main.cost_usd = _number(summary.get("cost_usd"))
        _phases(main, transcripts["main"], queued_until=None)
        lanes.append(main)
    listed = set()
    for sub in summary.get("subagents") or []:
        if not isinstance(sub, dict):
            continue
        lane = _subagent_lane(sub, transcripts.get(str(sub.get("agent_id")), []))
        listed.add(lane.agent_id)
        lanes.append(lane)
    for agent_id, lines in transcripts.items():
        if agent_id != "main" and agent_id not in listed:
            start = next((ln for ln in lines if ln.get("kind") == "start"), {})
            lane = Lane(agent_id, "main", agent_type=str(start.get("agent_type", "")))
            _phases(lane, lines, queued_until=None)
            lanes.append(lane)
    return lanes


def _subagent_lane(sub: dict[str, Any], lines: list[dict[str, Any]]) -> Lane:
    lane = Lane(
        str(sub.get("agent_id", "?")),
        str(sub.get("parent_id") or "main"),
        agent_type=str(sub.get("agent_type", "")),
        description=str(sub.get("description", "")),
        status=str(sub.get("status", "?")),
        error=str(sub.get("error") or ""),
        usage=_dict(sub.get("usage")),
        cost_usd=_number(sub.get("cost_usd")),
    )
    # The parent's clock (summary.json, written by the parent) frames the lane: when it
    # was asked for, how long it queued, when it ended; the child's own record fills in.
    requested = _number(sub.get("started_at"))
    duration = (_number(sub.get("duration_ms")) or 0.0) / 1000
    queued = (_number(sub.get("queued_ms")) or 0.0) / 1000
    if requested is not None:
        lane.start = requested
        lane.end = requested + duration
        if queued > 0:
            lane.segments.append(Segment("queued", requested, requested + queued))
    _phases(lane, lines, queued_until=None if requested is None else requested + queued)
    if requested is not None:
        lane.end = max(requested + duration, lane.end or requested)
    return lane


def _phases(lane: Lane, lines: list[dict[str, Any]], queued_until: float | None) -> None:
    """The states the agent's own record shows, each from its event's time to the next."""
    state, since, title = "", 0.0, ""
    for line in lines:
        ts = _number(line.get("ts"))
        if ts is None:
            continue
        kind = line.get("kind")
        if kind == "start":
            if queued_until is not None and ts > queued_until:
                lane.segments.append(Segment("starting", queued_until, ts))
            lane.start = ts if lane.start is None else min(lane.start, ts)
            state, since, title = "model", ts, ""
            continue
        lane.end = ts if lane.end is None else max(lane.end, ts)
        new = _state_after(line, state)
        if new is None:
            continue
        # A tool call or an approval as quick as the clock's tick still gets its bar (and
        # its tooltip): the page must show every call, however fast.
        if state and (ts > since or state in _ALWAYS_SHOWN):
            lane.segments.append(Segment(state, since, ts, title))
        state, since, title = new[0], ts, new[1] or (title if new[0] == "tool" else "")
    if state and lane.end is not None and (lane.end > since or state in _ALWAYS_SHOWN):
        lane.segments.append(Segment(state, since, lane.end, title))


#: States drawn even when they took no measurable time.
_ALWAYS_SHOWN = ("tool", "approval")


def _state_after(line: dict[str, Any], state: str) -> tuple[str, str] | None:
    """The (state, tooltip) a record line moves to; None: it changes nothing."""
    kind = line.get("kind")
    if kind == "result":
        return ("", "")
    if kind != "event":
        return None
    event = _dict(line.get("event"))
    etype = event.get("kind")
    if etype == "tool_start":
        return ("tool", f"{event.get('name', '?')} {event.get('arguments', '')}")
    if etype == "approval":
        return ("approval", f"{event.get('tool', '?')} {event.get('arguments', '')}")
    if etype == "notice" and event.get("level") == "approval" and state == "approval":
        return ("tool", "")  # the call approval was asked for runs now: its title stays
    if etype in ("tool_result", "turn") and state != "model":
        return ("model", "")
    if etype == "done":
        return ("", "")
    return None


def ordered_lanes(lanes: list[Lane]) -> list[Lane]:
    """Depth first: each lane right under its parent's, siblings in the order they
    started; a lane whose parent has no lane hangs under the top."""
    by_id = {lane.agent_id: lane for lane in lanes}
    children: dict[str, list[Lane]] = {}
    roots: list[Lane] = []
    for lane in lanes:
        if lane.parent_id in by_id and lane.parent_id != lane.agent_id:
            children.setdefault(lane.parent_id, []).append(lane)
        else:
            roots.append(lane)
    out: list[Lane] = []
    seen: set[str] = set()
    stack = [(lane, 0) for lane in reversed(_by_start(roots))]
    while stack:
        lane, depth = stack.pop()
        if lane.agent_id in seen:
            continue  # a cycle of parent ids (a forged record): each lane once
        seen.add(lane.agent_id)
        lane.depth = depth
        out.append(lane)
        for child in reversed(_by_start(children.get(lane.agent_id, []))):
            stack.append((child, depth + 1))
    out.extend(lane for lane in lanes if lane.agent_id not in seen)
    return out


def _by_start(lanes: list[Lane]) -> list[Lane]:
    return sorted(lanes, key=lambda lane: lane.start if lane.start is not None else math.inf)


# -- lanes to HTML ----------------------------------------------------------------------


def _lane_html(
    index: int, lane: Lane, clock: tuple[float, float], marks: list[str] | None = None
) -> str:
    origin, span = clock
    label = lane.agent_id
    if lane.agent_type and lane.agent_type != lane.agent_id:  # "main", not "main main"
        label += f" {lane.agent_type}"
    if lane.description:
        label += f" · {lane.description}"
    # the main agent's lane carries the run's totals: the summary has no row of its own
    whole = "run total: " if lane.agent_id == "main" and not lane.parent_id else ""
    info = f"{lane.status} · {whole}{usage_split(lane.usage)}"
    if lane.cost_usd is not None:
        info += f" · ${lane.cost_usd:.4f}"
    # a record of a million events (a sub-agent writes its own) stays a page a browser opens
    bars = [_bar(seg, origin, span) for seg in lane.segments[:MAX_SEGMENTS]]
    bars += (marks or [])[:MAX_SEGMENTS]  # its messages, sent and read
    crashed = lane.status in ("crashed", "error", "timeout", "limit", "budget")
    if crashed and lane.end is not None:
        left = _percent(lane.end - origin, span)
        cause = f"{lane.status}: {lane.error or 'no cause recorded'}"
        bars.append(f'<span class="crash" style="left:{left}%" title="{_esc(cause)}">✕</span>')
    cause_text = f'<span class="cause">{_esc(lane.error)}</span>' if crashed else ""
    return (
        f'<div class="lane st-{_esc(_css(lane.status))}" id="lane-{index}" '
        f'data-agent="{_esc(lane.agent_id)}">'
        f'<div class="label" style="padding-left:{min(lane.depth, 12) * 14 + 4}px" '
        f'title="{_esc(label)}">{_esc(label)}</div>'
        f'<div class="info" title="{_esc(info)}">{_esc(info)}{cause_text}</div>'
        f'<div class="track">{"".join(bars)}</div></div>'
    )


def _message_marks(
    messages: list[dict[str, Any]], origin: float, span: float
) -> dict[str, list[str]]:
    """Each message between agents, drawn on both lanes: ✉→ where the sender sent it,
    →✉ where the recipient read it; the words in the tooltip (as text, never markup)."""
    marks: dict[str, list[str]] = {}
    for message in messages:
        text = f"{message['id']}: {message['text']}"[:TITLE_MAX]
        ends = (
            (message["sender"], message.get("sent_at"), "✉→", f"to {message['recipient']}"),
            (message["recipient"], message.get("read_at"), "→✉", f"from {message['sender']}"),
        )
        for agent_id, when, sign, whom in ends:
            at = _number(when)
            if at is not None:
                tip = _esc(f"{whom}, {text}")
                left = _percent(at - origin, span)
                marks.setdefault(agent_id, []).append(
                    f'<span class="msg" style="left:{left}%" title="{tip}">{sign}</span>'
                )
    return marks


def _bar(seg: Segment, origin: float, span: float) -> str:
    left = _percent(seg.start - origin, span)
    width = max(_percent(seg.end - seg.start, span), 0.15)
    tip = f"{seg.state} {seg.end - seg.start:.2f} s"
    if seg.title:
        tip += f": {seg.title[:TITLE_MAX]}"
    return (
        f'<span class="seg s-{_css(seg.state)}" style="left:{left}%;width:{width}%" '
        f'title="{_esc(tip)}"></span>'
    )


def _head_html(summary: dict[str, Any], lanes: int, span: float) -> str:
    parts = [
        f"run {summary.get('run_id', '?')}",
        str(summary.get("status", "?")),
        f"{lanes} lanes",
        f"{span:.1f} s",
        usage_split(_dict(summary.get("usage"))),
    ]
    cost = _number(summary.get("cost_usd"))
    if cost is not None:
        parts.append(f"${cost:.4f}")
    prompt = str(summary.get("prompt") or "")
    head = f"<h1>{_esc(' · '.join(parts))}</h1>"
    if prompt:
        head += f'<p class="prompt">{_esc(prompt[:2000])}</p>'
    return head


def _axis_html(span: float) -> str:
    ticks = []
    for step in range(11):
        seconds = span * step / 10
        # the end labels sit inside the axis (centred, the last one was cut off)
        edge = ' class="first"' if step == 0 else ' class="last"' if step == 10 else ""
        ticks.append(f'<span{edge} style="left:{step * 10}%">{seconds:.1f}s</span>')
    return "".join(ticks)


@dataclasses.dataclass
class Turn:
    number: int
    kind: str  # "main", or "direct" (an @agent line)
    status: str
    prompt: str
    start: float
    end: float


def chat_turns(summary: dict[str, Any]) -> list[Turn]:
    """A chat's turns with their times (a one-shot run, or a chat recorded before turns
    had times, has none)."""
    turns: list[Turn] = []
    for entry in summary.get("turns") or []:
        if not isinstance(entry, dict):
            continue
        start, end = _number(entry.get("started_at")), _number(entry.get("ended_at"))
        if start is None or end is None:
            continue
        number = _number(entry.get("turn"))
        turns.append(
            Turn(
                int(number) if number is not None else len(turns) + 1,
                str(entry.get("kind", "")),
                str(entry.get("status", "?")),
                str(entry.get("prompt", "")),
                start,
                max(end, start),
            )
        )
    return turns[:MAX_SEGMENTS]


def _turns_html(turns: list[Turn], origin: float, span: float) -> str:
    """The row above the lanes: one bar per chat turn, its number on it; a cancelled
    turn (or one that failed) is marked so, and its tooltip says how it ended."""
    bars = []
    for turn in turns:
        left = _percent(turn.start - origin, span)
        width = max(_percent(turn.end - turn.start, span), 0.15)
        ended = "" if turn.status == "completed" else f" {turn.status}"
        sign = "⊘" if turn.status == "cancelled" else "✕" if ended else ""
        tip = f"turn {turn.number} ({turn.kind}{ended}) {turn.end - turn.start:.2f} s: "
        tip += turn.prompt[:TITLE_MAX]
        parity = "odd" if turn.number % 2 else "even"
        bars.append(
            f'<span class="turn t-{parity} ts-{_css(turn.status)}" '
            f'style="left:{left}%;width:{width}%" title="{_esc(tip)}">'
            f"{_esc(f'{sign}{turn.number}{ended}')}</span>"
        )
    return (
        '<div class="turns"><div class="label">turns</div><div class="info"></div>'
        f'<div class="track">{"".join(bars)}</div></div>'
    )


def _percent(seconds: float, span: float) -> float:
    return round(min(max(seconds / span * 100, 0.0), 100.0), 3)


def _esc(text: str) -> str:
    # Control characters written out first (``\e``, ``\x00``), as everywhere else: a
    # browser drops some and shows others as nothing, and a terminal reading the file
    # (``cat``, ``less -r``) would run an escape sequence.
    return html.escape(visible(str(text)), quote=True)


def _css(name: str) -> str:
    """A class-name part: letters only (a status is record text too)."""
    return "".join(c for c in name if c.isalpha())[:20] or "x"


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


_STYLE = """
body{font:12px system-ui,sans-serif;margin:0;overflow-x:hidden;background:#fafafa;color:#222}
h1{font-size:14px;margin:8px 10px 2px}
.prompt{margin:0 10px 6px;color:#555;white-space:pre-wrap;max-height:4em;overflow:hidden}
.legend{margin:0 10px 6px}
.key{display:inline-block;padding:1px 6px;margin-right:4px;border-radius:3px;color:#fff}
.head{position:sticky;top:0;background:#fafafa;z-index:2;border-bottom:1px solid #ccc}
.axis{position:relative;height:16px;margin:0 10px 0 460px;color:#777}
.axis span{position:absolute;transform:translateX(-50%);font-size:10px}
.axis span.first{transform:none}.axis span.last{transform:translateX(-100%)}
.turns{display:flex;height:18px;align-items:center;border-bottom:1px solid #ccc}
.turn{position:absolute;top:0;height:12px;font-size:9px;line-height:12px;overflow:hidden;
white-space:nowrap;color:#333;border-left:1px solid #333;box-sizing:border-box}
.t-odd{background:#e4e4f4}.t-even{background:#d4d4ec}
.ts-cancelled,.ts-error,.ts-timeout,.ts-budget{background:#f4d4d4;color:#b00}
.edge{position:absolute;top:-3px;height:18px;border-left:1px dashed #888}
.lane{display:flex;height:18px;align-items:center;border-bottom:1px solid #eee}
.lane:hover{background:#eef}
.label,.info{box-sizing:border-box}
.label{width:220px;flex:none;overflow:hidden;text-overflow:ellipsis;white-space:nowrap}
.info{width:240px;flex:none;overflow:hidden;text-overflow:ellipsis;white-space:nowrap;
color:#666;font-size:10px}
.cause{color:#b00;margin-left:4px}
.track{position:relative;flex:1;height:12px;background:#f0f0f0;margin-right:10px}
.seg{position:absolute;top:0;height:12px}
.crash{position:absolute;top:-3px;color:#b00;font-weight:bold;transform:translateX(-50%)}
.msg{position:absolute;top:-3px;color:#06c;transform:translateX(-50%)}
.s-queued{background:#bbb}.s-starting{background:#f0b429}.s-model{background:#4a90d9}
.s-tool{background:#3cb371}.s-approval{background:#d9534f}.s-crash{background:#b00}
.st-crashed .label,.st-error .label,.st-timeout .label{color:#b00}
"""

_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{csp}">
<title>{title}</title>
<style>{style}</style></head>
<body><div class="head">{head}<div class="legend">{legend}</div>
<div class="axis">{axis}</div></div>
<div class="lanes">
{rows}
</div></body></html>
"""
