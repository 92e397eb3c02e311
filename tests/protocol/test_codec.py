"""The frame codec: round trips, send_bytes compatibility, and garbage that never crashes."""

from __future__ import annotations

import msgspec
import multiprocess
import pytest
from agentcell.protocol import (
    AgentSpec,
    Frame,
    FrameTooLarge,
    ProtocolError,
    decode_body,
    encode_frame,
)
from agentcell.protocol._codec import HEADER_SIZE, FrameParser, encode_body
from agentcell.protocol._events import AgentEvent
from agentcell.protocol._messages import Message
from hypothesis import given, settings
from hypothesis import strategies as st

from agentcell import protocol

INT64 = st.integers(-(2**63), 2**63 - 1)


def builds(cls: type, **overrides: st.SearchStrategy[object]) -> st.SearchStrategy:
    """``st.builds`` with integers kept to what msgpack carries (64 bits)."""
    for field in msgspec.structs.fields(cls):
        if field.name in overrides:
            continue
        if field.type is int:
            overrides[field.name] = INT64
        elif field.type == int | None:
            overrides[field.name] = st.none() | INT64
    return st.builds(cls, **overrides)


text = st.text(max_size=40)
json_scalars = st.none() | st.booleans() | st.integers(-(2**40), 2**40) | text
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(text, inner, max_size=4),
    max_leaves=12,
)
arg_dicts = st.dictionaries(text, json_values, max_size=4)

usage = builds(protocol.Usage)
run_results = builds(protocol.RunResult, usage=usage, data=arg_dicts)
messages: st.SearchStrategy[Message] = st.one_of(
    builds(protocol.SystemMessage),
    builds(protocol.UserMessage),
    builds(protocol.AssistantMessage, tool_calls=st.lists(builds(protocol.ToolCall))),
    builds(protocol.ToolMessage),
)
events: st.SearchStrategy[AgentEvent] = st.one_of(
    builds(protocol.TurnStarted),
    builds(protocol.TextDelta),
    builds(protocol.ToolStarted),
    builds(protocol.ToolFinished, duration_ms=st.floats(0, 1e6)),
    builds(protocol.UsageUpdate, usage=usage),
    builds(protocol.ApprovalNeeded),
    builds(protocol.Notice),
    builds(protocol.RunFinished, result=run_results),
)
specs = builds(
    AgentSpec,
    history=st.lists(messages, max_size=3),
    model_options=arg_dicts,
    timeout_s=st.none() | st.floats(0, 1e6),
)

span_scalars = text | st.booleans() | INT64 | st.floats(allow_nan=False)
span_records = builds(
    protocol.SpanRecord,
    attributes=st.dictionaries(text, span_scalars | st.lists(span_scalars, max_size=3)),
)

#: One strategy per frame type; the test below checks none is missing.
FRAME_STRATEGIES: dict[type, st.SearchStrategy[Frame]] = {
    protocol.Hello: builds(protocol.Hello),
    protocol.Start: builds(
        protocol.Start,
        spec=st.none() | specs,
        args=arg_dicts,
        limits=st.none() | builds(protocol.Limits),
        heartbeat_s=st.floats(0.01, 60),
    ),
    protocol.Event: builds(protocol.Event, event=events),
    protocol.ApprovalRequest: builds(protocol.ApprovalRequest),
    protocol.ApprovalReply: builds(protocol.ApprovalReply),
    protocol.DelegateRequest: builds(protocol.DelegateRequest),
    protocol.DelegateReply: builds(protocol.DelegateReply),
    protocol.HookRequest: builds(protocol.HookRequest),
    protocol.HookReply: builds(protocol.HookReply),
    protocol.ToolRecord: builds(protocol.ToolRecord),
    protocol.ToolRecorded: builds(protocol.ToolRecorded),
    protocol.PermitRequest: builds(protocol.PermitRequest),
    protocol.PermitGrant: builds(protocol.PermitGrant),
    protocol.PermitDone: builds(protocol.PermitDone, retry_after=st.none() | st.floats(0, 1e6)),
    protocol.ModelCall: builds(protocol.ModelCall),
    protocol.ModelCancel: builds(protocol.ModelCancel),
    protocol.ModelHead: builds(protocol.ModelHead),
    protocol.ModelData: builds(protocol.ModelData),
    protocol.ModelEnd: builds(protocol.ModelEnd),
    protocol.Control: builds(protocol.Control),
    protocol.Heartbeat: builds(protocol.Heartbeat),
    protocol.SpanBatch: builds(protocol.SpanBatch, spans=st.lists(span_records, max_size=3)),
    protocol.Result: builds(protocol.Result, result=run_results),
    protocol.Failure: builds(protocol.Failure),
}
any_frame = st.one_of(*FRAME_STRATEGIES.values())


