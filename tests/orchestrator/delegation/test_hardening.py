"""Hardening II (issue 16): what a determined attacker or a hostile model server broke.

Each test here failed on the code before its fix; the process-level ones are in
test_hardening_processes.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from agentcell.worker.models import ModelError
from agentcell.worker.tools import ToolContext
from agentcell.worker.tools._base import truncate_output

# --- 4. a model-chosen tool-call id never becomes a path part -------------------------


@pytest.mark.parametrize(
    "call_id", ["x/../../../escaped", "../escaped", "/tmp/escaped", "a\x00b", "..", "é" * 300]
)
def test_a_hostile_call_id_cannot_place_the_spill_file(tmp_path: Path, call_id: str) -> None:
    workdir = tmp_path / "work"
    run_dir = workdir / "run"
    workdir.mkdir()
    ctx = ToolContext(workdir=workdir, run_dir=run_dir, call_id=call_id, max_output_chars=100)
    out = truncate_output("x" * 5000, ctx)
    spilled = list((run_dir / "tool-outputs").iterdir())
    assert len(spilled) == 1, spilled
    assert spilled[0].read_text() == "x" * 5000
    assert spilled[0].name.startswith("main-") and "/" not in spilled[0].name[5:]
    assert len(spilled[0].name) <= 100
    assert not any(p.name.startswith("escaped") for p in tmp_path.rglob("*") if p != spilled[0])
    assert spilled[0].name in out


def test_two_hostile_ids_that_sanitise_alike_do_not_overwrite_each_other(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    for call_id in ("a/b", "a.b"):
        ctx = ToolContext(workdir=tmp_path, run_dir=run_dir, call_id=call_id, max_output_chars=10)
        truncate_output(call_id * 1000, ctx)
    assert len(list((run_dir / "tool-outputs").iterdir())) == 2


# --- 10. bad input: alias bombs, FIFOs, absurd numbers --------------------------------

_ALIAS_BOMB = "\n".join(
    ["---", "name: bomb", "a: &a [x, x, x, x, x, x, x, x, x, x]"]
    + [
        f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, "
        f"*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, "
        f"*{chr(97 + i)}, *{chr(97 + i)}]"
        for i in range(8)
    ]
    + ["description: *i", "---", "body"]
)


def test_a_yaml_alias_in_an_agent_file_is_refused_with_a_line() -> None:
    from agentcell.orchestrator.definitions._loader import parse_agent_text

    loaded = parse_agent_text(_ALIAS_BOMB, path="bomb.md")
    assert loaded.definitions == []
    [diagnostic] = loaded.diagnostics
    assert "alias" in diagnostic.message and "file skipped" in diagnostic.message


def test_an_alias_is_refused_by_the_tolerant_parser_too() -> None:
    from agentcell.orchestrator.definitions._loader import parse_agent_text

    # Not strict YAML (the colon in the description), so the tolerant parser reads it
    # entry by entry: an alias in one entry must not expand there either.
    text = "---\nname: t\ndescription: Triggers on: 'x'\ntools: &t [Read]\nx: *t\n---\nbody\n"
    loaded = parse_agent_text(text, path="t.md")
    assert loaded.definitions == []
    assert any("alias" in d.message for d in loaded.diagnostics)


def test_a_fifo_or_other_non_regular_file_in_an_agents_folder_is_skipped(tmp_path: Path) -> None:
    import os

    from agentcell.orchestrator.definitions._loader import load_agents_dir

    (tmp_path / "good.md").write_text("---\nname: good\ndescription: d\n---\nbody\n")
    os.mkfifo(tmp_path / "fifo.md")  # nobody ever writes to it: reading it would hang
    loaded = load_agents_dir(tmp_path)
    assert [d.name for d in loaded.definitions] == ["good"]
    [diagnostic] = loaded.diagnostics
    assert diagnostic.path.endswith("fifo.md") and "not a regular file" in diagnostic.message


def test_a_huge_agent_file_is_skipped_not_read_whole(tmp_path: Path) -> None:
    from agentcell.orchestrator.definitions._loader import load_agents_dir

    with open(tmp_path / "big.md", "wb") as f:
        f.truncate(64 * 2**20)  # sparse: costs nothing on disk
    loaded = load_agents_dir(tmp_path)
    assert loaded.definitions == []
    assert "too large" in loaded.diagnostics[0].message


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("heartbeat_timeout_s", 1e-9),
        ("heartbeat_timeout_s", 1e12),
        ("max_workers", 10**9),
        ("subagent_timeout_s", 1e300),
        ("subagent_max_turns", 10**15),
        ("timeout_grace_s", 1e9),
        ("background_wait_s", 1e12),
        ("max_depth", 10**6),
        ("warm_spares", 10**6),
    ],
)
def test_absurd_settings_are_refused(field: str, value: float) -> None:
    from agentcell.orchestrator import Settings
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match=field):
        Settings(**{field: value})


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("memoryLimitMb", "100000000000000000000000"),
        ("maxTurns", 10**12),
        ("timeout_s", 1e300),
        ("cpu_limit_s", 10**12),
        ("max_tool_calls", 10**15),
        ("max_tool_output_bytes", 2**40),
        ("max_depth", 10**6),
    ],
)
def test_absurd_definition_numbers_are_refused_with_a_line(key: str, value: object) -> None:
    from agentcell.orchestrator.definitions._loader import parse_agent_text

    loaded = parse_agent_text(f"---\nname: t\n{key}: {value}\n---\nbody\n", path="t.md")
    assert loaded.definitions == [], loaded.definitions
    assert any("at most" in d.message for d in loaded.diagnostics), loaded.diagnostics


def test_sane_numbers_still_load() -> None:
    from agentcell.orchestrator import Settings
    from agentcell.orchestrator.definitions._loader import parse_agent_text

    Settings(heartbeat_timeout_s=30, max_workers=200, subagent_timeout_s=3600)
    text = "---\nname: t\nmaxTurns: 500\nmemoryLimitMb: 4096\ntimeout_s: 7200\n---\nbody\n"
    [definition] = parse_agent_text(text, path="t.md").definitions
    assert (definition.max_turns, definition.memory_limit_mb) == (500, 4096)


# --- 9. hostile model servers ---------------------------------------------------------


class HostileServer:
    """An HTTP server on 127.0.0.1 that answers every POST with ``body()``'s bytes.

    A thread of its own, so that a client that blocked its event loop would be seen to.
    """

    def __init__(self, body: Callable[[], Iterator[bytes]], headers: str = "") -> None:
        self._body = body
        self._headers = headers
        self._sock = socket.create_server(("127.0.0.1", 0))
        self.port = self._sock.getsockname()[1]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def __enter__(self) -> HostileServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        with contextlib.suppress(OSError):  # wakes an accept no client came to
            self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()
        self._thread.join(10)

    def _serve(self) -> None:
        with contextlib.suppress(OSError):
            conn, _ = self._sock.accept()
            with conn:
                head = b""
                while b"\r\n\r\n" not in head:
                    head += conn.recv(65536)
                length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
                rest = head.split(b"\r\n\r\n", 1)[1]
                while len(rest) < length:
                    rest += conn.recv(65536)
                conn.sendall(
                    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                    + self._headers.encode()
                    + b"\r\n"
                )
                for piece in self._body():
                    if self._stop.is_set():
                        return
                    conn.sendall(piece)


async def stream_error(port: int, **options: Any) -> ModelError:
    from agentcell.protocol import UserMessage
    from agentcell.worker.models import ModelRequest, OpenAIChatModel
    from agentcell.worker.models._http_options import HttpOptions

    url = f"http://127.0.0.1:{port}/v1"
    http = HttpOptions(base_url=url, api_key="k", max_retries=0, **options)
    model = OpenAIChatModel("m", http=http)
    try:
        with pytest.raises(ModelError) as info:
            async for _ in model.stream(ModelRequest(messages=[UserMessage(content="hi")])):
                pass
    finally:
        await model.aclose()
    return info.value


def _data_lines(total: int) -> Iterator[bytes]:
    line = b"data: " + b"x" * 4090 + b"\n"  # data lines, never the blank line ending an event
    for _ in range(total // len(line)):
        yield line


async def test_an_endless_event_is_cut_at_the_event_limit_named_in_the_error() -> None:
    with HostileServer(lambda: _data_lines(40 * 2**20)) as server:
        error = await asyncio.wait_for(stream_error(server.port), 60)
    assert "event of more than 16777216 bytes (the limit of one event)" in str(error)


def test_the_sse_parser_is_linear_in_lines_of_one_event() -> None:
    from agentcell.worker.models._http import SSEDecoder

    # A million one-byte data lines in one event: joining them as they come (the old
    # parser) copies ~10^12 bytes and never finishes; kept as lines, they are joined once.
    decoder = SSEDecoder()
    chunk = b"data: x\n" * 1000
    for _ in range(1000):
        assert decoder.feed(chunk) == []
    [(_, data)] = decoder.feed(b"\n")
    assert data == b"\n".join([b"x"] * 1_000_000)


def test_a_long_line_fed_in_small_pieces_is_buffered_by_appending() -> None:
    from agentcell.worker.models._http import SSEDecoder

    # A 4 MB line in 16-byte pieces: re-joining the tail with every piece (the old parser)
    # copies ~5 * 10^11 bytes; appending to one buffer copies each byte once.
    decoder = SSEDecoder()
    assert decoder.feed(b"data: ") == []
    for _ in range(250_000):
        assert decoder.feed(b"y" * 16) == []
    [(_, data)] = decoder.feed(b"\n\n")
    assert data == b"y" * 4_000_000


async def test_an_endless_answer_is_cut_at_the_response_limit() -> None:
    delta = b'data: {"choices":[{"index":0,"delta":{"content":"' + b"z" * 1000 + b'"}}]}\n\n'

    def endless() -> Iterator[bytes]:
        for _ in range(100_000):
            yield delta

    with HostileServer(endless) as server:
        error = await asyncio.wait_for(stream_error(server.port, max_response_bytes=2**20), 60)
    assert "passed 1048576 bytes (the max_response_bytes model option)" in str(error)


async def test_a_trickle_of_bytes_ends_at_the_request_deadline() -> None:
    def trickle() -> Iterator[bytes]:
        for _ in range(2000):  # one byte at a time: each resets the idle timeout
            time.sleep(0.01)  # the hostile pace itself, not synchronisation
            yield b":"

    with HostileServer(trickle) as server:
        error = await asyncio.wait_for(stream_error(server.port, deadline=0.5, timeout=5), 60)
    assert "did not finish within its 0.5 s deadline" in str(error)
    assert "deadline" in str(error)


async def test_a_gzip_bomb_is_inflated_in_bounded_steps_and_cut() -> None:
    packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    line = b"data: " + b"x" * 4090 + b"\n"
    bomb = b"".join(packer.compress(line * 256) for _ in range(100)) + packer.flush()
    assert len(bomb) < 2**20  # about 100 MiB once inflated

    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0)
            ticks += 1

    with HostileServer(lambda: iter([bomb]), headers="content-encoding: gzip\r\n") as server:
        tick = asyncio.create_task(ticker())
        try:
            error = await asyncio.wait_for(stream_error(server.port), 60)
        finally:
            tick.cancel()
    assert "event of more than 16777216 bytes" in str(error)
    assert ticks > 0  # the loop kept turning meanwhile


def test_the_default_subagent_wall_clock_limit_is_set() -> None:
    from agentcell.orchestrator import Settings

    assert Settings().subagent_timeout_s == 1800


@pytest.mark.parametrize("tokens", [-(10**12), 10**15])
async def test_a_server_reporting_absurd_usage_is_a_clear_error(tokens: int) -> None:
    body = (
        b'data: {"choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":"stop"}]}\n\n'
        b'data: {"choices":[],"usage":{"prompt_tokens":%d,"completion_tokens":1}}\n\n'
        b"data: [DONE]\n\n" % tokens
    )
    with HostileServer(lambda: iter([body])) as server:
        error = await asyncio.wait_for(stream_error(server.port), 60)
    assert "prompt_tokens" in str(error), error


# --- 5. open beneath the working directory; no writes through hard links -------------


@pytest.mark.parametrize("openat2", [True, False], ids=["openat2", "walk"])
def test_open_beneath_refuses_a_symlink_swapped_in_after_the_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, openat2: bool
) -> None:
    import errno
    import os

    from agentcell.worker.tools import _paths

    monkeypatch.setattr(_paths, "_openat2_missing", not openat2)
    work, outside = tmp_path / "work", tmp_path / "outside"
    (work / "sub").mkdir(parents=True)
    outside.mkdir()
    (outside / "secret.txt").write_text("outside")
    (work / "sub" / "f.txt").write_text("inside")
    root = _paths.real_root(work)
    checked = str(_paths.resolve_inside(work, "sub/f.txt"))
    # Between the check and the open, the directory becomes a link to outside ...
    (work / "sub").rename(work / "sub.old")
    (work / "sub").symlink_to(outside)
    (outside / "f.txt").write_text("outside")
    with pytest.raises(OSError) as caught:
        _paths.open_beneath(root, checked, os.O_RDONLY)
    assert caught.value.errno == errno.ELOOP
    # ... or the file itself does.
    (work / "sub").unlink()
    (work / "sub.old").rename(work / "sub")
    (work / "sub" / "f.txt").unlink()
    (work / "sub" / "f.txt").symlink_to(outside / "secret.txt")
    with pytest.raises(OSError):
        _paths.open_beneath(root, checked, os.O_RDONLY)
    (work / "sub" / "f.txt").unlink()
    (work / "sub" / "f.txt").write_text("inside")
    fd = _paths.open_beneath(root, checked, os.O_RDONLY)
    with os.fdopen(fd, "rb") as f:
        assert f.read() == b"inside"


async def test_file_tools_refuse_to_write_through_a_hard_link(tmp_path: Path) -> None:
    import os

    from agentcell.worker.tools import ToolError
    from agentcell.worker.tools._files import EditFile, WriteFile

    work, outside = tmp_path / "work", tmp_path / "outside"
    work.mkdir()
    outside.mkdir()
    (outside / "passwd").write_text("root:x:0:0\n")
    os.link(outside / "passwd", work / "innocent.txt")  # same file, a name inside
    ctx = ToolContext(workdir=work)
    for tool, args in (
        (WriteFile(), {"path": "innocent.txt", "content": "owned\n"}),
        (EditFile(), {"path": "innocent.txt", "old_string": "root", "new_string": "owned"}),
    ):
        with pytest.raises(ToolError, match="has 2 hard links"):
            await tool.execute(tool.parse_args(json.dumps(args)), ctx)
    assert (outside / "passwd").read_text() == "root:x:0:0\n"
