"""Spares connect to the default provider before their Hello, and a connection that went
stale while the spare waited is replaced without an error."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

from agentcell.orchestrator import AgentDefinition, Orchestrator, Settings
from agentcell.protocol import RunStatus, UserMessage
from agentcell.worker.models import OpenAIChatModel, complete
from agentcell.worker.models._base import ModelRequest
from agentcell.worker.models._client import _prepared, prepare_connection
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


async def test_a_spare_is_connected_before_its_hello_and_the_run_uses_it(
    spawned: SpawnRecorder, model_server: ModelServer, tmp_path: Path
) -> None:
    model_server.add("done")
    async with orchestrator(tmp_path, model_server) as orch:
        await orch.pool.warmed()  # every spare has said Hello
        # Its connection was open before it said Hello, before any run existed.
        assert len(model_server.accepted) == 1
        prepared = model_server.accepted[0]
        result = await orch.delegate("worker", "hi")
    assert result.status is RunStatus.COMPLETED, result.error
    [request] = model_server.requests
    assert request.client_port == prepared  # the run's request came on that connection


async def test_a_connection_closed_while_the_spare_waited_is_replaced(
    spawned: SpawnRecorder, tmp_path: Path
) -> None:
    with ModelServer(idle_timeout=0.2) as server:  # closes idle connections, as servers do
        server.add("done")
        async with orchestrator(tmp_path, server) as orch:
            await orch.pool.warmed()
            assert len(server.accepted) == 1
            stale = server.accepted[0]
            await until(lambda: server.open_connections == 0, "the server to close it")
            result = await orch.delegate("worker", "hi")
    assert result.status is RunStatus.COMPLETED, result.error
    [request] = server.requests
    assert request.client_port != stale  # a new connection, made without an error
    assert result.text == "done"


async def test_a_model_adopts_only_a_client_made_its_way(model_server: ModelServer) -> None:
    model_server.add("one", "two")
    url = model_server.openai_base_url
    assert await prepare_connection(url)
    assert await prepare_connection("http://127.0.0.1:9/v1") is False  # nothing listens
    assert not await prepare_connection("ftp://127.0.0.1/")
    other = OpenAIChatModel("m", base_url=url, max_connections=2)  # made another way
    adopter = OpenAIChatModel("m", base_url=url)
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
