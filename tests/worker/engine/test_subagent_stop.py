"""A blocking ``SubagentStop`` hook, Claude Code's contract: before a sub-agent accepts its
final answer the child relays it to the parent, the hook runs there (outside the sandbox),
and a block sends its reason back to the sub-agent as a user message, so it goes on.

Through real children, the real OpenAI client and the local model server; the hooks are
small Python scripts in tmp_path that log every document they get.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import child_models
import pytest
from agentcell.orchestrator import AgentDefinition, Orchestrator, Settings
from agentcell.orchestrator.approvals._hooks import HookRunner
from agentcell.orchestrator.approvals._stop_hooks import SubagentStopHooks
from agentcell.orchestrator.config._hooks import HookCommand
from agentcell.orchestrator.delegation._relay import Relay
from agentcell.protocol import RunStatus, ToolMessage
from agentcell.worker import MAX_STOP_HOOK_CONTINUATIONS
from conftest import SpawnRecorder
from model_servers import Call, ModelServer, Reply

#: argv: LOG MODE. once: exit 2 until a marker file exists (made on the first run);
#: json-once: the same with {"decision": "block"} on stdout; always: exit 2 every time;
#: pass: exit 0.
STOP_HOOK = """\
import json, os, sys
event = json.load(sys.stdin)
log, mode = sys.argv[1], sys.argv[2]
with open(log, "a") as out:
    out.write(json.dumps(event) + "\\n")
marker = log + ".marker"
if mode == "always" or (mode == "once" and not os.path.exists(marker)):
    open(marker, "w").close()
    print("run the tests before you stop", file=sys.stderr)
    sys.exit(2)
if mode == "json-once" and not os.path.exists(marker):
    open(marker, "w").close()
    print(json.dumps({"decision": "block", "reason": "name the file you changed"}))
"""


def agent(name: str, tools: list[str] | None = None) -> AgentDefinition:
    return AgentDefinition(
        name=name,
        description=name,
        system_prompt=f"You are {name}.",
        tools=tools or [],
        model="openai:test",
        source="test",
    )


@pytest.fixture
def served(model_server: ModelServer, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModelServer]:
    monkeypatch.setenv("OPENAI_BASE_URL", model_server.openai_base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-stop-hook-test-key")
    yield model_server


def users(body: dict[str, Any]) -> list[str]:
    return [m["content"] for m in body["messages"] if m["role"] == "user"]


def answer_by_turn(body: dict[str, Any], api: str) -> Reply:
    """Answer "answer N", N counting the user messages (the prompt, then each hook's)."""
    return Reply(text=f"answer {len(users(body))}")


class Setup:
    def __init__(self, tmp_path: Path, mode: str, matcher: str = "worker") -> None:
        self.work = tmp_path / "work"
        self.work.mkdir()
        script = tmp_path / "stop_hook.py"
        script.write_text(STOP_HOOK)
        self.log = tmp_path / "stops.jsonl"
        command = f"{sys.executable} {script} {self.log} {mode}"
        self.hooks = {"SubagentStop": [{"matcher": matcher, "command": command}]}

    def orchestrator(self, *agents: AgentDefinition, **kwargs: Any) -> Orchestrator:
        return Orchestrator(
            settings=Settings(
                model="openai:test", approval="allow", warm_spares=0, hooks=self.hooks
            ),
            workdir=self.work,
            agents=list(agents or [agent("worker")]),
            load_agent_files=False,
            record=False,
            **kwargs,
        )

    def runs(self) -> list[dict[str, Any]]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines()]


@pytest.mark.parametrize(
    ("mode", "told"),
    [("once", "run the tests before you stop"), ("json-once", "name the file you changed")],
)
async def test_a_blocking_stop_hook_sends_the_sub_agent_back_with_its_reason(
    spawned: SpawnRecorder, tmp_path: Path, served: ModelServer, mode: str, told: str
) -> None:
    setup = Setup(tmp_path, mode)
    served.responder = answer_by_turn
    async with setup.orchestrator() as orch:
        result = await asyncio.wait_for(orch.delegate("worker", "fix it"), 60)
    assert result.status is RunStatus.COMPLETED, result
    assert result.text == "answer 2"  # one more model turn, then it could stop
    assert len(served.requests) == 2
    # On the wire: the second request carries the hook's reason as a user message.
    assert users(served.requests[1].body) == ["fix it", f"SubagentStop hook: {told}"]
    runs = setup.runs()
    # Asked once per stop, the relayed decision being the event: no run after the end.
    assert [r["hook_event_name"] for r in runs] == ["SubagentStop", "SubagentStop"]
    assert [r["stop_hook_active"] for r in runs] == [False, True]
    assert [r["last_assistant_message"] for r in runs] == ["answer 1", "answer 2"]
    for run in runs:
        assert run["agent_type"] == "worker" and run["agent_id"] == result.agent_id
        assert run["cwd"] == str(setup.work.resolve())


