"""Coverage-guided fuzzing of the frame decoder (atheris / libFuzzer).

Run for a bounded time (seconds)::

    .venv/bin/python fuzz/fuzz_frames.py -max_total_time=60

Any other libFuzzer flag works too (``-runs=N``, ``-jobs=N``, ``-artifact_prefix=DIR/``),
and corpus directories may follow; without one, a fresh temporary corpus is seeded with
one valid frame of every kind. A crash input is written to ``crash-<sha1>`` (libFuzzer's
default, in the current directory) and can be replayed with
``.venv/bin/python fuzz/fuzz_frames.py crash-<sha1>``.

What one input exercises — the bytes a child could send its parent:

* ``decode_body`` on the stream and on the stream less a 4-byte header;
* a ``FrameParser`` fed the stream split at fuzzer-chosen points, with the default
  limit or a small one, and the same stream fed whole to a second parser.

Properties (anything else is a crash):

* the only exception either may raise is ``ProtocolError`` (``FrameTooLarge``
  included); after one, every later ``feed`` raises it again;
* however the stream is split, the parser returns the same frames, fails the same way,
  and leaves the same number of bytes pending;
* every decoded frame re-encodes, and the re-encoded body decodes to an equal frame
  (bytes identical on a second round: the encoding is canonical).

Input layout (so that seeds are plain valid frames behind a short prefix)::

    byte 0      number of split points (0-7, taken modulo 8)
    byte 1      bit 0: use a small max_bytes (64) instead of the default 16 MiB
    2 bytes     per split point, big-endian, taken modulo the stream length + 1
    rest        the stream: length-prefixed frames, as on the pipe
"""

from __future__ import annotations

import math
import struct
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository root

try:
    import atheris  # type: ignore[import-untyped]
except ImportError:  # pragma: no cover - depends on the environment
    atheris = None

if atheris is not None:
    with atheris.instrument_imports(include=["agentcell.protocol"]):
        from agentcell.protocol import ProtocolError, decode_body, encode_frame
        from agentcell.protocol._codec import FrameParser, encode_body
else:  # still importable (and usable through check_input) without atheris
    from agentcell.protocol import ProtocolError, decode_body, encode_frame
    from agentcell.protocol._codec import FrameParser, encode_body

SMALL_LIMIT = 64


def _contains_nan(value: object) -> bool:
    """NaN is the one value that is not equal to itself after a faithful round trip."""
    if isinstance(value, float):
        return math.isnan(value)
    if isinstance(value, dict):
        return any(_contains_nan(k) or _contains_nan(v) for k, v in value.items())
    if isinstance(value, list | tuple | set | frozenset):
        return any(_contains_nan(v) for v in value)
    fields = getattr(value, "__struct_fields__", None)
    if fields is not None:
        return any(_contains_nan(getattr(value, f)) for f in fields)
    return False


def shape(value: object, depth: int = 0) -> int:
    """Walk a decoded value, branching on what it holds.

    msgspec is C code that atheris cannot see into: these branches (instrumented) are
    what tell the fuzzer it reached a new kind of frame, event, message or field value.
    """
    if depth > 8:
        return 0
    if value is None:
        return 1
    if isinstance(value, bool):
        return 2
    if isinstance(value, int):
        return 3 if -(2**31) <= value < 2**31 else 4
    if isinstance(value, float):
        return 5 if math.isfinite(value) else 6
    if isinstance(value, str):
        return 7 if value.isascii() else 8
    if isinstance(value, bytes | bytearray):
        return 9
    if isinstance(value, list | tuple):
        return 10 + sum(shape(v, depth + 1) for v in value)
    if isinstance(value, dict):
        return 11 + sum(shape(v, depth + 1) for v in value.values())
    fields = getattr(value, "__struct_fields__", None)
    if fields is None:
        return 12  # e.g. msgspec.msgpack.Ext, datetime inside an Any field
    return 13 + kind(value) + sum(shape(getattr(value, f), depth + 1) for f in fields)


