"""The Ray backend owns its tasks (the driver's reader, the watchdog, each run's
settling) in a group: closing the backend cancels and awaits every one of them.
Needs a local loopback-only Ray head (``local_ray_head``): slow, so only this one test."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from agentcell.orchestrator.backends.ray._local import RayHead
from agentcell.protocol import RunStatus

from agentcell import AgentDefinition, Orchestrator, Settings


@pytest.fixture
def head(ray_head: RayHead) -> RayHead:
    return ray_head  # the session's one head (conftest.py)


async def test_closing_the_ray_backend_ends_every_task_it_started(
    head: RayHead, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key, value in head.env.items():
        if key.startswith("RAY_"):
            monkeypatch.setenv(key, value)
    settings = Settings(backend="ray", warm_spares=0, model="scripted:echo", approval="deny")
    settings.ray.address = head.address
    orch = Orchestrator(
        settings=settings,
        agents=[AgentDefinition(name="echoer", model="scripted:echo", tools=[])],
        workdir=tmp_path,
        record=False,
    )
    async with orch:
        backend = orch.ray
        assert backend is not None
        result = await asyncio.wait_for(orch.delegate("echoer", "hello"), 120)
        reader, watchdog = backend._reader, backend._watchdog
        assert reader is not None and watchdog is not None and not reader.done()
        await backend.close()
        # Ended by the close itself, not at some later turn of the loop.
        assert reader.done() and watchdog.done()
    assert result.status is RunStatus.COMPLETED, result.error
