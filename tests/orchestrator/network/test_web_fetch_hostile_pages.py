"""A hostile page on an allowed host: web_fetch turns HTML into markdown in the parent, so
the page's shape must cost its sub-agent a worse answer, never the parent.

Before: a page of nested ``<div>``s raised ``RecursionError`` out of the parent's web_fetch
(the run ended ``error: the parent could not run this sub-agent``), and 2 MiB of small tags
held the parent's event loop — every sibling's relay, the approval prompt — for seconds.
"""

from __future__ import annotations

import asyncio
import gc
import http.server
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from agentcell.orchestrator import AgentDefinition, Orchestrator, Settings
from agentcell.orchestrator.network import _web_fetch
from agentcell.protocol import RunStatus
from conftest import SpawnRecorder
from model_servers import ModelServer, serving
from network_runs import run_calls

from agentcell.testing import FunctionModel

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
    from agentcell.orchestrator.network._web_fetch import UrlRules, web_fetch
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


async def test_a_url_with_control_characters_is_refused_in_one_line(
    spawned: SpawnRecorder, tmp_path: Path, openai_served: ModelServer
) -> None:
    urls = ["http://127.0.0.1:9/\x1b[2J\r", "http://127.0.0.1:9/\x85"]
    calls = [("web_fetch", {"url": url}) for url in urls]
    result = await run_calls(tmp_path, calls, openai_served, tools=["WebFetch"], network=True)
    assert result.status is RunStatus.COMPLETED, result
    outputs = [
        m["content"] for m in openai_served.requests[-1].body["messages"] if m["role"] == "tool"
    ]
    assert len(outputs) == 2, outputs
    for output in outputs:
        assert output.split("refused ")[1].startswith(
            ("http://127.0.0.1:9/\\x1b[2J\\r:", "http://127.0.0.1:9/\\x85:")
        ), output
        assert "it has control characters or lone surrogates" in output, output
        assert "\x1b" not in output and "\r" not in output and "\x85" not in output


async def _forge_surrogate_fetch(messages: list[Any], tools: list[Any]) -> Any:
    """A compromised child's own code: a web_fetch request whose JSON holds a lone
    surrogate (its model's tool call would have been refused as bad JSON in the child)."""
    from agentcell.worker.child._main import ChildLink

    link = next(o for o in gc.get_objects() if isinstance(o, ChildLink))
    said, is_error = await link.delegate("call-1", "web_fetch", '{"url": "http://x.test/\\ud800"}')
    return f"FETCH SAID {is_error} {said}"


async def test_a_forged_url_with_a_lone_surrogate_is_refused_not_a_parent_traceback(
    spawned: SpawnRecorder, tmp_path: Path
) -> None:
    # JSON's "\ud800" decodes to a lone surrogate in the parent: its reply quoting the URL
    # could not be encoded, and the run ended with the parent's traceback.
    model = FunctionModel(_forge_surrogate_fetch, name="function:forger")
    definition = AgentDefinition(
        name="forger", description="forger", tools=["web_fetch"], model=model.name
    )
    orch = Orchestrator(
        settings=Settings(approval="allow", max_workers=1, warm_spares=0, network=True),
        workdir=tmp_path, agents=[definition], models={model.name: model},
        load_agent_files=False, record=False,
    )  # fmt: skip
    async with orch:
        result = await asyncio.wait_for(orch.delegate("forger", "go"), 60)
    assert result.status is RunStatus.COMPLETED, result
    assert result.text.startswith("FETCH SAID True web_fetch refused"), result.text
    assert "http://x.test/\\ud800: it has control characters or lone surrogates" in result.text
