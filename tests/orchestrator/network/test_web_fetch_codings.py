"""web_fetch and the model route read compressed bodies: every content-coding layer, in
bounded steps, off the parent's event loop (web_fetch), the size cap on decoded bytes.

Before (issue 39): web_fetch read ``aiter_bytes()`` (httpx decoding each raw chunk whole,
before the 2 MiB check) and rebuilt a Response with ``content-encoding`` still set, which
httpx decoded again: every gzip page failed (``incorrect header check``), and a bomb of a
few hundred bytes took the parent to hundreds of MiB on its event loop (``gzip, gzip``
had no bound at all). The model route read one layer, and no br.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import threading
import tracemalloc
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import brotli
import pytest
from agentcell.orchestrator.model_relay._relay import inflated_chunks
from agentcell.orchestrator.network import _web_fetch
from agentcell.protocol import RunStatus, UserMessage
from agentcell.worker import CodingError, ContentDecoder
from agentcell.worker.models import (
    Inflater,
    ModelError,
    ModelErrorKind,
    ModelRequest,
    OpenAIChatModel,
    complete,
)
from agentcell.worker.models._http_options import HttpOptions
from compressing_pages import BOMB_BYTES, BOMBS, HTML, TEXT, compressing, deflate_raw, encoded
from conftest import SpawnRecorder
from model_servers import ModelServer, Reply, serving
from network_runs import SEP, run_calls

STEP = 64 * 1024
PAGE = HTML.encode()

#: path: (Content-Encoding, body); each decodes to ``PAGE``.
GOOD = {
    "/gzip": ("gzip", gzip.compress(PAGE)),
    "/x-gzip": ("x-gzip", gzip.compress(PAGE)),
    "/deflate-zlib": ("deflate", zlib.compress(PAGE)),
    "/deflate-raw": ("deflate", deflate_raw(PAGE)),
    "/br": ("br", brotli.compress(PAGE)),
    "/gzip-then-br": ("gzip, br", encoded(PAGE, "gzip, br")),
    "/deflate-then-gzip": ("deflate, gzip", encoded(PAGE, "deflate, gzip")),
    "/capitals": ("GZip", gzip.compress(PAGE)),
}

#: path: (Content-Encoding, body, the one-line refusal expected).
BAD = {
    "/compress": ("compress", PAGE, "the content coding 'compress' is not supported"),
    "/zstd": ("zstd", PAGE, "the content coding 'zstd' is not supported"),
    "/four-layers": (
        "gzip, gzip, gzip, gzip",
        encoded(PAGE, "gzip, gzip, gzip, gzip"),
        "at most 3 content codings are read",
    ),
    "/corrupt": ("gzip", b"\x1f\x8b" + b"not gzip at all" * 10, "the gzip stream is corrupt"),
    "/corrupt-br": ("br", b"not brotli at all" * 10, "the br stream is corrupt"),
    "/truncated": ("gzip", gzip.compress(PAGE)[:-100], "the gzip stream ends early"),
    # br's listed last, so undone first: this body was br'd first, so it is refused
    "/wrong-order": ("gzip, br", encoded(PAGE, "br, gzip"), "stream is corrupt"),
}


async def never(url: str) -> bool:
    return False


@pytest.fixture(scope="module")
def pages() -> Iterator[int]:
    served = {path: page for path, page in GOOD.items()}
    served |= {path: (coding, body) for path, (coding, body, _) in BAD.items()}
    served |= {f"/bomb/{name}": bomb() for name, bomb in BOMBS.items()}
    with serving(compressing(served)) as port:
        yield port


async def fetch(port: int, path: str) -> tuple[str, bool]:
    arguments = json.dumps({"url": f"http://127.0.0.1:{port}{path}"})
    return await _web_fetch.web_fetch(arguments, [f"127.0.0.1:{port}"], ask=never)


@pytest.mark.parametrize("path", list(GOOD))
async def test_a_compressed_page_is_decoded_once_every_layer(pages: int, path: str) -> None:
    text, is_error = await fetch(pages, path)
    assert not is_error, text
    assert f"{path} (200)]" in text and TEXT in text and "# Title" in text, text[:300]


@pytest.mark.parametrize("path", list(BAD))
async def test_a_body_that_cannot_be_decoded_is_a_one_line_refusal(pages: int, path: str) -> None:
    text, is_error = await fetch(pages, path)
    assert is_error, text[:300]
    assert text.startswith(f"web_fetch refused http://127.0.0.1:{pages}{path}: "), text[:300]
    assert BAD[path][2] in text and "\n" not in text, text[:300]


class _Probe:
    """What every decompress call did (zlib's and brotli's, spied): where it ran, how
    many bytes it gave."""

    def __init__(self) -> None:
        self.on_loop = 0  # calls on the event loop's thread
        self.off_loop = 0
        self.biggest = 0  # bytes given by one call

    def saw(self, out: bytes) -> bytes:
        if threading.current_thread() is threading.main_thread():
            self.on_loop += 1
        else:
            self.off_loop += 1
        self.biggest = max(self.biggest, len(out))
        return out


class _Spied:
    def __init__(self, real: Any, probe: _Probe) -> None:
        self._real, self._probe = real, probe

    def __getattr__(self, name: str) -> Any:  # eof, unconsumed_tail, is_finished, …
        return getattr(self._real, name)


class _SpiedZlib(_Spied):
    """A zlib decompressor whose calls the probe sees."""

    def decompress(self, *args: Any) -> bytes:
        return self._probe.saw(self._real.decompress(*args))


class _SpiedBrotli(_Spied):
    """A brotli decompressor whose calls the probe sees (``process`` and no
    ``decompress``, as httpx tells brotli from brotlicffi)."""

    def process(self, *args: Any, **options: Any) -> bytes:
        return self._probe.saw(self._real.process(*args, **options))


@pytest.mark.parametrize("bomb", list(BOMBS))
async def test_a_bomb_is_refused_at_the_cap_without_the_parents_memory_or_loop(
    pages: int, bomb: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    probe = _Probe()
    real_zlib, real_brotli = zlib.decompressobj, brotli.Decompressor
    monkeypatch.setattr(zlib, "decompressobj", lambda *a: _SpiedZlib(real_zlib(*a), probe))
    monkeypatch.setattr(brotli, "Decompressor", lambda: _SpiedBrotli(real_brotli(), probe))
    ticks = 0

    async def ticker() -> None:  # runs whenever the loop is free
        nonlocal ticks
        while True:
            await asyncio.sleep(0)
            ticks += 1

    coding, body = BOMBS[bomb]()
    assert len(body) < 200 * 1024
    tracemalloc.start()
    tick = asyncio.create_task(ticker())
    try:
        text, is_error = await fetch(pages, f"/bomb/{bomb}")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tick.cancel()
        tracemalloc.stop()
    assert is_error and "the page is larger than 2048 KiB" in text, text[:300]
    assert "\n" not in text
    # The parent held about the cap, not the bomb's 128 MiB (the old code: all of it).
    assert peak < 16 * 1024 * 1024 < BOMB_BYTES, peak
    # Each decompress call gave at most a step, and none ran on the event loop's thread.
    assert probe.off_loop >= 32 and probe.on_loop == 0, vars(probe)  # 2 MiB: 32+ steps
    assert probe.biggest <= STEP, vars(probe)
    assert ticks > 0  # and the loop turned meanwhile


async def test_web_fetch_reads_a_compressed_page_and_refuses_a_bomb_from_a_real_sub_agent(
    spawned: SpawnRecorder, tmp_path: Path, openai_served: ModelServer, pages: int
) -> None:
    calls = [
        ("web_fetch", {"url": f"http://127.0.0.1:{pages}/gzip-then-br"}),
        ("web_fetch", {"url": f"http://127.0.0.1:{pages}/bomb/gzip-gzip"}),
        ("web_fetch", {"url": f"http://127.0.0.1:{pages}/compress"}),
    ]
    network = [f"127.0.0.1:{pages}"]
    tracemalloc.start()
    try:
        result = await run_calls(
            tmp_path, calls, openai_served, tools=["WebFetch"], network=network
        )
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert result.status is RunStatus.COMPLETED, result
    page, bomb, unknown = result.text.split(SEP)
    assert "/gzip-then-br (200)]" in page and TEXT in page, page[:300]
    assert "the page is larger than 2048 KiB" in bomb, bomb
    assert "the content coding 'compress' is not supported" in unknown, unknown
    assert peak < 32 * 1024 * 1024 < BOMB_BYTES, peak  # the parent's, this process's


# -- the model route --------------------------------------------------------------------

FINISH = (
    b'data: {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}\n\n'
    b'data: {"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 3}}\n\n'
    b"data: [DONE]\n\n"
)


def sse(text: str) -> bytes:
    doc = {"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}]}
    return b"data: " + json.dumps(doc).encode() + b"\n\n" + FINISH


REQUEST = ModelRequest(messages=[UserMessage(content="hi")])


async def test_the_model_route_reads_a_stream_gzipped_then_brd(
    openai_served: ModelServer,
) -> None:
    body = encoded(sse("hello through two layers"), "gzip, br")
    openai_served.add(Reply(raw=body, headers={"content-encoding": "gzip, br"}))
    model = OpenAIChatModel("m", http=HttpOptions(base_url=openai_served.openai_base_url))
    try:
        response = await complete(model, REQUEST)
    finally:
        await model.aclose()
    assert response.text == "hello through two layers"


@pytest.mark.parametrize(
    ("coding", "body", "said"),
    [
        ("compress", b"data: x\n\n", "the content coding 'compress' is not supported"),
        ("gzip", b"\x1f\x8bnot gzip", "the gzip stream is corrupt"),
    ],
)
async def test_the_model_route_says_which_provider_sent_what_it_cannot_decode(
    openai_served: ModelServer, coding: str, body: bytes, said: str
) -> None:
    openai_served.add(Reply(raw=body, headers={"content-encoding": coding}))
    model = OpenAIChatModel("m", http=HttpOptions(base_url=openai_served.openai_base_url))
    try:
        with pytest.raises(ModelError) as caught:
            await complete(model, REQUEST)
    finally:
        await model.aclose()
    assert caught.value.kind is ModelErrorKind.PROTOCOL
    assert str(caught.value).startswith("openai: the server compressed the stream"), caught.value
    assert said in str(caught.value)


async def test_the_relay_decodes_a_stacked_bomb_in_bounded_pieces_as_asked() -> None:
    _, bomb = BOMBS["gzip-gzip"]()

    async def one_read() -> Any:
        yield bomb

    pieces = inflated_chunks(one_read(), Inflater("gzip, gzip", "openai"))
    sizes = [len(await anext(pieces)) for _ in range(20)]
    await pieces.aclose()
    assert max(sizes) <= STEP, sizes


# -- the decoder itself ----------------------------------------------------------------


@pytest.mark.parametrize("path", list(GOOD))
def test_the_decoder_reads_a_body_split_anywhere(path: str) -> None:
    coding, body = GOOD[path]
    decoder = ContentDecoder(coding)
    out = [piece for at in range(len(body)) for piece in decoder.pieces(body[at : at + 1])]
    decoder.finish()
    assert b"".join(out) == PAGE


def test_the_decoder_refuses_a_fourth_layer_and_an_unknown_coding() -> None:
    ContentDecoder("gzip, identity, br, deflate")  # identity is no layer
    for header in ("gzip, gzip, gzip, gzip", "gzip, compress", "bogus"):
        with pytest.raises(CodingError):
            ContentDecoder(header)