async def test_a_hook_that_always_blocks_ends_the_run_at_the_cap(
    spawned: SpawnRecorder, tmp_path: Path, served: ModelServer
) -> None:
    setup = Setup(tmp_path, "always")
    served.responder = answer_by_turn
    async with setup.orchestrator() as orch:
        result = await asyncio.wait_for(orch.delegate("worker", "fix it"), 60)
    cap = MAX_STOP_HOOK_CONTINUATIONS
    assert result.status is RunStatus.ERROR, result
    assert f"sent the sub-agent back {cap} times in a row, the cap" in result.error
    assert "run the tests before you stop" in result.error
    assert result.text == f"answer {cap + 1}"  # its last answer is kept, as an error
    assert len(served.requests) == cap + 1
    runs = setup.runs()
    assert len(runs) == cap + 1  # every stop asked once; the end is not announced again
    assert [r["stop_hook_active"] for r in runs] == [False] + [True] * cap


async def test_a_stop_hook_for_another_agent_relays_nothing(
    spawned: SpawnRecorder,
    tmp_path: Path,
    served: ModelServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    setup = Setup(tmp_path, "pass", matcher="reviewer")
    served.responder = answer_by_turn
    relayed: list[tuple[str, str]] = []
    answer = Relay._hook

    async def counting(self: Relay, frame: Any) -> None:
        relayed.append((frame.event, frame.tool))
        await answer(self, frame)

    monkeypatch.setattr(Relay, "_hook", counting)
    async with setup.orchestrator(agent("worker"), agent("reviewer")) as orch:
        other = await asyncio.wait_for(orch.delegate("worker", "fix it"), 60)
        assert relayed == [] and setup.runs() == []  # no frame, no hook run
        matched = await asyncio.wait_for(orch.delegate("reviewer", "review it"), 60)
    assert other.status is matched.status is RunStatus.COMPLETED
    assert relayed == [("SubagentStop", "reviewer")]
    [run] = setup.runs()
    assert run["agent_type"] == "reviewer" and run["last_assistant_message"] == "answer 1"


async def test_a_crashed_child_gets_one_non_blocking_stop_run(
    spawned: SpawnRecorder, tmp_path: Path, served: ModelServer
) -> None:
    setup = Setup(tmp_path, "always")

    def crash_after_the_hook(body: dict[str, Any], api: str) -> Reply:
        if len(users(body)) == 1:
            return Reply(text="answer 1")
        return Reply(tool_calls=[Call("segfault", {})])  # sent back: it crashes instead

    crasher = agent("worker", ["segfault"])
    async with setup.orchestrator(crasher, tools=[child_models.segfault]) as orch:
        served.responder = lambda body, api: Reply(tool_calls=[Call("segfault", {})])
        crashed = await asyncio.wait_for(orch.delegate("worker", "crash now"), 60)
        # It never reached a stop it could ask about: the parent tells the hook, once,
        # and its block (exit 2) changes nothing.
        assert crashed.status is RunStatus.CRASHED, crashed
        [run] = setup.runs()
        assert run["stop_hook_active"] is False and run["agent_id"] == crashed.agent_id

        setup.log.unlink()
        served.responder = crash_after_the_hook
        again = await asyncio.wait_for(orch.delegate("worker", "stop, then crash"), 60)
    assert again.status is RunStatus.CRASHED, again
    # Its first stop was asked (and blocked); the crash that ended it is told afterwards.
    runs = setup.runs()
    assert [r["last_assistant_message"] for r in runs] == ["answer 1", again.text]
    assert [r["stop_hook_active"] for r in runs] == [False, True]


async def test_the_parent_hears_no_stop_past_the_last_one(tmp_path: Path) -> None:
    """A child that asks again after its stop went through (or past the cap) is answered
    without running the hook: the parent keeps the count, not the child."""
    log = tmp_path / "stops.jsonl"
    script = tmp_path / "stop_hook.py"
    script.write_text(STOP_HOOK)

    def stops(mode: str) -> SubagentStopHooks:
        command = HookCommand("SubagentStop", f"{sys.executable} {script} {log} {mode}")
        hooks = HookRunner([command], cwd=str(tmp_path))
        return SubagentStopHooks(hooks, agent_id="a1", agent_type="worker")

    passing = stops("pass")
    assert passing.relayed_events() == {"SubagentStop": ["worker"]}
    assert not (await passing.relayed("done")).blocked
    assert not (await passing.relayed("done again")).blocked
    await passing.ended("done")
    assert len(log.read_text().splitlines()) == 1

    log.unlink()
    blocking = stops("always")
    outcomes = [await blocking.relayed(f"try {i}") for i in range(MAX_STOP_HOOK_CONTINUATIONS + 3)]
    assert [o.blocked for o in outcomes].count(True) == MAX_STOP_HOOK_CONTINUATIONS + 1
    await blocking.ended("last")
    assert len(log.read_text().splitlines()) == MAX_STOP_HOOK_CONTINUATIONS + 1


# Waits (bounded) until the forging child has written every frame, so the first stop is
# still being decided when the second request comes in.
WAIT_FOR_SENT = """
import os, sys, time
end = time.monotonic() + 20
while not os.path.exists(sys.argv[1]) and time.monotonic() < end:
    time.sleep(0.01)
"""


@pytest.mark.parametrize("burst", ["two stops", "open requests"])
async def test_a_child_forging_a_burst_of_hook_requests_is_ended(
    spawned: SpawnRecorder, tmp_path: Path, burst: str
) -> None:
    """A real child never has two stops open, nor more than MAX_OPEN_REQUESTS requests:
    one that does is not ours, and is killed rather than queued in the parent."""
    from agentcell.orchestrator.delegation._relay import MAX_OPEN_REQUESTS

    from agentcell.testing import FunctionModel, reply, tool_call

    workdir = tmp_path / "work"
    workdir.mkdir()
    waiter = tmp_path / "wait.py"
    waiter.write_text(WAIT_FOR_SENT)
    forger = FunctionModel(child_models.forge_hook_requests, name="function:forger")
    prompt = "2" if burst == "two stops" else f"{MAX_OPEN_REQUESTS + 8} tools"

    def main(messages: list[Any], tools: list[Any]) -> Any:
        if not any(isinstance(m, ToolMessage) for m in messages):
            return reply("", tool_call("task", subagent_type="forger", prompt=prompt))
        return "done"

    command = f"{sys.executable} {waiter} {workdir / 'sent'}"
    never = f"{sys.executable} {waiter} {tmp_path / 'never'}"
    orch = Orchestrator(
        model=FunctionModel(main, name="function:main"),
        models={"function:forger": forger},
        agents=[
            AgentDefinition(
                name="forger",
                description="forger",
                tools=["read_file"],
                model="function:forger",
                source="test",
            )
        ],
        settings=Settings(
            approval="allow",
            warm_spares=0,
            hooks={
                "SubagentStop": [{"matcher": "forger", "command": command}],
                # Never answered on its own (20 s at most): every request stays open.
                "PreToolUse": [{"matcher": "read_file", "command": never}],
            },
        ),
        workdir=workdir,
        load_agent_files=False,
        record=False,
    )
    async with orch:
        report = await asyncio.wait_for(orch.run("go"), 60)
    (result,) = report.subagents
    assert result.status is not RunStatus.COMPLETED, result
    assert "protocol violation" in result.error, result.error


async def test_the_cap_counts_blocks_in_a_row_and_an_accepted_answer_resets_it() -> None:
    # Claude Code ends a turn after 8 consecutive stop-hook blocks; so does a sub-agent.
    import types

    from agentcell.protocol import AssistantMessage
    from agentcell.worker import StopRun
    from agentcell.worker.engine._hook_relay import relayed_stop_hook

    assert MAX_STOP_HOOK_CONTINUATIONS == 8
    blocks: list[bool] = []

    async def ask(event: str, **fields: str) -> types.SimpleNamespace:
        return types.SimpleNamespace(blocked=blocks.pop(0), reason="not yet")

    finish = relayed_stop_hook("worker", ask)  # type: ignore[arg-type]
    session = types.SimpleNamespace(messages=[AssistantMessage(content="done?")])
    blocks += [True] * 8 + [False] + [True] * 8  # eight, accepted, eight again: all go on
    sent = [await finish(session) for _ in range(17)]  # type: ignore[arg-type]
    assert [len(messages) for messages in sent] == [1] * 8 + [0] + [1] * 8
    assert sent[0][0].content == "SubagentStop hook: not yet"  # its reason, back to it
    blocks.append(True)  # the ninth in a row
    with pytest.raises(StopRun, match="sent the sub-agent back 8 times in a row"):
        await finish(session)  # type: ignore[arg-type]
