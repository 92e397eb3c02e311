"""Compaction of a long sub-agent's conversation (issue 22 item 5), in a real child with a
scripted model whose context fills: the older turns are summarised by the agent's own
model, the task and the recent turns are kept (a tool call never apart from its result),
the record keeps the full and the compacted history, and a continuation starts from the
compacted one."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from agentcell.orchestrator import AgentDefinition, Orchestrator, Settings
from agentcell.orchestrator.definitions._loader import load_agent_file
from agentcell.orchestrator.definitions._registry import AgentRegistry
from agentcell.orchestrator.delegation._request import DelegationRequest
from agentcell.orchestrator.delegation._resume import RecordedAgents, read_session
from agentcell.protocol import RunStatus, UserMessage
from compaction_models import (
    STEPS,
    SUMMARY,
    TASK,
    FillingModel,
    served,
)
from conftest import SpawnRecorder
from model_servers import Call, ModelServer, Reply

__all__ = ["served"]  # the fixture


def _text(messages: list[dict[str, Any]]) -> str:
    return json.dumps(messages)


def _calls_have_results(messages: list[dict[str, Any]]) -> bool:
    """Every tool result follows the assistant message that made its call."""
    called: set[str] = set()
    for message in messages:
        for call in message.get("tool_calls") or []:
            called.add(call["id"])
        if message["role"] == "tool" and message["tool_call_id"] not in called:
            return False
    return True


async def _run(tmp_path: Path, served: ModelServer, agent: AgentDefinition, **settings: Any):  # type: ignore[no-untyped-def]
    model = FillingModel()
    served.responder = model
    orch = Orchestrator(
        settings=Settings(
            model="openai:test", approval="allow", max_workers=1, warm_spares=0, **settings
        ),
        workdir=tmp_path,
        agents=[agent],
        load_agent_files=False,
    )
    async with orch:
        result = await asyncio.wait_for(orch.delegate(agent.name, TASK), 120)
    assert result.status is RunStatus.COMPLETED, result
    return model, result


def _agent(**fields: Any) -> AgentDefinition:
    return AgentDefinition(
        name="long", description="works long", tools=["bash"], model="openai:test", **fields
    )


async def test_a_filling_context_is_compacted_and_the_record_keeps_both_histories(
    spawned: SpawnRecorder, tmp_path: Path, served: ModelServer
) -> None:
    model, result = await _run(tmp_path, served, _agent(auto_compact_window=1000))
    assert result.text == "DONE"
    # One summary, by the agent's own model, of the task and the older turns only.
    [summary_request] = model.summary_requests
    asked = _text(summary_request)
    assert TASK in asked and "OUT-1" in asked and "OUT-2" in asked
    assert "OUT-3" not in asked and "OUT-4" not in asked
    # The next request: the task with the summary, then the recent turns unchanged.
    after = model.agent_requests[4]
    first_user = next(m for m in after if m["role"] == "user")
    assert TASK in first_user["content"] and SUMMARY in first_user["content"]
    assert "OUT-1" not in _text(after).replace(SUMMARY, "")
    assert "OUT-3" in _text(after) and "OUT-4" in _text(after)
    assert all(_calls_have_results(request) for request in model.agent_requests)
    assert result.usage.output_tokens == 20  # the summary's tokens count for the run
    # The record: both histories; a continuation reads the compacted one.
    record = next((tmp_path / ".agentcell" / "runs").glob(f"*/{result.agent_id}.jsonl"))
    lines = [json.loads(line) for line in record.read_text().splitlines()]
    kinds = [line["kind"] for line in lines]
    assert "compaction" in kinds and "full_messages" in kinds and kinds[-2] == "messages"
    full = next(line["messages"] for line in lines if line["kind"] == "full_messages")
    assert all(f"OUT-{n}" in json.dumps(full) for n in range(1, STEPS + 1))
    assert full[0] == {"role": "user", "content": TASK}
    session = read_session(record)
    assert session is not None and isinstance(session[0], UserMessage)
    assert SUMMARY in session[0].content and "OUT-1" not in json.dumps(
        [getattr(m, "content", "") for m in session[1:]]
    )
    recorded = RecordedAgents()
    recorded.started(result.agent_id, "long", str(record.parent))
    recorded.ended(result.agent_id)
    registry = AgentRegistry.builtin()
    registry.add(_agent(auto_compact_window=1000))
    ask = DelegationRequest(agent_type="long", prompt="go on", resume=result.agent_id)
    _, resumed = recorded.continuation(ask, registry)
    assert SUMMARY in resumed[0].content  # type: ignore[union-attr]


async def test_the_setting_chooses_the_threshold_and_zero_turns_it_off(
    spawned: SpawnRecorder, tmp_path: Path, served: ModelServer
) -> None:
    model, _ = await _run(tmp_path, served, _agent(), subagent_compact_at=1000)
    assert len(model.summary_requests) == 1
    model, _ = await _run(tmp_path, served, _agent(), subagent_compact_at=0)
    assert model.summary_requests == []
    # A fraction of the context window: 0.5 of 2,000 tokens.
    model, _ = await _run(
        tmp_path, served, _agent(), subagent_compact_at=0.5, subagent_context_window=2000
    )
    assert len(model.summary_requests) == 1


def test_auto_compact_window_is_read_from_an_agent_file(tmp_path: Path) -> None:
    path = tmp_path / "long.md"
    path.write_text("---\nname: long\ndescription: x\nautoCompactWindow: 120000\n---\nBody\n")
    [definition] = load_agent_file(path).definitions
    assert definition.auto_compact_window == 120000
    assert "autoCompactWindow" not in definition.extra


async def test_parallel_calls_stay_with_their_results_and_the_full_history_is_whole() -> None:
    # In process, with no usage reported: the size is estimated from the text.
    from agentcell.protocol import AssistantMessage, ToolMessage
    from agentcell.worker.engine._compaction import SUMMARY_HEADER, Compactor
    from agentcell.worker.engine._loop import Attachments, Engine
    from agentcell.worker.engine._session import Session
    from agentcell.worker.tools import function_tool

    from agentcell.testing import FunctionModel, reply, tool_call

    @function_tool
    async def bulk(n: int) -> str:
        """A long output."""
        return f"BULK-{n} " + "x" * 2000

    turns = [0]

    def decide(messages: list[Any], tools: list[Any]) -> Any:
        if not tools:  # the summary request
            return "SUMMARY-parallel"
        turn = turns[0]
        turns[0] += 1
        if turn >= 6:
            return "DONE"
        return reply("", tool_call("bulk", n=2 * turn), tool_call("bulk", n=2 * turn + 1))

    compactor = Compactor(1500, keep_recent_turns=1)
    engine = Engine(FunctionModel(decide), [bulk], attached=Attachments(compactor=compactor))
    session = Session()
    result = await engine.run("do six bulk turns", session)
    assert result.status is RunStatus.COMPLETED, result
    assert compactor.compactions >= 2
    called: set[str] = set()
    for message in session.messages:
        if isinstance(message, AssistantMessage):
            called.update(call.id for call in message.tool_calls)
        elif isinstance(message, ToolMessage):
            assert message.tool_call_id in called  # never a result without its call
    full = compactor.full_history(session)
    assert full[0] == UserMessage(content="do six bulk turns")
    opening = session.messages[0]
    assert isinstance(opening, UserMessage) and opening.content.startswith("do six bulk turns")
    assert opening.content.count(SUMMARY_HEADER) == 1  # no summary nested in a summary
    outputs = [m.content.split()[0] for m in full if isinstance(m, ToolMessage)]
    assert outputs == sorted(set(outputs), key=outputs.index)  # each once, in order
    assert "BULK-0" in outputs and len(session.messages) < len(full)


async def test_a_continued_sub_agent_starts_from_the_compacted_history(
    spawned: SpawnRecorder, tmp_path: Path, served: ModelServer
) -> None:
    child = FillingModel()
    main_outputs: list[str] = []

    def respond(body: dict[str, Any], api: str) -> Reply:
        offered = {t["function"]["name"] for t in body.get("tools", [])}
        if "task" not in offered:  # the sub-agent (or its summary request)
            return child(body, api)
        outputs = [m["content"] for m in body["messages"] if m["role"] == "tool"]
        main_outputs[:] = outputs
        if not outputs:
            return Reply(tool_calls=[Call("task", {"subagent_type": "long", "prompt": TASK})])
        if len(outputs) == 1:
            agent_id = outputs[0].splitlines()[-1].removeprefix("agent_id: ")
            resume = {"subagent_type": "long", "prompt": "one more", "resume": agent_id}
            return Reply(tool_calls=[Call("task", resume)])
        return Reply(text="FINAL")

    served.responder = respond
    orch = Orchestrator(
        settings=Settings(model="openai:test", approval="allow", max_workers=2, warm_spares=0),
        workdir=tmp_path,
        agents=[_agent(auto_compact_window=1000)],
        load_agent_files=False,
        run_dir=tmp_path / "runs",
    )
    async with orch:
        report = await asyncio.wait_for(orch.run("go"), 120)
    assert report.status is RunStatus.COMPLETED, report
    assert len(child.summary_requests) == 1
    # The continuation's first request: the compacted history, then the new prompt.
    continued = child.agent_requests[STEPS + 1]
    users = [m["content"] for m in continued if m["role"] == "user"]
    assert SUMMARY in users[0] and users[-1] == "one more"
    assert "OUT-1" not in _text(continued).replace(SUMMARY, "")
    assert "OUT-4" in _text(continued) and _calls_have_results(continued)


async def test_pre_compact_hooks_run_in_the_parent_before_a_compaction(
    spawned: SpawnRecorder, tmp_path: Path, served: ModelServer
) -> None:
    """Claude Code's PreCompact: the hook gets the trigger ("auto") and the common fields;
    one whose matcher is "manual" does not run for an automatic compaction."""
    seen, manual = tmp_path / "pre-compact.json", tmp_path / "manual.json"
    hooks = {
        "PreCompact": [
            {"matcher": "auto", "command": f"cat > {seen}"},
            {"matcher": "manual", "command": f"cat > {manual}"},
        ]
    }
    _, result = await _run(tmp_path, served, _agent(auto_compact_window=1000), hooks=hooks)
    assert result.text == "DONE"
    payload = json.loads(seen.read_text())
    assert payload["hook_event_name"] == "PreCompact" and payload["trigger"] == "auto"
    assert payload["agent_type"] == "long" and payload["custom_instructions"] == ""
    assert payload["session_id"] and payload["transcript_path"].endswith(".jsonl")
    assert not manual.exists()


async def test_a_pre_compact_hook_that_blocks_skips_the_compaction(
    spawned: SpawnRecorder, tmp_path: Path, served: ModelServer
) -> None:
    """Claude Code's PreCompact can block (exit 2, or ``"decision": "block"``): a proactive
    compaction is then skipped and the conversation goes on uncompacted. Each turn's check
    asks again, so the hook runs once per turn past the threshold."""
    asked = tmp_path / "asked.log"
    for blocking in (
        f"echo x >> {asked}; exit 2",
        f'echo x >> {asked}; echo \'{{"decision": "block"}}\'',
    ):
        asked.unlink(missing_ok=True)
        hooks = {"PreCompact": [{"matcher": "auto", "command": blocking}]}
        model, result = await _run(tmp_path, served, _agent(auto_compact_window=1000), hooks=hooks)
        assert result.text == "DONE"
        assert model.summary_requests == [], blocking
        assert len(asked.read_text().split()) >= 2, blocking  # asked at each turn past it