def test_every_frame_type_has_a_strategy() -> None:
    assert set(FRAME_STRATEGIES) == set(Frame.__args__)  # type: ignore[attr-defined]


@pytest.mark.parametrize("frame_type", list(FRAME_STRATEGIES), ids=lambda t: t.__name__)
@settings(max_examples=60)
@given(data=st.data())
def test_round_trip_every_frame_type(frame_type: type, data: st.DataObject) -> None:
    frame = data.draw(FRAME_STRATEGIES[frame_type])
    assert decode_body(encode_body(frame)) == frame
    encoded = encode_frame(frame)
    assert int.from_bytes(encoded[:HEADER_SIZE], "big") == len(encoded) - HEADER_SIZE
    assert FrameParser().feed(encoded) == [frame]


@given(frames=st.lists(any_frame, min_size=1, max_size=6), cuts=st.lists(st.integers(0, 10**6)))
def test_parser_reassembles_frames_split_anywhere(frames: list[Frame], cuts: list[int]) -> None:
    stream = b"".join(encode_frame(f) for f in frames)
    points = sorted({c % (len(stream) + 1) for c in cuts} | {0, len(stream)})
    parser = FrameParser()
    out: list[Frame] = []
    for a, b in zip(points, points[1:], strict=False):
        out += parser.feed(stream[a:b])
    assert out == frames
    assert parser.pending == 0


@settings(max_examples=5000)
@given(st.binary(max_size=512))
def test_arbitrary_bytes_only_ever_raise_protocol_error(data: bytes) -> None:
    try:
        decode_body(data)
    except ProtocolError:
        pass
    try:
        FrameParser(max_bytes=1024).feed(data)
    except ProtocolError:
        pass


@settings(max_examples=2000)
@given(json_values)
def test_well_formed_msgpack_of_the_wrong_shape_is_a_protocol_error(value: object) -> None:
    body = msgspec.msgpack.encode(value)
    with pytest.raises(ProtocolError):
        decode_body(body)


def test_oversize_header_fails_before_the_body_arrives() -> None:
    parser = FrameParser(max_bytes=1024)
    with pytest.raises(FrameTooLarge, match="1025 bytes"):
        parser.feed((1025).to_bytes(4, "big"))  # only the header: nothing else was sent


def test_negative_length_is_rejected() -> None:
    with pytest.raises(ProtocolError):
        FrameParser().feed(b"\xff\xff\xff\xfe")


def test_encoding_over_the_limit_is_refused() -> None:
    big = protocol.DelegateReply(request_id=1, content="x" * 2048)
    with pytest.raises(FrameTooLarge):
        encode_frame(big, max_bytes=1024)


def test_framing_is_compatible_with_connection_send_bytes() -> None:
    frame = protocol.Hello(protocol_version=protocol.PROTOCOL_VERSION, pid=42)
    a, b = multiprocess.Pipe()
    try:
        a.send_bytes(encode_body(frame))  # multiprocess writes its own length header
        raw = b"".join(_read_exactly(b, HEADER_SIZE + len(encode_body(frame))))
        assert FrameParser().feed(raw) == [frame]
        _write_all(b, bytes(encode_frame(frame)))  # our header, read by recv_bytes
        assert decode_body(a.recv_bytes()) == frame
    finally:
        a.close()
        b.close()


def _read_exactly(conn: object, n: int) -> list[bytes]:
    import os

    chunks, got = [], 0
    while got < n:
        chunk = os.read(conn.fileno(), n - got)  # type: ignore[attr-defined]
        assert chunk
        chunks.append(chunk)
        got += len(chunk)
    return chunks


def _write_all(conn: object, data: bytes) -> None:
    import os

    view = memoryview(data)
    while view:
        view = view[os.write(conn.fileno(), view) :]  # type: ignore[attr-defined]
