"""Frames that count only from the process they belong to.

A socket can be stolen: a same-user process with ptrace rights over a child (or the
parent) takes a duplicate of its end with ``pidfd_getfd`` and writes frames of its own
into it. The parent makes a fresh key for each child and sends it in ``Start``, never
anywhere else; the frames that decide something — the child's ``Result`` and
``Failure``, the parent's ``ApprovalReply``, the child's ``SpanBatch`` (what a trace
says it did), its ``ModelCall`` (the parent sends it with the provider's key), its
``ToolRecord`` (what the run's journal says its tools did) and its ``DelegateRequest``
(a sub-agent it starts, a message to its team, a page fetched for it) —
carry an HMAC under that key, and an unsigned or wrongly signed one is dropped. A thief
holding the socket but not the key (it arrived after ``Start`` was read, or holds the
parent's end, which never carries ``Start`` back) cannot forge them; one that reads
``Start`` before the child does has also stolen the child's whole run, which then never
starts.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from typing import Any, TypeVar

import msgspec
from agentcell.protocol._frames import (
    ApprovalReply,
    DelegateRequest,
    Failure,
    ModelCall,
    Result,
    SpanBatch,
    ToolRecord,
)

#: The frames that carry a MAC.
SignedFrame = (
    ApprovalReply | Result | Failure | SpanBatch | ModelCall | ToolRecord | DelegateRequest
)
_F = TypeVar(
    "_F", ApprovalReply, Result, Failure, SpanBatch, ModelCall, ToolRecord, DelegateRequest
)
_encode = msgspec.msgpack.Encoder().encode
_MAC_BYTES = 16


def new_frame_key() -> bytes:
    return secrets.token_bytes(32)


def _mac(frame: SignedFrame, key: bytes) -> bytes:
    body = _encode(msgspec.structs.replace(frame, mac=b""))
    return hmac.new(key, body, hashlib.sha256).digest()[:_MAC_BYTES]


def sign_frame(frame: _F, key: bytes) -> _F:
    """``frame`` with its MAC under ``key`` (unchanged when there is no key yet)."""
    if not key:
        return frame
    return msgspec.structs.replace(frame, mac=_mac(frame, key))


def frame_is_authentic(frame: SignedFrame, key: bytes) -> bool:
    """True if ``frame`` was signed with ``key`` (a MAC of any other length never
    compares equal: ``compare_digest`` needs both the length and the bytes)."""
    return hmac.compare_digest(frame.mac, _mac(frame, key))


def seal_for_child(frame: Any, key: bytes) -> Any:
    """A parent's frame as it goes to the child that holds ``key``: the ``Start`` carries
    the key, an ``ApprovalReply`` is signed with it, anything else goes as it is."""
    from agentcell.protocol._frames import ApprovalReply, Start

    if isinstance(frame, Start):
        return msgspec.structs.replace(frame, frame_key=key)
    if isinstance(frame, ApprovalReply):
        return sign_frame(frame, key)
    return frame
