"""A hostile page on an allowed host: web_fetch turns HTML into markdown in the parent, so
the page's shape must cost its sub-agent a worse answer, never the parent.

Before: a page of nested ``<div>``s raised ``RecursionError`` out of the parent's web_fetch
(the run ended ``error: the parent could not run this sub-agent``), and 2 MiB of small tags
held the parent's event loop — every sibling's relay, the approval prompt — for seconds.
"""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from agentcell.orchestrator.delegation import _web_fetch
from agentcell.protocol import RunStatus
from conftest import SpawnRecorder
from model_servers import ModelServer, serving
from test_net_egress import run_calls

DEEP = "<html><body>" + "<div>" * 50_000 + "deep text"
FLAT = "<html><body>" + "<b>x</b>" * 100_000 + "</body></html>"


def _html_pages(pages: dict[str, str]) -> type[http.server.BaseHTTPRequestHandler]:
    """A handler answering each path's HTML (the last page for any other path)."""

    class Pages(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = pages.get(self.path, list(pages.values())[-1]).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    return Pages


@pytest.fixture
def hostile() -> Iterator[int]:
    with serving(_html_pages({"/deep": DEEP, "/flat": FLAT})) as port:
        yield port


async def test_a_page_nested_too_deep_is_passed_on_as_it_is(
    spawned: SpawnRecorder, tmp_path: Path, openai_served: ModelServer, hostile: int
) -> None:
    calls = [("web_fetch", {"url": f"http://127.0.0.1:{hostile}/deep"})]
    network = [f"127.0.0.1:{hostile}"]
    result = await run_calls(tmp_path, calls, openai_served, tools=["WebFetch"], network=network)
    assert result.status is RunStatus.COMPLETED, result
    assert "deep text" in result.text and "/deep (200)" in result.text, result.text[:300]


async def test_html_is_turned_into_markdown_off_the_event_loop_and_only_its_head(
    spawned: SpawnRecorder,
    tmp_path: Path,
    openai_served: ModelServer,
    hostile: int,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import markdownify

    seen: list[tuple[bool, int]] = []
    original = markdownify.markdownify

    def recording(html: str, **options: Any) -> str:
        seen.append((threading.current_thread() is threading.main_thread(), len(html)))
        return str(original(html, **options))

    monkeypatch.setattr(markdownify, "markdownify", recording)
    calls = [("web_fetch", {"url": f"http://127.0.0.1:{hostile}/flat"})]
    network = [f"127.0.0.1:{hostile}"]
    result = await run_calls(tmp_path, calls, openai_served, tools=["WebFetch"], network=network)
    assert result.status is RunStatus.COMPLETED, result
    assert len(FLAT) > _web_fetch.MAX_HTML_CHARS
    assert seen == [(False, _web_fetch.MAX_HTML_CHARS)], seen
    assert "**x**" in result.text and "page cut at" in result.text


def _redirecting_to(target: str) -> type[http.server.BaseHTTPRequestHandler]:
    class Hop(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(302)
            self.send_header("Location", target)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    return Hop


@pytest.mark.parametrize("kind", ["deny", "ask"])
async def test_a_redirect_does_not_carry_a_fetch_past_the_agents_own_rules(kind: str) -> None:
    """The child judges the URL it asks for; the parent follows the redirects, to any
    host the list allows. A ``WebFetch(domain:…)`` deny was never judged there: a page
    redirecting to the denied host brought its content back (a second attack review). Each
    hop is now judged by the agent's own rules: denied, or, for an ask rule, not followed
    (the model may fetch it with a call of its own, which asks)."""
    from agentcell.orchestrator.delegation._web_fetch import UrlRules, web_fetch
    from agentcell.worker import Rule

    async def never(url: str) -> bool:
        return False

    denied = _html_pages({"/x": "<p>DENIED-HOST-CONTENT</p>"})
    with serving(denied, host="127.0.0.2") as denied_port:
        target = f"http://127.0.0.2:{denied_port}/x"
        with serving(_redirecting_to(target)) as hop_port:
            entries = [f"127.0.0.1:{hop_port}", f"127.0.0.2:{denied_port}"]
            rule = (Rule.parse("web_fetch(domain:127.0.0.2)"),)
            rules = UrlRules(deny=rule) if kind == "deny" else UrlRules(ask=rule)
            first = json.dumps({"url": f"http://127.0.0.1:{hop_port}/go"})
            text, is_error = await web_fetch(first, entries, ask=never, rules=rules)
            assert "DENIED-HOST-CONTENT" not in text, text
            if kind == "deny":
                assert is_error and "denied by the rule web_fetch(domain:127.0.0.2)" in text
            else:
                assert "not followed" in text
            unjudged, _ = await web_fetch(first, entries, ask=never)
            assert "DENIED-HOST-CONTENT" in unjudged  # the same fetch, without the rules
