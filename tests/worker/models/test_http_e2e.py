"""The main-agent flow against a local OpenAI-compatible server: real httpx, real SSE,
the parent and every child talking to it at once."""

from __future__ import annotations

import asyncio
from pathlib import Path

from agentcell.orchestrator import Orchestrator, Settings
from agentcell.protocol import RunStatus
from conftest import SpawnRecorder
from http_script import delegating_responder
from model_servers import ModelServer


async def test_delegation_over_a_real_http_model(
    spawned: SpawnRecorder, model_server: ModelServer, tmp_path: Path, monkeypatch
) -> None:
    for name in ("a.txt", "b.txt", "c.py"):
        (tmp_path / name).write_text("x")
    monkeypatch.setenv("OPENAI_BASE_URL", model_server.openai_base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-real-key-1234")
    model_server.responder = delegating_responder
    settings = Settings(model="openai:gpt-test", approval="allow", max_workers=4, warm_spares=2)
    async with Orchestrator(settings=settings, workdir=tmp_path, load_agent_files=False) as orch:
        report = await asyncio.wait_for(orch.run("survey this folder"), 120)

    assert report.status is RunStatus.COMPLETED, report.error
    assert report.final_text.startswith("All done")
    by_description = {r.description: r for r in report.subagents}
    assert by_description["survey"].text == "found 2 text files"
    assert by_description["in the back"].text == "found 2 text files"
    assert by_description["in the back"].background
    doomed = by_description["doomed"]
    assert doomed.status is RunStatus.CRASHED
    assert "killed by signal SIGKILL" in doomed.error
    # Every process spoke HTTP to the server: the main agent and each sub-agent.
    systems = {r.body["messages"][0]["content"][:40] for r in model_server.requests}
    assert any("main agent of agentcell" in s for s in systems)
    assert len(systems) >= 3
    assert all(
        r.headers["authorization"] == "Bearer sk-test-not-a-real-key-1234"
        for r in model_server.requests
    )
    assert report.usage.total_tokens > 0
