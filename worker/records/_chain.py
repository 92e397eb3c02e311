"""Run records that cannot be rewritten unseen: every line is chained and keyed.

Each line of a record is a JSON object whose last field is ``"mac"``: HMAC-SHA256, under
the record's own key, of the previous line's MAC and this line's bytes without the field.
Changing, moving, removing or adding a line breaks the chain from there on, and a reader
that has the key (the parent, which derives it) finds the first line that does not match.

The record's key is ``HMAC(user key, run id, agent id)``: the parent keeps the user key
(outside the workdir) and hands each sub-agent only the key of its own record, so a child
can at worst forge its own record while it runs, never the main agent's or a sibling's.
Dropping lines from the end leaves a valid shorter record (a crash does the same): it
returns an earlier true state, never an invented one.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
from pathlib import Path

_FIELD = b',"mac":"'
_TAIL = re.compile(rb',"mac":"([0-9a-f]{64})"\}$')
_CONTEXT = b"agentcell run record v1\0"


class RecordTampered(Exception):
    """A record's chain does not hold; the message is one line naming the record and line."""


def record_key(user_key: bytes, run_id: str, agent_id: str) -> bytes:
    """The key of one record: ``<run_id>/<agent_id>.jsonl``."""
    message = _CONTEXT + run_id.encode() + b"\0" + agent_id.encode()
    return hmac.new(user_key, message, hashlib.sha256).digest()


def _mac(key: bytes, previous: bytes, body: bytes) -> bytes:
    return hmac.new(key, previous + b"\n" + body, hashlib.sha256).hexdigest().encode()


def seal(body: bytes, previous: bytes, key: bytes) -> tuple[bytes, bytes]:
    """``body`` (one JSON object) with its ``mac`` field, and that MAC (the next line's
    ``previous``)."""
    mac = _mac(key, previous, body)
    return body[:-1] + _FIELD + mac + b'"}', mac


def last_mac(fd: int) -> bytes:
    """The MAC of the last line of the open record ``fd`` (b"": none, the chain starts)."""
    size = os.fstat(fd).st_size
    if size == 0:
        return b""
    tail = os.pread(fd, 128, max(0, size - 128)).rstrip(b"\n")
    found = _TAIL.search(tail)
    return found.group(1) if found else b""


def chain_end(path: Path) -> bytes:
    """The MAC the record's chain ends with now (b"": no signed line). The parent keeps it
    when the agent ends, so that a line added later, even one signed with that agent's own
    key, is refused (``verified_lines(..., end=)``)."""
    with path.open("rb") as file:
        size = os.fstat(file.fileno()).st_size
        tail = os.pread(file.fileno(), 128, max(0, size - 128))
    if tail.endswith(b"\n") and (found := _TAIL.search(tail[:-1])) is not None:
        return found.group(1)
    lines = _complete_lines(path.read_bytes())  # a crash cut the last line (or none is signed)
    found = _TAIL.search(lines[-1]) if lines else None
    return found.group(1) if found else b""


def _complete_lines(data: bytes) -> list[bytes]:
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    elif lines and not _json_object(lines[-1]):
        lines.pop()  # cut mid-write: nothing after it, and it is never read
    return lines


def verified_lines(path: Path, key: bytes, end: bytes | None = None) -> list[bytes]:
    """The lines of the record at ``path`` once its whole chain is checked (a last line cut
    by a crash, not even JSON, is left out); with ``end`` (``chain_end`` when its agent
    ended), the chain must end there. ``RecordTampered`` names the first bad line."""
    lines = _complete_lines(path.read_bytes())
    previous = b""
    ended_at = 0 if end == b"" else None
    for number, line in enumerate(lines, 1):
        found = _TAIL.search(line)
        if found is None:
            raise RecordTampered(
                f"{path}: line {number} carries no MAC (written before records were signed, "
                "or changed since)"
            )
        body = line[: found.start()] + b"}"
        mac = found.group(1)
        if not key or not hmac.compare_digest(_mac(key, previous, body), mac):
            raise RecordTampered(
                f"{path}: line {number} was changed, moved or added after it was written "
                "(its MAC does not match)"
            )
        previous = mac
        if end is not None and ended_at is None and hmac.compare_digest(mac, end):
            ended_at = number
    if end is not None and ended_at != len(lines):
        where = f"line {ended_at + 1}" if ended_at is not None else f"line {max(len(lines), 1)}"
        raise RecordTampered(
            f"{path}: {where} is not what the record held when its agent ended "
            "(lines were added or replaced since)"
        )
    return lines


def _json_object(line: bytes) -> bool:
    try:
        return isinstance(json.loads(line), dict)
    except ValueError:
        return False