def kind(value: object) -> int:
    """One branch per struct type that can appear in a frame."""
    match type(value).__name__:
        # frames
        case "Hello":
            return 1
        case "Start":
            return 2
        case "Event":
            return 3
        case "ApprovalRequest":
            return 4
        case "ApprovalReply":
            return 5
        case "DelegateRequest":
            return 6
        case "DelegateReply":
            return 7
        case "Control":
            return 8
        case "Heartbeat":
            return 9
        case "Result":
            return 10
        case "Failure":
            return 11
        case "PermitRequest":
            return 40
        case "PermitGrant":
            return 41
        case "PermitDone":
            return 42
        case "SpanBatch":
            return 43
        case "SpanRecord":
            return 44
        # events
        case "TurnStarted":
            return 12
        case "TextDelta":
            return 13
        case "ToolStarted":
            return 14
        case "ToolFinished":
            return 15
        case "UsageUpdate":
            return 16
        case "ApprovalNeeded":
            return 17
        case "Notice":
            return 18
        case "RunFinished":
            return 19
        # what frames carry
        case "AgentSpec":
            return 20
        case "Limits":
            return 21
        case "RemoteTool":
            return 22
        case "RunResult":
            return 23
        case "Usage":
            return 24
        case "ToolCall":
            return 25
        case "SystemMessage":
            return 26
        case "UserMessage":
            return 27
        case "AssistantMessage":
            return 28
        case "ToolMessage":
            return 29
        case _:
            return 0


def check_round_trip(frame: object) -> None:
    shape(frame)
    body = encode_body(frame)  # type: ignore[arg-type]
    again = decode_body(body)
    if again != frame and not _contains_nan(frame):
        raise AssertionError(f"round trip changed the frame:\n{frame!r}\n{again!r}")
    if encode_body(again) != body:
        raise AssertionError(f"re-encoding is not stable for {frame!r}")
    whole = encode_frame(frame)  # type: ignore[arg-type]
    if bytes(whole[4:]) != body:
        raise AssertionError("encode_frame and encode_body disagree")


def decode_or_protocol_error(body: bytes) -> None:
    try:
        frame = decode_body(body)
    except ProtocolError:
        return
    check_round_trip(frame)


def parse(chunks: list[bytes], max_bytes: int) -> tuple[list[object], str | None, int]:
    """Feed ``chunks`` to a fresh parser: (frames, error class or None, bytes pending)."""
    parser = FrameParser(max_bytes)
    frames: list[object] = []
    error: ProtocolError | None = None
    for chunk in chunks:
        try:
            frames.extend(parser.feed(chunk))
        except ProtocolError as exc:
            error = exc
            break
    if error is None and parser.error is not None:
        # Frames came back together with the bad one's error, kept for the next feed.
        try:
            parser.feed(b"")
        except ProtocolError as exc:
            error = exc
        else:
            raise AssertionError("a parser with an error accepted another feed")
    if error is not None:
        # Sticky: once failed, a parser never accepts anything again.
        try:
            parser.feed(b"\x00\x00\x00\x00")
        except ProtocolError:
            pass
        else:
            raise AssertionError("a failed parser accepted more bytes")
        return frames, type(error).__name__, 0
    return frames, None, parser.pending


def check_input(data: bytes) -> None:
    """One fuzz input (see the module docstring for the layout)."""
    if len(data) < 2:
        return
    count = data[0] % 8
    max_bytes = SMALL_LIMIT if data[1] & 1 else 16 * 1024 * 1024
    header = 2 + 2 * count
    if len(data) < header:
        return
    points = [struct.unpack_from("!H", data, 2 + 2 * i)[0] for i in range(count)]
    stream = data[header:]

    decode_or_protocol_error(stream)
    if len(stream) >= 4:
        decode_or_protocol_error(stream[4:])

    cuts = sorted({p % (len(stream) + 1) for p in points})
    chunks = [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True)]
    split = parse(chunks, max_bytes)
    whole = parse([stream], max_bytes)
    frames, error, pending = split
    if (len(frames), error, pending) != (len(whole[0]), whole[1], whole[2]) or any(
        a != b and not _contains_nan(a) for a, b in zip(frames, whole[0], strict=True)
    ):
        raise AssertionError(f"splitting at {cuts} changed the result: {split!r} != {whole!r}")
    for frame in frames:
        check_round_trip(frame)


