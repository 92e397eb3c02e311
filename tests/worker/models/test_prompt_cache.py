"""Prompt caching across a fan-out: Anthropic breakpoints, the split usage, its cost.

The fake API (``bench.anthropic_cache_server``) reports cache reads only for a prefix a
breakpoint marks and an earlier request sent, as the real one does; so each test here goes
red when the breakpoints are not sent.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest
from agentcell.orchestrator.cli._main import cli as cli_main
from agentcell.orchestrator.config._settings import Price
from agentcell.orchestrator.telemetry._usage import UsageLedger
from agentcell.protocol import (
    AssistantMessage,
    SystemMessage,
    ToolCall,
    ToolMessage,
    Usage,
    UserMessage,
)
from agentcell.worker.models._anthropic import AnthropicModel
from agentcell.worker.models._base import ModelError, ModelRequest, ModelResponse, ToolSpec
from agentcell.worker.models._http_options import HttpOptions
from click.testing import CliRunner
from conftest import SpawnRecorder

from bench.anthropic_cache_server import CachingAnthropicServer
from bench.cache_cost import SYSTEM_PROMPT, fan_out

READ = ToolSpec(
    name="read_file",
    description="Read a file.",
    parameters={"type": "object", "properties": {"path": {"type": "string"}}},
)
#: A forked sub-agent's start: the parent's history, long enough to be worth caching.
HISTORY = [
    UserMessage(content="Look at the repository and split the review. " + "context " * 900),
    AssistantMessage(content="Reading the tree.", tool_calls=[ToolCall(id="t1", name="read_file")]),
    ToolMessage(tool_call_id="t1", name="read_file", content="file list " * 600),
]


def request(*messages: Any) -> ModelRequest:
    return ModelRequest(messages=[SystemMessage(content=SYSTEM_PROMPT), *messages], tools=[READ])


def body(prompt_cache: str, req: ModelRequest) -> dict[str, Any]:
    local = HttpOptions(base_url="http://127.0.0.1:1")
    model = AnthropicModel("claude-test", http=local, prompt_cache=prompt_cache)
    decoded: dict[str, Any] = msgspec.json.decode(model._body(req))
    return decoded


def marked(doc: Any) -> list[Any]:
    """Every ``cache_control`` in a request body, in the API's order."""
    found: list[Any] = []
    if isinstance(doc, dict):
        if "cache_control" in doc:
            found.append(doc["cache_control"])
        for key in ("tools", "system", "messages", "content"):
            found.extend(marked(doc.get(key)))
    elif isinstance(doc, list):
        for item in doc:
            found.extend(marked(item))
    return found


def test_breakpoints_mark_tools_system_the_forked_history_and_the_last_block() -> None:
    sent = body("5m", request(*HISTORY, UserMessage(content="Review src/a.py")))
    assert sent["tools"][-1]["cache_control"] == {"type": "ephemeral"}
    assert sent["system"] == [
        {"type": "text", "text": SYSTEM_PROMPT, "cache_control": {"type": "ephemeral"}}
    ]
    # the history's last tool result and the new prompt share one user turn (the API's
    # shape): the breakpoint is on the block where the history ends, and on the last one
    last_turn = sent["messages"][-1]["content"]
    assert last_turn[0]["type"] == "tool_result" and "cache_control" in last_turn[0]
    assert last_turn[-1] == {
        "type": "text",
        "text": "Review src/a.py",
        "cache_control": {"type": "ephemeral"},
    }
    assert len(marked(sent)) == 4  # the API's limit

    hour = body("1h", request(UserMessage(content="Review src/a.py")))
    assert marked(hour) == [{"type": "ephemeral", "ttl": "1h"}] * 3
    assert marked(body("off", request(*HISTORY, UserMessage(content="x")))) == []
    with pytest.raises(ModelError, match="prompt_cache '2h' is not one of 5m, 1h, off"):
        AnthropicModel("claude-test", prompt_cache="2h")


async def ask(server: CachingAnthropicServer, prompt_cache: str, *messages: Any) -> Usage:
    http = HttpOptions(base_url=server.base_url, api_key="sk-ant-fake")
    model = AnthropicModel("claude-test", http=http, prompt_cache=prompt_cache)
    async with model:
        items = [item async for item in model.stream(request(*messages))]
    response = items[-1]
    assert isinstance(response, ModelResponse)
    return response.usage


@pytest.mark.parametrize("prompt_cache", ["5m", "1h"])
async def test_forked_sub_agents_read_the_parent_history_from_the_cache(prompt_cache: str) -> None:
    with CachingAnthropicServer() as server:
        first = await ask(server, prompt_cache, *HISTORY, UserMessage(content="Review src/a.py"))
        second = await ask(server, prompt_cache, *HISTORY, UserMessage(content="Review src/b.py"))
        fresh = await ask(server, prompt_cache, UserMessage(content="Review src/c.py"))
    assert first.cache_read_tokens == 0 and first.cache_write_tokens > 0
    shared = fresh.cache_read_tokens  # the tools and the system prompt
    assert shared > 1000
    # the second fork reads tools, system and the whole forked history: all but its prompt
    assert second.cache_read_tokens > shared + 1500
    assert second.input_tokens - second.cache_read_tokens - second.cache_write_tokens < 50
    assert second.input_tokens == first.input_tokens  # the same prompt, billed apart


