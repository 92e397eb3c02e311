"""What the provider tests share: the local server fixture, no-wait retries, and helpers
that run a stream to its end or to its error."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from agentcell.worker.models import Model, ModelError, ModelRequest, ToolCallStart, ToolSpec, _http
from agentcell.worker.models._base import ModelResponse, TextPart
from model_servers import ModelServer

READ = ToolSpec(
    name="read",
    description="Read a file.",
    parameters={"type": "object", "properties": {"path": {"type": "string"}}},
)


@pytest.fixture
def sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Retry delays asked for, in order; nothing really waits."""
    delays: list[float] = []

    async def fake_sleep(delay: float) -> None:
        delays.append(delay)

    monkeypatch.setattr(_http, "sleep", fake_sleep)
    return delays


@pytest.fixture
def server() -> Iterator[ModelServer]:
    with ModelServer() as s:
        yield s
    assert not s.errors, s.errors


async def run_stream(model: Model, request: ModelRequest) -> tuple[str, ModelResponse]:
    """The streamed text joined, and the final response (which must come last)."""
    parts: list[str] = []
    final: ModelResponse | None = None
    async for item in model.stream(request):
        assert final is None, "nothing may follow the ModelResponse"
        if isinstance(item, TextPart):
            parts.append(item.text)
        elif not isinstance(item, ToolCallStart):
            final = item
    assert final is not None
    assert "".join(parts) == final.text
    return "".join(parts), final


async def fail_stream(model: Model, request: ModelRequest) -> tuple[str, ModelError]:
    """The text streamed before the error, and the error."""
    parts: list[str] = []
    with pytest.raises(ModelError) as info:
        async for item in model.stream(request):
            assert isinstance(item, TextPart | ToolCallStart), "a failing stream must not finish"
            if isinstance(item, TextPart):
                parts.append(item.text)
    return "".join(parts), info.value