def seeds() -> list[bytes]:
    """One valid frame of every kind (and a stream of several), behind a no-split prefix."""
    from agentcell.protocol import (
        AgentSpec,
        ApprovalReply,
        ApprovalRequest,
        Control,
        ControlAction,
        DelegateReply,
        DelegateRequest,
        Event,
        Failure,
        Frame,
        Heartbeat,
        Hello,
        Limits,
        Notice,
        PermitDone,
        PermitGrant,
        PermitRequest,
        Result,
        RunResult,
        RunStatus,
        SpanBatch,
        SpanRecord,
        Start,
        TextDelta,
        ToolFinished,
        ToolStarted,
        TurnStarted,
        Usage,
        UsageUpdate,
        UserMessage,
    )

    frames: list[Frame] = [
        Hello(protocol_version=1, pid=4242, preload_ok=False, missing_preload=["x"]),
        Start(
            protocol_version=1,
            run_id="a1",
            handler="agentcell.worker.child._agent:run_agent",
            spec=AgentSpec(
                agent_id="a1",
                agent_type="Explore",
                prompt="look",
                history=[UserMessage(content="earlier")],
                tools=["read_file"],
                timeout_s=1.5,
            ),
            args={"k": [1, 2.5, None, {"n": True}]},
            limits=Limits(address_space_bytes=1 << 30, max_tool_calls=3),
            objects=b"\x80\x04blob",
        ),
        Event(event=TurnStarted(turn=1)),
        Event(event=TextDelta(text="hé")),
        Event(event=ToolStarted(call_id="c1", name="grep", arguments="{}")),
        Event(
            event=ToolFinished(
                call_id="c1", name="grep", is_error=False, preview="x", duration_ms=0.5
            )
        ),
        Event(event=UsageUpdate(usage=Usage(input_tokens=3, output_tokens=4), model="m")),
        Event(event=Notice(message="steering", level="warning")),
        ApprovalRequest(request_id=1, call_id="c1", tool="bash", arguments="{}", reason="r"),
        ApprovalReply(request_id=1, approved=True),
        DelegateRequest(request_id=2, call_id="c2", tool="task", arguments="{}"),
        DelegateReply(request_id=2, content="done", is_error=True),
        PermitRequest(request_id=3, model="openai:gpt-4o", tokens=120),
        PermitGrant(request_id=3, granted=False, reason="too many"),
        PermitDone(request_id=3, tokens=99, retry_after=0.5),
        Control(action=ControlAction.STEER, text="also"),
        Heartbeat(seq=7, peak_rss_bytes=1 << 20),
        SpanBatch(
            spans=[
                SpanRecord(
                    trace_id=b"\x01" * 16,
                    span_id=b"\x02" * 8,
                    parent_id=b"\x03" * 8,
                    name="chat gpt-4o",
                    kind=2,
                    start_ns=1,
                    end_ns=2,
                    attributes={"gen_ai.usage.input_tokens": 3, "r": ["stop"], "x": 0.5},
                    status=2,
                    status_message="boom",
                )
            ],
            mac=b"m" * 16,
        ),
        Result(result=RunResult(status=RunStatus.COMPLETED, text="ok", data={"a": 1})),
        Failure(error_type="ValueError", message="boom", traceback="tb"),
    ]
    encoded = [bytes(encode_frame(f)) for f in frames]
    prefix = b"\x00\x00"
    out = [prefix + e for e in encoded]
    out.append(prefix + b"".join(encoded))
    out.append(b"\x03\x00\x00\x05\x00\x40\x01\x00" + b"".join(encoded[:4]))  # three splits
    out.append(b"\x00\x01" + encoded[1])  # a Start over the small limit
    return out


def check_input_instrumented(data: bytes) -> None:
    check_input(data)  # looked up at call time: the instrumented version


def main(argv: list[str]) -> None:
    if atheris is None:
        sys.exit(
            "fuzz_frames: atheris is not installed, so there is nothing to fuzz with.\n"
            "Install it into this environment with `pip install atheris` (prebuilt wheels "
            "for Linux x86_64; elsewhere it builds from source and needs clang with "
            "libFuzzer). See fuzz/README.md."
        )
    args = list(argv)
    if not any(not a.startswith("-") for a in args[1:]):
        corpus = Path(tempfile.mkdtemp(prefix="agentcell-fuzz-frames-"))
        for i, seed in enumerate(seeds()):
            (corpus / f"seed-{i:02d}").write_bytes(seed)
        print(f"fuzz_frames: seeded corpus in {corpus}", file=sys.stderr)
        args.append(str(corpus))
    for fn in (shape, kind, check_round_trip, decode_or_protocol_error, parse, check_input):
        globals()[fn.__name__] = atheris.instrument_func(fn)
    atheris.Setup(args, check_input_instrumented)
    atheris.Fuzz()


if __name__ == "__main__":
    main(sys.argv)
