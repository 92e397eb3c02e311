"""The frame MAC on its own (no processes): fast enough to run for every mutant of
protocol/_frame_mac.py before the process-level tests in test_mutation_kills.py."""

from __future__ import annotations

import msgspec
import pytest
from agentcell.protocol import (
    PROTOCOL_VERSION,
    ApprovalReply,
    Failure,
    Notice,
    Result,
    RunResult,
    RunStatus,
    Start,
    frame_is_authentic,
    new_frame_key,
    seal_for_child,
    sign_frame,
)

RESULT = Result(result=RunResult(status=RunStatus.COMPLETED, text="done"))
FRAMES = [
    RESULT,
    Failure(error_type="ValueError", message="it broke", traceback="tb"),
    ApprovalReply(request_id=3, approved=True, reason="ok"),
]


def test_a_key_is_fresh_and_long() -> None:
    keys = {new_frame_key() for _ in range(8)}
    assert len(keys) == 8 and all(len(k) == 32 for k in keys)


@pytest.mark.parametrize("frame", FRAMES, ids=lambda f: type(f).__name__)
def test_only_a_frame_signed_with_the_key_is_authentic(frame: object) -> None:
    key = new_frame_key()
    signed = sign_frame(frame, key)  # type: ignore[type-var]
    assert len(signed.mac) == 16
    assert frame_is_authentic(signed, key)
    assert not frame_is_authentic(frame, key)  # type: ignore[arg-type]  (unsigned)
    assert not frame_is_authentic(signed, new_frame_key())  # another key
    assert not frame_is_authentic(msgspec.structs.replace(signed, mac=bytes(16)), key)
    assert not frame_is_authentic(msgspec.structs.replace(signed, mac=signed.mac[:15]), key)
    assert not frame_is_authentic(msgspec.structs.replace(signed, mac=signed.mac + b"x"), key)
    flipped = bytes([signed.mac[0] ^ 1]) + signed.mac[1:]
    assert not frame_is_authentic(msgspec.structs.replace(signed, mac=flipped), key)


def test_a_changed_field_breaks_the_signature() -> None:
    key = new_frame_key()
    signed = sign_frame(RESULT, key)
    changed = msgspec.structs.replace(
        signed, result=RunResult(status=RunStatus.COMPLETED, text="forged")
    )
    assert not frame_is_authentic(changed, key)
    # Re-signing a signed frame gives the same MAC: the MAC covers the frame without it.
    assert sign_frame(signed, key).mac == signed.mac


def test_without_a_key_a_frame_stays_unsigned() -> None:
    assert sign_frame(RESULT, b"") is RESULT or sign_frame(RESULT, b"").mac == b""


def test_a_parents_frame_is_sealed_for_its_child() -> None:
    key = new_frame_key()
    start = Start(protocol_version=PROTOCOL_VERSION, run_id="r", handler="h:f")
    assert seal_for_child(start, key).frame_key == key
    reply = seal_for_child(ApprovalReply(request_id=1, approved=False), key)
    assert frame_is_authentic(reply, key)
    notice = Notice(message="hi")
    assert seal_for_child(notice, key) is notice
    result = seal_for_child(RESULT, key)
    assert result.mac == b""  # only Start and ApprovalReply are sealed
