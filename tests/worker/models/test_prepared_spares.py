"""A spare opens no connection to the model (its requests go through the parent), a
connection that went stale in the parent's pool is replaced without an error, and
``prepare_connection`` (still used by the bench's direct-route profile) works."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import psutil
from agentcell.orchestrator import AgentDefinition, Orchestrator, Settings
from agentcell.protocol import RunStatus, UserMessage
from agentcell.worker.models import OpenAIChatModel, complete
from agentcell.worker.models._base import ModelRequest
from agentcell.worker.models._http_options import HttpOptions
from agentcell.worker.models.transports._client import _prepared, prepare_connection
from conftest import SpawnRecorder
from model_servers import ModelServer

STEP_TIMEOUT_S = 60.0


async def until(condition: Callable[[], bool], what: str) -> None:
    """Wait for observable state (the server's connection table), never for time."""
    try:
        async with asyncio.timeout(STEP_TIMEOUT_S):
            while not condition():  # noqa: ASYNC110 - the state lives in the server's threads
                await asyncio.sleep(0.005)
    except TimeoutError:
        raise AssertionError(f"timed out waiting for {what}") from None


def orchestrator(tmp_path: Path, server: ModelServer) -> Orchestrator:
    settings = Settings(
        model="openai:gpt-test",
        approval="allow",
        max_workers=1,
        warm_spares=1,
        model_options={"openai": {"base_url": server.openai_base_url}},
    )
    worker = AgentDefinition(
        name="worker",
        description="answers once",
        system_prompt="You are a worker.",
        tools=[],
        model="inherit",
        source="test",
    )
    return Orchestrator(
        settings=settings, workdir=tmp_path, agents=[worker], load_agent_files=False, record=False
    )


async def test_a_spare_opens_no_connection_and_the_run_is_sent_by_the_parent(
    spawned: SpawnRecorder, model_server: ModelServer, tmp_path: Path
) -> None:
    model_server.add("done")
    async with orchestrator(tmp_path, model_server) as orch:
        await orch.pool.warmed()  # every spare has said Hello
        assert model_server.accepted == []  # it has no business with the model server
        result = await orch.delegate("worker", "hi")
        assert result.status is RunStatus.COMPLETED, result.error
        [request] = model_server.requests
        parents = {c.laddr.port for c in psutil.Process().net_connections(kind="tcp")}
    assert request.client_port in parents  # the parent's own pooled connection


async def test_a_connection_closed_in_the_parents_pool_is_replaced(
    spawned: SpawnRecorder, tmp_path: Path
) -> None:
    with ModelServer(idle_timeout=0.2) as server:  # closes idle connections, as servers do
        server.add("first", "done")
        async with orchestrator(tmp_path, server) as orch:
            first = await orch.delegate("worker", "hi")
            assert first.status is RunStatus.COMPLETED, first.error
            stale = server.accepted[0]
            await until(lambda: server.open_connections == 0, "the server to close it")
            result = await orch.delegate("worker", "hi")
    assert result.status is RunStatus.COMPLETED, result.error
    assert server.requests[1].client_port != stale  # a new connection, made without an error
    assert result.text == "done"


async def test_a_model_adopts_only_a_client_made_its_way(model_server: ModelServer) -> None:
    model_server.add("one", "two")
    url = model_server.openai_base_url
    assert await prepare_connection(url)
    assert await prepare_connection("http://127.0.0.1:9/v1") is False  # nothing listens
    assert not await prepare_connection("ftp://127.0.0.1/")
    other = OpenAIChatModel("m", http=HttpOptions(base_url=url, max_connections=2))  # not the same
    adopter = OpenAIChatModel("m", http=HttpOptions(base_url=url))
    try:
        request = ModelRequest(messages=[UserMessage(content="hi")])
        await complete(other, request)
        assert url in _prepared  # not adopted: kept for a model made the same way
        assert model_server.requests[0].client_port != model_server.accepted[0]
        assert await prepare_connection(url)  # (the first one is closed and replaced)
        await complete(adopter, request)
        assert url not in _prepared
        assert model_server.requests[1].client_port == model_server.accepted[2]
    finally:
        await other.aclose()
        await adopter.aclose()
        for client, *_ in _prepared.values():
            await client.aclose()
        _prepared.clear()
