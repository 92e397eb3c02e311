"""What a child may hold of its model's base URL: no user or password, no query."""

from __future__ import annotations

import asyncio
from pathlib import Path

import msgspec
import pytest
from agentcell.orchestrator.model_relay._route import without_credentials
from agentcell.protocol import RunStatus
from agents import agent
from conftest import SpawnRecorder
from model_servers import Call, ModelServer, Reply
from relay_util import KEY, orchestrator, recorded_starts


@pytest.mark.parametrize(
    ("url", "kept"),
    [
        ("https://user:pw@api.example.com/v1?key=abc#x", "https://api.example.com/v1"),
        ("http://127.0.0.1:8080/v1", "http://127.0.0.1:8080/v1"),
        ("https://:pw@[::1]:9/v1", "https://[::1]:9/v1"),
        ("https://api.example.com", "https://api.example.com"),
    ],
)
def test_a_base_url_loses_its_credentials_and_query(url: str, kept: str) -> None:
    assert without_credentials(url) == kept


async def test_a_relayed_childs_start_holds_no_password_or_token_of_the_base_url(
    spawned: SpawnRecorder,
    tmp_path: Path,
    model_server: ModelServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    base = f"http://proxy-user:s3cret-pw@127.0.0.1:{model_server.port}/v1"
    monkeypatch.setenv("OPENAI_BASE_URL", base)
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    starts = recorded_starts(monkeypatch)
    model_server.add(Reply(text="through the parent"))
    async with orchestrator(tmp_path, agent("worker", [])) as orch:
        result = await asyncio.wait_for(orch.delegate("worker", "go"), 60)
    assert result.status is RunStatus.COMPLETED, result.error
    (start,) = starts
    assert start.spec is not None and start.spec.model_via_parent
    encoded = msgspec.msgpack.encode(start)
    assert b"s3cret-pw" not in encoded and b"proxy-user" not in encoded
    assert start.spec.model_options["base_url"] == f"http://127.0.0.1:{model_server.port}/v1"


async def test_a_base_url_with_a_query_keeps_it_after_the_endpoint_on_both_routes(
    spawned: SpawnRecorder,
    tmp_path: Path,
    model_server: ModelServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A gateway's ?api-version=… in the base URL: the main agent's requests (the direct
    # route) and a sub-agent's (relayed by the parent) both go to the endpoint with it.
    monkeypatch.setenv("OPENAI_BASE_URL", f"{model_server.openai_base_url}?api-version=2024-06")
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    model_server.add(
        Reply(tool_calls=[Call("task", {"subagent_type": "worker", "prompt": "go"})]),
        Reply(text="from the sub-agent"),
        Reply(text="done"),
    )
    async with orchestrator(tmp_path, agent("worker", [])) as orch:
        report = await asyncio.wait_for(orch.run("delegate it"), 60)
    assert report.ok, report.error
    assert [r.status for r in report.subagents] == [RunStatus.COMPLETED]
    assert [(r.path, r.query) for r in model_server.requests] == [
        ("/v1/chat/completions", "api-version=2024-06")
    ] * 3
