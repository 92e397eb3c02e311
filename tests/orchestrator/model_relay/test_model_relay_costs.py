"""What a relayed sub-agent can make the parent spend, from real child processes against
the loopback model server (issue 39, items 5 and 6): a call given up before its usage
arrived is charged all the same, to the ledger and the provider limiter; the body's
cost-bearing keys (a server-side tool, the output limit, the thinking budget, the effort,
a forced tool) are refused or clamped to what the child's definition grants before the
parent sends them with its key."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import cost_tools
import model_servers
import pytest
from agentcell.orchestrator import AgentDefinition, Orchestrator, Settings
from agentcell.protocol import RunStatus, TextDelta, Usage
from agents import agent
from conftest import SpawnRecorder
from cost_tools import MARKER
from model_servers import Call, ModelServer, Reply

KEY = "sk-relay-costs-test-key-0099"
#: Each of the agent's own answers (its tool call, its last word): the servers' default.
TURN = Usage(input_tokens=10, output_tokens=5)


def orchestrator(workdir: Path, definition: AgentDefinition, **settings: Any) -> Orchestrator:
    defaults: dict[str, Any] = {"model": "openai:test", "approval": "allow", "warm_spares": 0}
    return Orchestrator(
        settings=Settings(**(defaults | settings)),
        workdir=workdir,
        agents=[definition],
        tools=[cost_tools.give_up, cost_tools.costly],
        load_agent_files=False,
        record=False,
    )


def forged(body: dict[str, Any]) -> bool:
    return body["messages"][-1].get("content") == MARKER


def tool_output(body: dict[str, Any]) -> str | None:
    """The output of the agent's tool call in a request, in either API's shape."""
    for message in body["messages"]:
        if message["role"] == "tool":
            return str(message["content"])
        content = message.get("content")
        for block in content if isinstance(content, list) else []:
            if block.get("type") == "tool_result":
                inner = block["content"]
                return inner if isinstance(inner, str) else "".join(b["text"] for b in inner)
    return None


def tool_then_echo(tool: str, arguments: dict[str, Any], answer: Reply) -> model_servers.Responder:
    """The agent's first request calls ``tool``; a request of the tool's own gets
    ``answer``; the agent's next request is answered with the tool's output."""

    def respond(body: dict[str, Any], api: str) -> Reply:
        if forged(body):
            return answer
        output = tool_output(body)
        if output is None:
            return Reply(tool_calls=[Call(tool, arguments)])
        return Reply(text=output)

    return respond


@pytest.fixture
def served(model_server: ModelServer, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModelServer]:
    monkeypatch.setenv("OPENAI_BASE_URL", model_server.openai_base_url)
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", model_server.anthropic_base_url)
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    yield model_server


def estimate(raw: bytes) -> int:
    """The relay's guess at a request's input tokens (``estimate_tokens``)."""
    return len(raw) // 4 + 1


#: Two long answers the child gives up on: before the usage chunk (only the relayed
#: bytes tell what it cost), and after it (the server's counts, far above them).
LONG = Reply(text="x" * 200_000, chunk_size=2000, hang_after=101)  # role + 100 text events
REPORTED = Usage(input_tokens=50_000, output_tokens=60_000)
#: role, 4 text events, the finish and the usage chunk; then nothing ([DONE] never comes).
USAGE_FIRST = Reply(text="x" * 4000, chunk_size=1000, usage=REPORTED, hang_after=7)


@pytest.mark.parametrize("usage_arrived", [False, True], ids=["before usage", "after usage"])
async def test_a_call_the_child_gives_up_is_charged_to_the_ledger_and_the_limiter(
    usage_arrived: bool,
    spawned: SpawnRecorder,
    tmp_path: Path,
    served: ModelServer,
    raw_bodies: list[bytes],
) -> None:
    # A hostile child reads a long answer through the parent and cancels before the usage
    # chunk (or just after it): its own report would say nothing of that call.
    arguments = (
        {"until": '"prompt_tokens"'} if usage_arrived else {"until": "", "at_least": 150_000}
    )
    served.responder = tool_then_echo("give_up", arguments, USAGE_FIRST if usage_arrived else LONG)
    orch = orchestrator(
        tmp_path, agent("spender", ["give_up"]), limits={"openai": {"max_concurrent": 4}}
    )
    async with orch:
        result = await asyncio.wait_for(orch.delegate("spender", "go"), 60)
        total = orch.total_usage
        limiter = orch.runner.limiter.model("openai:test")
    assert result.status is RunStatus.COMPLETED, result.error
    read = int(result.text)  # the bytes the child had read when it gave up
    assert len(raw_bodies) == 3
    (own,) = [raw for raw in raw_bodies if MARKER.encode() in raw]
    given_up = Usage(  # the agent's own two turns were reported as they were
        input_tokens=total.input_tokens - 2 * TURN.input_tokens,
        output_tokens=total.output_tokens - 2 * TURN.output_tokens,
    )
    if usage_arrived:
        assert given_up == REPORTED  # what the server said, far above the bytes read
    else:
        assert read >= 150_000
        assert given_up.input_tokens >= estimate(own)
        assert given_up.output_tokens >= read // 4
    # The limiter was told as much (each other request: its estimate at least).
    assert limiter is not None
    charged = given_up.input_tokens + given_up.output_tokens
    others = sum(estimate(raw) for raw in raw_bodies if raw is not own)
    assert limiter.stats.tokens >= others + charged


async def test_a_call_a_run_ends_under_is_charged_what_it_relayed(
    spawned: SpawnRecorder, tmp_path: Path, served: ModelServer, raw_bodies: list[bytes]
) -> None:
    # A genuine child mid-answer when its caller gives up on the run (an interrupt): the
    # child never reports that call's usage; the parent charges what it relayed of it.
    never = threading.Event()
    served.responder = lambda body, api: Reply(
        text="y" * 100_000, chunk_size=1000, pause_after=60, release=never
    )
    orch = orchestrator(tmp_path, agent("talker", []), limits={"openai": {"max_concurrent": 4}})
    try:
        async with orch:
            events = orch.events()
            run = asyncio.create_task(orch.delegate("talker", "go"))
            seen = 0
            async with asyncio.timeout(60):
                async for item in events:
                    event = getattr(item, "event", None)
                    if isinstance(event, TextDelta):
                        seen += len(event.text)
                        if seen >= 40_000:
                            break
            run.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await run
            total = orch.total_usage
            limiter = orch.runner.limiter.model("openai:test")
    finally:
        never.set()
    (raw,) = raw_bodies
    assert total.input_tokens >= estimate(raw)
    assert total.output_tokens >= seen // 4 >= 10_000
    assert limiter is not None
    assert limiter.stats.tokens >= estimate(raw) + seen // 4


async def costly_lines(
    tmp_path: Path, served: ModelServer, definition: AgentDefinition, provider: str
) -> tuple[dict[str, str], list[dict[str, Any]]]:
    """A run of ``definition`` calling ``costly``: each request's line, and the bodies of
    those the server received."""
    served.responder = tool_then_echo("costly", {"provider": provider}, Reply(text="ok"))
    orch = orchestrator(tmp_path, definition)
    async with orch:
        result = await asyncio.wait_for(orch.delegate(definition.name, "go"), 60)
    assert result.status is RunStatus.COMPLETED, result.error
    lines = dict(line.split(": ", 1) for line in result.text.splitlines())
    assert set(lines) == {n for n, (shape, _) in cost_tools.COSTLY.items() if shape == provider}
    return lines, [r.body for r in served.requests if forged(r.body)]


REFUSED = "the orchestrator refused the model request: "


async def test_anthropic_cost_keys_from_a_real_child_are_refused_or_clamped(
    spawned: SpawnRecorder,
    tmp_path: Path,
    served: ModelServer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="agentcell.orchestrator")
    definition = agent("spender", ["costly"], model="anthropic:test")
    lines, bodies = await costly_lines(tmp_path, served, definition, "anthropic")
    assert lines["search"].startswith(REFUSED), lines
    assert "'web_search_20250305'" in lines["search"] and "add WebSearch" in lines["search"]
    assert "tool_choice forces 'web_search'" in lines["forced search"], lines
    assert "output_config.effort 'max'" in lines["anthropic effort"], lines
    assert lines["output"] == lines["thinking"] == "SENT, HTTP 200", lines
    # The server saw the two it was sent, clamped, and nothing of the refused ones.
    output, thinking = bodies
    assert output["max_tokens"] == 4096
    assert (thinking["max_tokens"], thinking["thinking"]["budget_tokens"]) == (4096, 4095)
    assert not any({"tools", "tool_choice", "output_config"} & set(body) for body in bodies)
    clamps = [r.getMessage() for r in caplog.records if "model request clamped" in r.getMessage()]
    assert any("max_tokens 10000000 -> 4096" in line for line in clamps), clamps
    assert any("thinking.budget_tokens 1000000 -> 4095" in line for line in clamps), clamps


async def test_a_granted_web_search_goes_with_no_more_searches_than_granted(
    spawned: SpawnRecorder, tmp_path: Path, served: ModelServer
) -> None:
    definition = agent("searcher", ["costly", "WebSearch"], model="anthropic:test")
    lines, bodies = await costly_lines(tmp_path, served, definition, "anthropic")
    assert lines["search"] == "SENT, HTTP 200", lines
    (search,) = [body for body in bodies if "tools" in body]
    assert search["tools"] == [{"type": "web_search_20250305", "name": "web_search", "max_uses": 5}]


async def test_openai_cost_keys_from_a_real_child_are_refused_or_clamped(
    spawned: SpawnRecorder, tmp_path: Path, served: ModelServer
) -> None:
    definition = agent("spender", ["costly"], effort="low")
    lines, bodies = await costly_lines(tmp_path, served, definition, "openai")
    assert "of type 'web_search_preview'" in lines["hosted tool"], lines
    assert "function tools only" in lines["hosted tool"]
    assert "tool_choice forces 'web_search'" in lines["forced function"], lines
    assert "reasoning_effort 'high'" in lines["effort"] and "send 'low' or lower" in lines["effort"]
    assert lines["completion"] == "SENT, HTTP 200", lines
    (completion,) = bodies
    # The cap agentcell itself would send for a reasoning effort of "low".
    assert completion["max_completion_tokens"] == 4096 + 4096
    assert "reasoning_effort" not in completion and "tools" not in completion


async def test_an_output_limit_is_clamped_to_what_the_runs_token_budget_has_left(
    spawned: SpawnRecorder, tmp_path: Path, served: ModelServer
) -> None:
    definition = agent("spender", ["costly"], effort="low")
    budgets = {"max_tokens": 3000}
    served.responder = tool_then_echo("costly", {"provider": "openai"}, Reply(text="ok"))
    orch = orchestrator(tmp_path, definition, budgets=budgets)
    async with orch:
        result = await asyncio.wait_for(orch.delegate(definition.name, "go"), 60)
    assert result.status is RunStatus.COMPLETED, result.error
    (completion,) = [r.body for r in served.requests if forged(r.body)]
    # Its first turn was charged before its tool ran: the budget had that much less left.
    left = budgets["max_tokens"] - TURN.input_tokens - TURN.output_tokens
    assert completion["max_completion_tokens"] == left