async def test_a_fan_out_reads_the_shared_prefix_and_costs_less(
    spawned: SpawnRecorder, tmp_path: Path
) -> None:
    n = 4
    cached = await fan_out(n, "5m", tmp_path, concurrency=2)
    plain = await fan_out(n, "off", tmp_path, concurrency=2)
    # every sub-agent after the first read the tools and the system prompt
    shared = cached["cache_read_tokens"] // (n - 1)
    assert cached["cache_read_tokens"] >= (n - 1) * 1000 and shared > 1000
    assert plain["cache_read_tokens"] == plain["cache_write_tokens"] == 0
    # the ledger's split is the server's, token for token
    wire = cached["server"]
    assert cached["cache_read_tokens"] == wire["cache_read_input_tokens"]
    assert cached["cache_write_tokens"] == wire["cache_creation_input_tokens"]
    assert cached["input_tokens"] == wire["input_tokens"]
    assert cached["cost_usd"] < 0.6 * plain["cost_usd"]


def test_cost_bills_each_prompt_token_once_at_its_rate() -> None:
    ledger = UsageLedger(prices={"anthropic:claude-x": Price(input=3.0, output=15.0)})
    usage = Usage(
        input_tokens=1000, cache_read_tokens=800, cache_write_tokens=100, output_tokens=10
    )
    # 100 uncached at 3, 800 read at 0.3 (0.1×), 100 written at 3.75 (1.25×), 10 out at 15
    expected = (100 * 3 + 800 * 0.3 + 100 * 3.75 + 10 * 15) / 1e6
    assert ledger.cost("anthropic:claude-x", usage) == pytest.approx(expected)
    # the name the API reports (no provider) finds the provider:name price
    assert ledger.cost("claude-x", usage) == pytest.approx(expected)
    openai = UsageLedger(prices={"openai:gpt-x": Price(input=2.0, output=8.0, cache_read=0.5)})
    cached = Usage(input_tokens=1000, cache_read_tokens=600, output_tokens=0)
    assert openai.cost("openai:gpt-x", cached) == pytest.approx((400 * 2 + 600 * 0.5) / 1e6)


def test_runs_show_splits_the_tokens(tmp_path: Path) -> None:
    run = tmp_path / ".agentcell" / "runs" / "20260101-000000-0001"
    run.mkdir(parents=True)
    usage = {"input_tokens": 9000, "output_tokens": 40, "cache_read_tokens": 8000}
    usage["cache_write_tokens"] = 900
    sub = {"agent_id": "a1", "agent_type": "t", "status": "completed", "usage": usage}
    sub.update(final_text="ok", error="")
    (run / "summary.json").write_text(
        json.dumps({"status": "completed", "usage": usage, "subagents": [sub]})
    )
    shown = CliRunner().invoke(cli_main, ["runs", "show", run.name, "--workdir", str(tmp_path)])
    assert shown.exit_code == 0, shown.output
    assert shown.output.count("in 100 · cache read 8000 · cache write 900 · out 40") == 2


async def test_forked_sub_agents_of_a_run_share_the_parent_context_in_the_cache(
    spawned: SpawnRecorder, tmp_path: Path
) -> None:
    """A main agent forks three sub-agents of one type at once (``context: fork``): each
    after the first reads tools, system prompt and the forked parent context from the
    cache, more than the tools and system prompt alone."""
    from agentcell.orchestrator import AgentDefinition, Orchestrator, Settings

    from agentcell.testing import FunctionModel, reply, tool_call

    def main(messages: list[Any], tools: list[Any]) -> Any:
        if not any(isinstance(m, ToolMessage) for m in messages):
            calls = [
                tool_call("task", subagent_type="forked", prompt=f"part {i}") for i in range(3)
            ]
            return reply("", *calls)
        return "merged"

    parent_context = "The whole task, with everything the parent learned so far. " * 200
    with CachingAnthropicServer() as server:
        options = {"base_url": server.base_url, "api_key": "sk-ant-fake"}
        forked = AgentDefinition(
            name="forked",
            description="works on one part",
            system_prompt=SYSTEM_PROMPT,
            tools=["read_file"],
            model="anthropic:claude-sonnet-4-5",
            context="fork",
            source="test",
        )
        orch = Orchestrator(
            model=FunctionModel(main, name="function:main"),
            agents=[forked],
            settings=Settings(
                approval="allow", max_workers=1, warm_spares=0, model_options={"anthropic": options}
            ),
            workdir=tmp_path,
            load_agent_files=False,
            record=False,
        )
        async with orch:
            report = await orch.run(parent_context)
        usages = list(server.usages)
    assert report.ok, report.error
    assert len(usages) == 3
    first, *later = sorted(usages, key=lambda u: u["cache_read_input_tokens"])
    assert first["cache_read_input_tokens"] == 0
    alone = len(SYSTEM_PROMPT) // 4 + 100  # the tools and the system prompt, in tokens
    for usage in later:  # the parent context (~3000 tokens) came from the cache too
        assert usage["cache_read_input_tokens"] > alone + 2500, usages


def test_chat_usage_splits_the_tokens() -> None:
    import io
    import types

    from agentcell.orchestrator.cli._chat import Chat
    from rich.console import Console

    ledger = UsageLedger()
    usage = Usage(input_tokens=9000, cache_read_tokens=8000, cache_write_tokens=900)
    ledger.add_usage("a1", "reviewer", "anthropic:claude-x", usage + Usage(output_tokens=40))
    out = io.StringIO()
    console = Console(file=out, width=200, color_system=None)
    chat = Chat(types.SimpleNamespace(ledger=ledger), console, None, None)  # type: ignore[arg-type]
    chat._usage()
    header, row, total = [line.split() for line in out.getvalue().splitlines()]
    assert header[4:] == ["input", "cache", "read", "cache", "write", "output", "cost"]
    assert row[4:8] == ["100", "8000", "900", "40"]
    assert " ".join(total).endswith("(in 100 · cache read 8000 · cache write 900 · out 40)")
