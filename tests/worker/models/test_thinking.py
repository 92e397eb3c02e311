"""A definition's ``effort`` as Anthropic's extended thinking, end to end.

On the wire of the local model server (which refuses what the real API refuses: a budget
under 1024 or not under max_tokens, and a tool-use turn continued without its thinking
block), from real children: the budget and max_tokens a thinking model gets, the thinking
and redacted blocks sent back unchanged in the next request, the adaptive models' effort,
the note for a model without thinking, and sessions that keep their reasoning when a
sub-agent is continued. Plus the message type: a codec round trip, and old records.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from agentcell.orchestrator import AgentDefinition, Orchestrator, Settings
from agentcell.protocol import (
    PROTOCOL_VERSION,
    AgentSpec,
    AssistantMessage,
    Message,
    RunStatus,
    Start,
    ThinkingBlock,
    ToolCall,
    ToolMessage,
    UserMessage,
    decode_body,
)
from agentcell.protocol._codec import encode_body
from agentcell.worker.models import THINKING_BUDGETS, AnthropicModel, ModelRequest, thinking_control
from agentcell.worker.models._base import TextPart
from agentcell.worker.models._openai import convert_messages as openai_messages
from conftest import SpawnRecorder
from model_servers import Call, ModelServer, Reply, Thought

SIGNATURE = "EqQBCkYIBxgCKkDx+sig/with+base64==" * 3  # opaque: must come back byte for byte
REDACTED = "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpP"
THOUGHT = Thought(thinking="The file is small; read it, then answer.", signature=SIGNATURE)


@pytest.fixture
def served(model_server: ModelServer, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModelServer]:
    monkeypatch.setenv("ANTHROPIC_BASE_URL", model_server.anthropic_base_url)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-thinking-test-key")
    monkeypatch.setenv("OPENAI_BASE_URL", model_server.openai_base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-thinking-test-key")
    yield model_server


def thinker(name: str, model: str, effort: str, tools: list[str] | None = None) -> AgentDefinition:
    return AgentDefinition(
        name=name,
        description=name,
        system_prompt=f"You are {name}.",
        tools=tools or [],
        model=model,
        effort=effort,  # type: ignore[arg-type]
        source="test",
    )


#: Prompt-cache breakpoints off (``test_prompt_cache`` tests them).
NO_CACHE: dict[str, dict[str, object]] = {"anthropic": {"prompt_cache": "off"}}


def orchestrator(tmp_path: Path, *agents: AgentDefinition, **settings: Any) -> Orchestrator:
    settings.setdefault("model_options", NO_CACHE)  # these compare whole request bodies
    return Orchestrator(
        settings=Settings(model="openai:test", approval="allow", warm_spares=0, **settings),
        workdir=tmp_path,
        agents=list(agents),
        load_agent_files=False,
        record=False,
    )


@pytest.mark.parametrize(
    ("name", "control"),
    [
        ("claude-3-7-sonnet-20250219", "budget"),
        ("claude-3-7-sonnet-latest", "budget"),
        ("claude-sonnet-4-20250514", "budget"),
        ("claude-sonnet-4-5", "budget"),
        ("claude-opus-4-1-20250805", "budget"),
        ("claude-haiku-4-5", "budget"),
        ("us.anthropic.claude-opus-4-5-20251101-v1:0", "budget"),
        ("claude-sonnet-4-6", "adaptive"),
        ("claude-opus-4-7", "adaptive"),
        ("claude-opus-5", "adaptive"),
        ("claude-mythos-preview", "adaptive"),
        ("claude-3-5-sonnet-20241022", None),
        ("claude-3-5-haiku-latest", None),
        ("claude-3-opus-20240229", None),
        ("claude-test", None),
    ],
)
def test_which_models_take_extended_thinking(name: str, control: str | None) -> None:
    assert thinking_control(name) == control


async def test_effort_is_a_thinking_budget_and_a_tool_turn_sends_its_thinking_back(
    spawned: SpawnRecorder, tmp_path: Path, served: ModelServer
) -> None:
    (tmp_path / "notes.txt").write_text("the answer is 42\n")
    served.add(
        Reply(
            thinking=[THOUGHT, Thought(data=REDACTED)],
            tool_calls=[Call("read_file", {"path": "notes.txt"}, id="toolu_read")],
        ),
        Reply(text="It says 42."),
    )
    reader = thinker("reader", "anthropic:claude-sonnet-4-5", "high", ["read_file"])
    async with orchestrator(tmp_path, reader) as orch:
        result = await asyncio.wait_for(orch.delegate("reader", "what do the notes say?"), 60)
    assert result.status is RunStatus.COMPLETED, result
    assert result.text == "It says 42."  # the thinking is not the answer
    first, second = (r.body for r in served.requests)
    budget = THINKING_BUDGETS["high"]
    for body in (first, second):
        assert body["thinking"] == {"type": "enabled", "budget_tokens": budget}
        assert body["max_tokens"] == budget + 4096  # more than the budget: room to answer
        assert not {"temperature", "top_k", "top_p"} & body.keys()
    # The tool-use turn goes back with its thinking first, exactly as it came.
    assistant = next(m for m in second["messages"] if m["role"] == "assistant")
    assert assistant["content"] == [
        {"type": "thinking", "thinking": THOUGHT.thinking, "signature": SIGNATURE},
        {"type": "redacted_thinking", "data": REDACTED},
        {
            "type": "tool_use",
            "id": "toolu_read",
            "name": "read_file",
            "input": {"path": "notes.txt"},
        },
    ]
    [tool_result] = [
        b
        for m in second["messages"]
        if m["role"] == "user"
        for b in m["content"]
        if b.get("type") == "tool_result"
    ]
    assert "the answer is 42" in tool_result["content"]


async def test_adaptive_models_get_effort_and_models_without_thinking_one_note(
    spawned: SpawnRecorder,
    tmp_path: Path,
    served: ModelServer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    served.responder = lambda body, api: Reply(text=f"ok from {body['model']}")
    legacy = thinker("legacy", "anthropic:claude-3-5-haiku-latest", "high")
    deep = thinker("deep", "anthropic:claude-opus-4-7", "max")
    caplog.set_level(logging.WARNING, logger="agentcell.runner")
    async with orchestrator(
        tmp_path, legacy, deep, model_options={"anthropic": {"max_tokens": 2000}}
    ) as orch:
        for name in ("legacy", "legacy", "deep"):
            result = await asyncio.wait_for(orch.delegate(name, "go"), 60)
            assert result.status is RunStatus.COMPLETED, result
    old, again, adaptive = (r.body for r in served.requests)
    # No thinking for a model without it: the request is as it would be without effort.
    for body in (old, again):
        assert "thinking" not in body and "output_config" not in body
        assert body["max_tokens"] == 2000
    # Opus 4.7 refuses budget_tokens: adaptive thinking, with the effort to use.
    assert adaptive["thinking"] == {"type": "adaptive"}
    assert adaptive["output_config"] == {"effort": "max"}
    assert adaptive["max_tokens"] == THINKING_BUDGETS["max"] + 4096
    notes = [r.getMessage() for r in caplog.records if r.name == "agentcell.runner"]
    ignored = [n for n in notes if "effort high ignored" in n]
    assert len(ignored) == 1 and "anthropic:claude-3-5-haiku-latest" in ignored[0]
    # The user's max_tokens is raised for thinking only with a note that says so.
    [raised] = [n for n in notes if "raises max_tokens" in n]
    assert f"from 2000 to {THINKING_BUDGETS['max'] + 4096}" in raised


def keep_then_resume(thoughts: list[Thought]) -> Any:
    """The main agent (OpenAI) starts ``keeper`` (Claude, thinking ``thoughts`` once), then
    continues it by its ``agent_id`` with a second prompt."""

    def respond(body: dict[str, Any], api: str) -> Reply:
        if api == "anthropic":
            if len(body["messages"]) == 1:
                return Reply(thinking=thoughts, text="noted: PELICAN")
            return Reply(text="it was PELICAN")
        outputs = [m["content"] for m in body["messages"] if m["role"] == "tool"]
        if not outputs:
            return Reply(tool_calls=[Call("task", {"subagent_type": "keeper", "prompt": "keep"})])
        if len(outputs) == 1:
            ident = re.search(r"^agent_id: (\S+)$", outputs[0], re.MULTILINE)
            assert ident is not None, outputs[0]
            resume = {"subagent_type": "keeper", "prompt": "which?", "resume": ident.group(1)}
            return Reply(tool_calls=[Call("task", resume)])
        return Reply(text="done")

    return respond


async def test_a_continued_thinking_sub_agent_sends_its_recorded_thinking_back(
    spawned: SpawnRecorder, tmp_path: Path, served: ModelServer
) -> None:
    served.responder = keep_then_resume([THOUGHT])
    keeper = thinker("keeper", "anthropic:claude-sonnet-4-5", "low")
    orch = Orchestrator(
        settings=Settings(
            model="openai:test", approval="allow", warm_spares=0, model_options=NO_CACHE
        ),
        workdir=tmp_path,
        agents=[keeper],
        load_agent_files=False,
        run_dir=tmp_path / "runs",
    )
    async with orch:
        report = await asyncio.wait_for(orch.run("go"), 60)
    assert report.status is RunStatus.COMPLETED, report
    first, continued = (r.body for r in served.requests if r.api == "anthropic")
    assert len(first["messages"]) == 1
    assert continued["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "keep"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": THOUGHT.thinking, "signature": SIGNATURE},
                {"type": "text", "text": "noted: PELICAN"},
            ],
        },
        {"role": "user", "content": [{"type": "text", "text": "which?"}]},
    ]
    # The main agent on OpenAI never sees a sub-agent's thinking.
    assert all(SIGNATURE not in json.dumps(r.body) for r in served.requests if r.api == "openai")


async def test_a_thinking_block_the_record_masked_is_left_out_of_a_continuation(
    spawned: SpawnRecorder, tmp_path: Path, served: ModelServer
) -> None:
    """The record masks a secret the model quoted in its thinking; that block's
    signature no longer matches, so the continuation leaves it out (Anthropic would
    refuse the whole request) and sends the untouched one as it was."""
    leaked = Thought(thinking="the key is sk-thinking-test-key, odd", signature="SIG-LEAKED")

    served.responder = keep_then_resume([leaked, THOUGHT])
    orch = Orchestrator(
        settings=Settings(
            model="openai:test", approval="allow", warm_spares=0, model_options=NO_CACHE
        ),
        workdir=tmp_path,
        agents=[thinker("keeper", "anthropic:claude-sonnet-4-5", "low")],
        load_agent_files=False,
        run_dir=tmp_path / "runs",
    )
    async with orch:
        report = await asyncio.wait_for(orch.run("go"), 60)
    assert report.status is RunStatus.COMPLETED, report
    records = "".join(p.read_text() for p in (tmp_path / "runs").rglob("*.jsonl"))
    assert "sk-thinking-test-key" not in records and "[REDACTED]" in records
    _, continued = (r.body for r in served.requests if r.api == "anthropic")
    assert continued["messages"][1]["content"] == [
        {"type": "thinking", "thinking": THOUGHT.thinking, "signature": SIGNATURE},
        {"type": "text", "text": "noted: PELICAN"},
    ]


async def test_thinking_streams_into_reasoning_not_into_the_text(served: ModelServer) -> None:
    served.add(Reply(thinking=[THOUGHT, Thought(data=REDACTED)], text="Hi.", chunk_size=4))
    model = AnthropicModel("claude-sonnet-4-5", effort="minimal")
    try:
        request = ModelRequest(messages=[UserMessage(content="hi")])
        items = [item async for item in model.stream(request)]
    finally:
        await model.aclose()
    *parts, response = items
    assert all(isinstance(p, TextPart) for p in parts)
    assert "".join(p.text for p in parts if isinstance(p, TextPart)) == "Hi." == response.text
    assert response.reasoning == [
        ThinkingBlock(thinking=THOUGHT.thinking, signature=SIGNATURE),
        ThinkingBlock(data=REDACTED),
    ]
    assert response.reasoning[1].redacted and not response.reasoning[0].redacted
    [sent] = served.requests
    assert sent.body["thinking"]["budget_tokens"] == 1024


def test_openai_requests_leave_the_reasoning_out() -> None:
    turn = AssistantMessage(
        content="reading",
        tool_calls=[ToolCall(id="c1", name="read_file", arguments="{}")],
        reasoning=[ThinkingBlock(thinking="hmm", signature=SIGNATURE), ThinkingBlock(data="x")],
    )
    out = openai_messages([UserMessage(content="go"), turn])
    assert SIGNATURE not in json.dumps(out) and "hmm" not in json.dumps(out)
    assert out[1]["content"] == "reading" and out[1]["tool_calls"][0]["id"] == "c1"


def test_reasoning_round_trips_through_the_codec_and_old_messages_decode() -> None:
    history: list[Message] = [
        UserMessage(content="go"),
        AssistantMessage(
            tool_calls=[ToolCall(id="t", name="read_file")],
            reasoning=[
                ThinkingBlock(thinking="plan", signature=SIGNATURE),
                ThinkingBlock(data="z"),
            ],
        ),
        ToolMessage(tool_call_id="t", name="read_file", content="42"),
    ]
    spec = AgentSpec(agent_id="a1", agent_type="t", prompt="p", history=history)
    start = Start(protocol_version=PROTOCOL_VERSION, run_id="r", handler="m:f", spec=spec)
    decoded = decode_body(encode_body(start))
    assert isinstance(decoded, Start) and decoded.spec is not None
    assert decoded.spec.history == history
    # A message from before the field (a run record, a frame) decodes with no reasoning,
    # and one without reasoning is written exactly as before.
    old = b'{"role":"assistant","content":"hi","tool_calls":[{"id":"t","name":"x"}]}'
    message = msgspec.json.decode(old, type=Message)
    assert isinstance(message, AssistantMessage) and message.reasoning == []
    assert msgspec.json.encode(message) == old


def test_a_continuation_of_a_run_stopped_inside_a_tool_loop_drops_the_masked_turn(
    tmp_path: Path,
) -> None:
    """A run cut inside a tool loop ends with a tool-use turn; if the record masked a
    secret in that turn's thinking, the turn cannot be sent (the API requires its thinking,
    unaltered), so it goes with its tool results; an earlier masked block just goes."""
    from agentcell.orchestrator.delegation._resume import read_session

    masked = ThinkingBlock(thinking="the key is [REDACTED]", signature="SIG-1")
    clean = ThinkingBlock(thinking="fine", signature="SIG-2")
    call = ToolCall(id="c1", name="read_file", arguments='{"path": "a"}')
    messages: list[Message] = [
        UserMessage(content="go"),
        AssistantMessage(content="first", reasoning=[masked, clean]),
        UserMessage(content="more"),
        AssistantMessage(content="", tool_calls=[call], reasoning=[masked]),
        ToolMessage(tool_call_id="c1", name="read_file", content="data"),
    ]
    from agentcell.orchestrator.records._key import key_for
    from agentcell.worker import Transcript

    record = tmp_path / "a1.jsonl"
    transcript = Transcript(record, "a1", key=key_for(tmp_path, "a1"))  # signed, as a child's
    transcript.messages(messages)
    transcript.close()
    session = read_session(record)
    assert session == [
        UserMessage(content="go"),
        AssistantMessage(content="first", reasoning=[clean]),
        UserMessage(content="more"),
    ]
