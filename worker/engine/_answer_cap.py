"""One cap on a sub-agent's answer, checked once, and frames that always fit.

A model may stream an answer up to the response cap (64 MiB), a frame carries at most
16 MiB, and an answer over that failed its frame (``FrameTooLarge``): the whole answer
was lost. So the answer is cut here to ``MAX_ANSWER_BYTES`` of UTF-8, head and tail kept,
and the whole is written once to the run's ``tool-outputs/`` folder (which the child may
write), named in the note. Progress events that carry text are made to fit too: a long
text delta goes as several, and a tool call's arguments are shown by their head.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import msgspec
from agentcell.protocol import (
    MAX_FRAME_BYTES,
    AgentEvent,
    ApprovalNeeded,
    RunFinished,
    RunResult,
    TextDelta,
    ToolStarted,
)
from agentcell.worker.tools import _outputs

#: A quarter of a frame: the rest of the Result (error, usage, data) and framing fit.
MAX_ANSWER_BYTES = MAX_FRAME_BYTES // 4
#: Characters of text in one progress event (at most four UTF-8 bytes each).
EVENT_TEXT_CHARS = MAX_FRAME_BYTES // 16
#: Characters of a tool call's arguments a progress event shows.
EVENT_ARGUMENTS_CHARS = 64 * 1024


def fitted_events(event: AgentEvent, run_dir: str, agent_id: str) -> list[AgentEvent]:
    """``event`` as events that each fit in a frame (usually just itself)."""
    if isinstance(event, TextDelta) and len(event.text) > EVENT_TEXT_CHARS:
        text = event.text
        return [
            TextDelta(text=text[i : i + EVENT_TEXT_CHARS])
            for i in range(0, len(text), EVENT_TEXT_CHARS)
        ]
    if isinstance(event, RunFinished):
        return [RunFinished(result=capped_answer(event.result, run_dir, agent_id))]
    if (
        isinstance(event, ToolStarted | ApprovalNeeded)
        and len(event.arguments) > EVENT_ARGUMENTS_CHARS
    ):
        shown = event.arguments[:EVENT_ARGUMENTS_CHARS] + " …(cut for display)"
        return [msgspec.structs.replace(event, arguments=shown)]
    return [event]


def capped_answer(result: RunResult, run_dir: str, agent_id: str) -> RunResult:
    """``result`` with its text within ``MAX_ANSWER_BYTES``; the whole saved if cut."""
    encoded = result.text.encode("utf-8", "surrogatepass")
    if len(encoded) <= MAX_ANSWER_BYTES:
        return result
    where = _save(encoded, run_dir, agent_id)
    return msgspec.structs.replace(result, text=cut_answer(result.text, where))


def cut_answer(text: str, where: str = "") -> str:
    """``text`` within ``MAX_ANSWER_BYTES`` of UTF-8 (with the note, a little more): its
    head and tail, and a note of how much was left out and ``where`` the whole is. The
    parent cuts what a compromised child sends past the limit the same way."""
    encoded = text.encode("utf-8", "surrogatepass")
    if len(encoded) <= MAX_ANSWER_BYTES:
        return text
    head = encoded[: MAX_ANSWER_BYTES * 2 // 3].decode("utf-8", "ignore")
    tail = encoded[-(MAX_ANSWER_BYTES // 3) :].decode("utf-8", "ignore")
    note = (
        f"[... {len(text) - len(head) - len(tail)} characters of this answer omitted: "
        f"a sub-agent's answer is limited to {MAX_ANSWER_BYTES} bytes{where} ...]"
    )
    return f"{head}\n\n{note}\n\n{tail}"


def _save(encoded: bytes, run_dir: str, agent_id: str) -> str:
    if not run_dir:
        return "; it was not recorded (no run folder)"
    path = Path(run_dir) / "tool-outputs" / f"{agent_id}-answer.txt"
    with contextlib.suppress(OSError):
        if path.stat().st_size == len(encoded):  # saved already (the done event's copy)
            return f"; the whole answer ({len(encoded)} bytes) is saved at {path}"
    try:
        # Through the sandbox's descriptor where the folder is read-only to bash
        # (``_outputs``); else by its path.
        text = encoded.decode("utf-8", "surrogateescape")
        if not _outputs.write(path.name, text):
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
            descriptor = os.open(path, flags, 0o600)
            with open(descriptor, "wb") as out:
                out.write(encoded)
    except OSError as exc:
        with contextlib.suppress(OSError):
            path.unlink()
        return f"; the whole answer could not be saved ({exc.strerror or exc})"
    return f"; the whole answer ({len(encoded)} bytes) is saved at {path}"
