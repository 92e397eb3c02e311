"""The body of a sub-agent's first model request, known before its process runs.

A relayed child's first request is fixed by its spec: the system prompt, the task, the
tool specs of its registry, its model options. The parent builds that body here with the
child's own code — ``child_registry`` for the tools, the provider class the child
resolves, over a transport that keeps the body and goes no further — and sends it
upstream while the child's process is still starting (``orchestrator/delegation/
_call_ahead.py``). The child then sends its own first request as always; the parent
hands it the answer already under way only if the two bodies are the same bytes.

Where the first request depends on what only the child sees, there is no prediction:
MCP servers (their tools are listed in the child), a history (compaction may run before
the first turn), a model object given in code, a model not relayed by the parent.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentcell.protocol import AgentSpec, SystemMessage, UserMessage
from agentcell.worker.models import ModelRequest, resolve_model
from agentcell.worker.tools import Tool


class _Kept(BaseException):
    """Stops the provider at its first send (a BaseException: no retry loop keeps it)."""

    def __init__(self, body: bytes) -> None:
        self.body = body


class _KeepingTransport:
    async def open(self, body: bytes) -> Any:
        raise _Kept(bytes(body))

    async def aclose(self) -> None:
        return None


def predictable(spec: AgentSpec) -> bool:
    """Whether the child's first request is fixed by ``spec`` alone."""
    return bool(spec.model_via_parent and not spec.mcp_servers and not spec.history)


async def first_request_body(spec: AgentSpec, custom_tools: Sequence[Tool]) -> bytes | None:
    """The body the child of ``spec`` will send first (``custom_tools``: the tool objects
    its Start carries), or None when it cannot be known here."""
    if not predictable(spec):
        return None
    from agentcell.worker.child._agent import child_registry  # the engine's own module

    registry = child_registry(spec, custom_tools, None)  # type: ignore[arg-type]
    messages: list[Any] = [SystemMessage(content=spec.system_prompt)] if spec.system_prompt else []
    messages.append(UserMessage(content=spec.prompt))
    request = ModelRequest(messages=messages, tools=registry.specs(), max_output_tokens=None)
    model = resolve_model(spec.model, {**spec.model_options, "transport": _KeepingTransport()})
    stream = model.stream(request)
    try:
        async for _ in stream:
            break
    except _Kept as kept:
        return kept.body
    finally:
        await stream.aclose()  # type: ignore[attr-defined]
        await model.aclose()
    return None
