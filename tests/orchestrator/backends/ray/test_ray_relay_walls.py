"""A sub-agent on the Ray backend, attacked as a local one is (issue 39's "then attack"
list): its bash holds no capability and meets the filter's refusals, and the model
calls it makes itself cross the same relay checks on their way through the parent
(``ray.model_route = "orchestrator"``, the default). One run on the session's loopback
head (``ray_head``)."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from agentcell.orchestrator import AgentDefinition, Orchestrator, Settings
from agentcell.orchestrator.backends.ray._local import RayHead
from agentcell.protocol import RunStatus
from agentcell.worker import probe_sandbox
from agentcell.worker.tools import function_tool
from model_servers import Call, ModelServer, Reply
from places import SUPPORT
from relay_tools import send_each

pytest.importorskip("ray", reason="the ray extra is not installed (no wheel for this Python?)")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not probe_sandbox()["seccomp_refuses"], reason="no seccomp here"),
]
KEY = "sk-ray-walls-key-5150"
MARKER = "FORGED-ON-A-RAY-NODE"
NONE = "0000000000000000"
BUDGET = 100_000


def _costly_tool() -> Any:
    """A tool defined here (a Ray node cannot import the tests' modules: the tool goes
    by value, ``send_each`` with it) that sends three requests of its own through its
    link to the parent."""

    async def costly() -> str:
        """Sends a hosted tool, a huge output limit and no output limit at all."""
        import json as _json

        base = {
            "model": "test",
            "messages": [{"role": "user", "content": "FORGED-ON-A-RAY-NODE"}],
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        asks = {
            "hosted tool": {"tools": [{"type": "web_search_preview"}]},
            "huge limit": {"max_completion_tokens": 10_000_000},
            "no limit": {},
        }
        return await send_each({n: _json.dumps(base | f).encode() for n, f in asks.items()})

    return function_tool(costly, name="costly")


def _respond(body: dict[str, Any], api: str) -> Reply:
    if body["messages"][-1].get("content") == MARKER:
        return Reply(text="ok")
    outputs = [m["content"] for m in body["messages"] if m["role"] == "tool"]
    if not outputs:
        command = f"{sys.executable} privilege_probe.py"
        return Reply(tool_calls=[Call("bash", {"command": command, "timeout_s": 60})])
    if len(outputs) == 1:
        return Reply(tool_calls=[Call("costly", {})])
    return Reply(text=json.dumps(outputs))


async def test_a_ray_sub_agent_holds_no_capability_and_its_calls_meet_the_relay_checks(
    ray_head: RayHead, model_server: ModelServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key, value in ray_head.env.items():
        if key.startswith("RAY_"):
            monkeypatch.setenv(key, value)
    monkeypatch.setenv("OPENAI_BASE_URL", model_server.openai_base_url)
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    probe = SUPPORT / "privilege_probe.py"
    (tmp_path / "privilege_probe.py").write_text(probe.read_text())
    model_server.responder = _respond
    settings = Settings(
        model="openai:test", approval="allow", backend="ray", warm_spares=0,
        budgets={"max_tokens": BUDGET},
    )  # fmt: skip
    settings.ray.address = ray_head.address
    assert settings.ray.model_route == "orchestrator"  # the default
    worker = AgentDefinition(
        name="worker", description="w", tools=["bash", "costly"], model="openai:test"
    )
    orch = Orchestrator(
        settings=settings,
        workdir=tmp_path,
        agents=[worker],
        tools=[_costly_tool()],
        load_agent_files=False,
        record=False,
    )
    async with orch:
        result = await asyncio.wait_for(orch.delegate("worker", "go"), 180)
    assert result.status is RunStatus.COMPLETED, result.error
    assert result.node  # it ran on a Ray node
    bash, costly = json.loads(result.text)
    held = json.loads(bash)
    for field in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
        assert held["caps"][field] == NONE, held["caps"]
    assert held["seccomp"] == "2"
    assert held["calls"]["reboot"] == "EPERM", held["calls"]  # a wrong magic: EPERM, not EINVAL
    lines = dict(line.split(": ", 1) for line in costly.splitlines())
    assert "of type 'web_search_preview'" in lines["hosted tool"], lines
    assert lines["huge limit"] == lines["no limit"] == "SENT, HTTP 200", lines
    forged = [r.body for r in model_server.requests if r.body["messages"][-1]["content"] == MARKER]
    huge, unlimited = forged
    assert huge["max_completion_tokens"] == 4096  # the cap agentcell itself sends
    assert "max_completion_tokens" not in unlimited
    assert 0 < unlimited["max_tokens"] <= BUDGET  # the budget left, past which none goes
    # Every request reached the server on the parent's connections, with its key.
    assert {r.headers["authorization"] for r in model_server.requests} == {f"Bearer {KEY}"}
