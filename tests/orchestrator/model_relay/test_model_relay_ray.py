"""A Ray sub-agent's model requests cross its TCP channel to the parent by default (no key
on the node, no connection from it to the model server); ``model_route = "node"`` keeps
the direct route."""

from __future__ import annotations

import asyncio
from pathlib import Path

import msgspec
import psutil
import pytest
from agentcell.orchestrator import AgentDefinition, Orchestrator, Settings
from agentcell.orchestrator.backends.ray._local import RayHead
from agentcell.protocol import RunStatus
from model_servers import ModelServer, Reply
from relay_util import recorded_starts

pytestmark = pytest.mark.slow
KEY = "sk-ray-relay-key-0077"


@pytest.fixture
def head(ray_head: RayHead) -> RayHead:
    return ray_head  # the session's one head (conftest.py)


def orchestrator(head: RayHead, workdir: Path, route: str) -> Orchestrator:
    settings = Settings(model="openai:test", approval="allow", backend="ray", warm_spares=0)
    settings.ray.address = head.address
    settings.ray.model_route = route  # type: ignore[assignment]
    worker = AgentDefinition(
        name="worker", description="w", tools=[], model="openai:test", source="test"
    )
    return Orchestrator(
        settings=settings, workdir=workdir, agents=[worker], load_agent_files=False, record=False
    )


@pytest.mark.parametrize("route", ["orchestrator", "node"])
async def test_a_ray_sub_agents_model_route(
    head: RayHead,
    model_server: ModelServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    route: str,
) -> None:
    for key, value in head.env.items():
        if key.startswith("RAY_"):
            monkeypatch.setenv(key, value)
    monkeypatch.setenv("OPENAI_BASE_URL", model_server.openai_base_url)
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    starts = recorded_starts(monkeypatch)
    model_server.responder = lambda body, api: Reply(text="from the cluster")
    async with orchestrator(head, tmp_path, route) as orch:
        result = await asyncio.wait_for(orch.delegate("worker", "go"), 180)
        parents = {
            c.laddr.port
            for c in psutil.Process().net_connections(kind="tcp")
            if c.raddr and c.raddr.port == model_server.port
        }
    assert result.status is RunStatus.COMPLETED, result.error
    assert result.text == "from the cluster" and result.node
    (start,) = starts
    assert start.spec is not None
    holds_key = KEY.encode() in msgspec.msgpack.encode(start)
    if route == "orchestrator":
        assert start.spec.model_via_parent and not holds_key
        assert set(model_server.accepted) <= parents
    else:
        assert not start.spec.model_via_parent and holds_key
        assert not set(model_server.accepted) & parents  # the node's connection, not ours
