"""The parent's relay speaks HTTP/2 to a model server that offers it (TLS, ALPN ``h2``):
real sub-agents' requests against a server that speaks nothing else."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from agentcell.orchestrator import AgentDefinition, Orchestrator, Settings
from agentcell.orchestrator.model_relay._relay import ModelPools
from h2_model_server import H2ModelServer, serving_openai

KEY = "sk-h2-relay-key-0099"
SUB_AGENTS = 12


@pytest.fixture
def h2_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[H2ModelServer]:
    with serving_openai(H2ModelServer(), KEY, tmp_path, monkeypatch) as server:
        yield server


async def test_relayed_model_requests_go_over_http2_when_the_server_offers_it(
    h2_server: H2ModelServer, tmp_path: Path
) -> None:
    worker = AgentDefinition(
        name="worker", description="w", tools=[], model="openai:test", source="test"
    )
    orch = Orchestrator(
        settings=Settings(model="openai:test", approval="allow", max_workers=4, warm_spares=0),
        workdir=tmp_path,
        agents=[worker],
        load_agent_files=False,
        record=False,
    )
    async with orch:
        results = await orch.map("worker", [f"q{i}" for i in range(SUB_AGENTS)], concurrency=6)
    assert [r.status.value for r in results] == ["completed"] * SUB_AGENTS, results[0].error
    assert {r.text for r in results} == {"over h2"}
    assert len(h2_server.bodies) == SUB_AGENTS
    assert {c.protocol for c in h2_server.connections} == {"h2"}
    # At most one connection per shard of the parent's pools, each carrying several
    # sub-agents' requests, and every request sent with the parent's key.
    assert len(h2_server.connections) <= ModelPools.SHARDS
    assert sum(c.streams for c in h2_server.connections) == SUB_AGENTS
    assert {h["authorization"] for h in h2_server.headers} == {f"Bearer {KEY}"}
