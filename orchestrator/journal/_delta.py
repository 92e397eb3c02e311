"""A model request as the journal keeps it: only what that agent's previous request did
not have, so that a journal grows with each turn, not with the whole history.

A request body's top level is split into its ``messages`` (a list) and the rest (model,
tools, system prompt, options). Each message is kept by its digest: a request whose
first ``base`` messages are the previous request's first ``base`` is journaled as
``base`` and the messages after them; the rest is journaled only when it changed.
``rebuild`` turns the journaled pieces back into each request's top level, in order.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

import msgspec

_MESSAGES = msgspec.json.Decoder(list[msgspec.Raw])


def _digest(raw: bytes) -> bytes:
    return hashlib.blake2b(raw, digest_size=16).digest()


@dataclass
class RequestDeltas:
    """One agent's requests so far, as digests: what the next one repeats."""

    _messages: list[bytes] = field(default_factory=list)
    _rest: bytes = b""

    def delta(self, top: dict[str, msgspec.Raw]) -> dict[str, Any]:
        """The journal's fields for one request's checked top level: ``base`` (messages
        kept from the previous request), ``messages`` (the raw JSON of the new ones), and
        ``rest`` (the raw JSON of every other key) only when it changed."""
        raw = top.get("messages")
        messages = list(_MESSAGES.decode(raw)) if raw is not None else []
        digests = [_digest(bytes(m)) for m in messages]
        base = 0
        for old, new in zip(self._messages, digests, strict=False):
            if old != new:
                break
            base += 1
        self._messages = digests
        fields: dict[str, Any] = {
            "base": base,
            "messages": [bytes(m) for m in messages[base:]],
        }
        rest = msgspec.json.encode({k: v for k, v in top.items() if k != "messages"})
        if _digest(rest) != self._rest:
            self._rest = _digest(rest)
            fields["rest"] = rest
        return fields


def request_digest(top: dict[str, msgspec.Raw]) -> bytes:
    """One request's digest, as ``RequestRebuilder.digest`` makes it from the journal: a
    resumed agent's request is answered from the journal only when it is the one journaled."""
    raw = top.get("messages")
    messages = list(_MESSAGES.decode(raw)) if raw is not None else []
    rest = msgspec.json.encode({k: v for k, v in top.items() if k != "messages"})
    return _joined_digest(rest, [_digest(bytes(m)) for m in messages])


def _joined_digest(rest: bytes, message_digests: list[bytes]) -> bytes:
    return _digest(b"".join([_digest(rest), *message_digests]))


@dataclass
class RequestRebuilder:
    """The inverse of ``RequestDeltas`` over one agent's journaled requests, in order."""

    _messages: list[bytes] = field(default_factory=list)
    _rest: bytes = b"{}"

    def rebuild(self, fields: dict[str, Any]) -> bytes:
        """The request body (JSON) the journaled ``fields`` stand for."""
        base = int(fields["base"])
        if base > len(self._messages):
            raise ValueError(f"a request keeps {base} messages of a previous one that had fewer")
        self._messages = self._messages[:base] + [bytes(m) for m in fields["messages"]]
        if "rest" in fields:
            self._rest = bytes(fields["rest"])
        top = msgspec.json.decode(self._rest, type=dict[str, msgspec.Raw])
        top["messages"] = msgspec.Raw(b"[" + b",".join(self._messages) + b"]")
        return msgspec.json.encode(top)

    @property
    def size(self) -> int:
        """About how many bytes the last request rebuilt had."""
        return len(self._rest) + sum(len(m) + 1 for m in self._messages)

    def digest(self, fields: dict[str, Any]) -> bytes:
        """The ``request_digest`` of the request the journaled ``fields`` stand for."""
        self.rebuild(fields)
        return _joined_digest(self._rest, [_digest(m) for m in self._messages])
