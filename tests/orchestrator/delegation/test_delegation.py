"""End to end over real child processes: a main agent delegating to sub-agents.

Models are the shipped test doubles; sub-agent models travel into their processes and
their recorded calls come back to the objects here.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import child_models
import pytest
from agentcell.orchestrator import (
    AgentDefinition,
    ApprovalQuery,
    CallbackChannel,
    Orchestrator,
    Settings,
    SubAgentEnded,
)
from agentcell.orchestrator.delegation._events import AgentActivity, SubAgentProcess
from agentcell.protocol import (
    Notice,
    RunStatus,
    SystemMessage,
    ToolMessage,
    ToolStarted,
    UserMessage,
)
from agents import agent
from conftest import SpawnRecorder
from delegation_util import gate

from agentcell.testing import FunctionModel, reply, tool_call, tool_results


def main_model(first_calls: Callable[[], list[Any]]) -> FunctionModel:
    """A main agent that issues ``first_calls`` once, then summarises the results."""

    def fn(messages: list[Any], tools: list[Any]) -> Any:
        if not any(isinstance(m, ToolMessage) for m in messages):
            return reply("delegating", *first_calls())
        return "summary:\n" + "\n".join(r.content.splitlines()[0] for r in tool_results(messages))

    return FunctionModel(fn, name="function:main")


@pytest.fixture
async def settings() -> Settings:
    return Settings(approval="allow", max_workers=8, warm_spares=2, timeout_grace_s=0.5)


async def make(
    spawned: SpawnRecorder,
    *,
    main: FunctionModel,
    agents: list[AgentDefinition],
    models: dict[str, FunctionModel],
    settings: Settings,
    **kwargs: Any,
) -> Orchestrator:
    return Orchestrator(
        model=main,
        agents=agents,
        models=dict(models),
        settings=settings,
        load_agent_files=False,
        **kwargs,
    )


@pytest.fixture
async def tracked(spawned: SpawnRecorder) -> AsyncIterator[SpawnRecorder]:
    yield spawned


async def test_eight_tasks_in_one_message_run_concurrently(
    tracked: SpawnRecorder, settings: Settings, tmp_path: Any
) -> None:
    async with gate(parties=8) as barrier:
        worker = FunctionModel(child_models.gate_then_answer, name="function:worker")
        calls = lambda: [  # noqa: E731
            tool_call("task", subagent_type="worker", prompt=f"job {i}", description=f"job {i}")
            for i in range(8)
        ]
        orch = await make(
            tracked,
            main=main_model(calls),
            agents=[agent("worker", ["wait_at_gate"], model="function:worker")],
            models={"function:worker": worker},
            settings=settings,
            tools=[barrier.tool()],
            workdir=tmp_path,
        )
        running, peak = set(), 0

        def watch(event: Any) -> None:
            nonlocal peak
            if isinstance(event, SubAgentProcess):
                running.add(event.agent_id)
                peak = max(peak, len(running))
            elif isinstance(event, SubAgentEnded):
                running.discard(event.agent_id)

        async with orch:
            orch.bus.subscribe(watch)
            report = await asyncio.wait_for(orch.run("do eight jobs"), 120)

    # The barrier only opens when all eight children are inside their tool call at once.
    assert barrier.arrived == 8
    assert peak == 8
    assert report.status is RunStatus.COMPLETED, report.error
    assert len(report.subagents) == 8
    assert all(r.status is RunStatus.COMPLETED for r in report.subagents)
    assert sorted(r.text for r in report.subagents) == sorted(f"done: job {i}" for i in range(8))
    assert len({r.pid for r in report.subagents}) == 8  # one process each
    assert report.final_text.startswith("summary:")
    assert report.final_text.count("[completed] worker") == 8


async def test_child_context_and_tools_are_isolated(
    tracked: SpawnRecorder, settings: Settings, tmp_path: Any
) -> None:
    worker = FunctionModel(child_models.answer_prompt, name="function:worker")
    orch = await make(
        tracked,
        main=main_model(
            lambda: [tool_call("task", subagent_type="reader", prompt="read the README")]
        ),
        agents=[
            agent(
                "reader",
                ["read_file", "grep", "bash", "task", "no_such_tool"],
                model="function:worker",
                disallowed_tools=["bash"],
            )
        ],
        models={"function:worker": worker},
        settings=settings,
        workdir=tmp_path,
    )
    async with orch:
        report = await orch.run("secret main-agent context: 42")
    assert report.status is RunStatus.COMPLETED
    (call,) = worker.calls  # recorded in the child, handed back to this object
    assert call.messages == [
        SystemMessage(content=f"You are reader.\n\nWorking directory: {tmp_path.resolve()}"),
        UserMessage(content="read the README"),
    ]
    assert [t.name for t in call.tools] == ["read_file", "grep"]  # allow ∩ parent − deny − task


async def test_crashing_children_are_contained(
    tracked: SpawnRecorder, settings: Settings, tmp_path: Any
) -> None:
    crasher = FunctionModel(child_models.call_tool_named_in_prompt, name="function:crasher")
    broken = FunctionModel(child_models.raise_error, name="function:broken")
    fine = FunctionModel(child_models.answer_prompt, name="function:fine")
    calls = lambda: [  # noqa: E731
        tool_call("task", subagent_type="crasher", prompt="segfault", description="segv"),
        tool_call("task", subagent_type="crasher", prompt="sigkill", description="oom"),
        tool_call("task", subagent_type="broken", prompt="anything", description="error"),
        tool_call("task", subagent_type="hanger", prompt="block_loop", description="hang"),
        tool_call("task", subagent_type="fine", prompt="sibling one", description="ok 1"),
        tool_call("task", subagent_type="fine", prompt="sibling two", description="ok 2"),
    ]
    tools = ["segfault", "sigkill", "block_loop"]
    orch = await make(
        tracked,
        main=main_model(calls),
        agents=[
            agent("crasher", tools, model="function:crasher"),
            agent("hanger", tools, model="function:crasher", timeout_s=0.5),
            agent("broken", None, model="function:broken"),
            agent("fine", [], model="function:fine"),
        ],
        models={"function:crasher": crasher, "function:broken": broken, "function:fine": fine},
        settings=settings,
        tools=[child_models.segfault, child_models.sigkill, child_models.block_loop],
        workdir=tmp_path,
    )
    async with orch:
        report = await asyncio.wait_for(orch.run("try everything"), 120)

    by_description = {r.description: r for r in report.subagents}
    assert by_description["segv"].status is RunStatus.CRASHED
    assert "killed by signal SIGSEGV" in by_description["segv"].error
    assert by_description["oom"].status is RunStatus.CRASHED
    assert "SIGKILL (possibly out of memory)" in by_description["oom"].error
    assert by_description["error"].status is RunStatus.ERROR
    assert "ValueError: the model exploded" in by_description["error"].error
    assert by_description["hang"].status is RunStatus.TIMEOUT
    assert by_description["ok 1"].text == "answer to: sibling one"
    assert by_description["ok 2"].text == "answer to: sibling two"
    # The main agent got every result, errors first-class, and finished its answer.
    assert report.status is RunStatus.COMPLETED
    assert "[crashed] crasher" in report.final_text
    assert "[timeout] hanger" in report.final_text
    assert report.final_text.count("[completed] fine") == 2
    main_call = orch.model_objects["function:main"].calls[-1]  # type: ignore[attr-defined]
    errors = {r.content.splitlines()[0][:20]: r.is_error for r in tool_results(main_call.messages)}
    assert sum(errors.values()) == 4


async def test_background_results_are_injected_exactly_once(
    tracked: SpawnRecorder, settings: Settings, tmp_path: Any
) -> None:
    seen: list[str] = []

    def main_fn(messages: list[Any], tools: list[Any]) -> Any:
        text = "\n".join(getattr(m, "content", "") for m in messages)
        seen.append(text)
        if len(seen) == 1:
            return reply(
                "", tool_call("task", subagent_type="fine", prompt="in the back", background=True)
            )
        if "answer to: in the back" not in text:
            return reply("", tool_call("task_wait", timeout_s=60))
        return "got it"

    fine = FunctionModel(child_models.answer_prompt, name="function:fine")
    orch = await make(
        tracked,
        main=FunctionModel(main_fn, name="function:main"),
        agents=[agent("fine", [], model="function:fine")],
        models={"function:fine": fine},
        settings=settings,
        workdir=tmp_path,
    )
    async with orch:
        report = await asyncio.wait_for(orch.run("go"), 60)
    assert report.status is RunStatus.COMPLETED
    (record,) = orch.tracker.records()
    assert record.state.value == "completed" and record.delivered
    everything = seen[-1]
    # Delivered once: either through task_wait or injected, never both.
    assert everything.count("answer to: in the back") == 1


async def test_a_run_does_not_end_while_background_results_would_be_lost(
    tracked: SpawnRecorder, settings: Settings, tmp_path: Any
) -> None:
    def main_fn(messages: list[Any], tools: list[Any]) -> Any:
        if not any(isinstance(m, ToolMessage) for m in messages):
            return reply(
                "", tool_call("task", subagent_type="fine", prompt="late one", background=True)
            )
        last = messages[-1]
        if isinstance(last, UserMessage) and "Background task results" in last.content:
            return "final, with the background result"
        return "answering before the background task ended"

    fine = FunctionModel(child_models.answer_prompt, name="function:fine")
    orch = await make(
        tracked,
        main=FunctionModel(main_fn, name="function:main"),
        agents=[agent("fine", [], model="function:fine")],
        models={"function:fine": fine},
        settings=settings,
        workdir=tmp_path,
    )
    async with orch:
        report = await asyncio.wait_for(orch.run("go"), 60)
    assert report.final_text == "final, with the background result"
    assert orch.tracker.records()[0].delivered


@pytest.mark.parametrize(
    ("background", "bubble", "asked"),
    [(False, False, 1), (True, False, 0), (True, True, 1)],
    ids=["foreground", "background-fail-closed", "background-bubble"],
)
async def test_approvals(
    tracked: SpawnRecorder,
    tmp_path: Any,
    background: bool,
    bubble: bool,
    asked: int,
) -> None:
    queries: list[ApprovalQuery] = []

    def decide(query: ApprovalQuery) -> bool:
        queries.append(query)
        return True

    writer = FunctionModel(child_models.run_echo, name="function:writer")
    settings = Settings(approval="bubble" if bubble else "ask", max_workers=4, warm_spares=1)
    orch = await make(
        tracked,
        main=main_model(
            lambda: [
                tool_call("task", subagent_type="writer", prompt="bash", background=background)
            ]
        ),
        agents=[agent("writer", ["bash"], model="function:writer")],
        models={"function:writer": writer},
        settings=settings,
        approval=CallbackChannel(decide),
        workdir=tmp_path,
    )
    async with orch:
        report = await asyncio.wait_for(orch.run("write something"), 60)
    assert len(queries) == asked
    (result,) = report.subagents
    if asked:
        assert queries[0].tool == "bash" and queries[0].agent_type == "writer"
        assert queries[0].agent_id == result.agent_id and queries[0].background is background
        assert result.text == "bash said: approved"
    else:
        assert "background sub-agents cannot ask for approval" in result.text
        assert "permission denied" in result.text


async def test_a_child_cannot_delegate_at_depth_one(
    tracked: SpawnRecorder, settings: Settings, tmp_path: Any
) -> None:
    forger = FunctionModel(child_models.forge_task_call, name="function:forger")
    leaf = FunctionModel(child_models.answer_prompt, name="function:leaf")
    orch = await make(
        tracked,
        main=main_model(lambda: [tool_call("task", subagent_type="forger", prompt="try")]),
        agents=[
            agent("forger", None, model="function:forger"),
            agent("leaf", [], model="function:leaf"),
        ],
        models={"function:forger": forger, "function:leaf": leaf},
        settings=settings,
        workdir=tmp_path,
    )
    async with orch:
        report = await orch.run("go")
    (result,) = report.subagents  # no grandchild ever ran
    assert result.text.startswith("task said: unknown tool 'task'")
    assert leaf.calls == []
    assert "task" not in [t.name for t in forger.calls[0].tools]


async def test_depth_two_when_configured(tracked: SpawnRecorder, tmp_path: Any) -> None:
    forger = FunctionModel(child_models.forge_task_call, name="function:forger")
    leaf = FunctionModel(child_models.tool_names, name="function:leaf")
    settings = Settings(approval="allow", max_depth=2, max_workers=4, warm_spares=1)
    orch = await make(
        tracked,
        main=main_model(lambda: [tool_call("task", subagent_type="forger", prompt="try")]),
        agents=[
            agent("forger", ["read_file", "grep", "task"], model="function:forger"),
            agent("leaf", None, model="function:leaf"),  # inherits: all of its parent's tools
        ],
        models={"function:forger": forger, "function:leaf": leaf},
        settings=settings,
        workdir=tmp_path,
    )
    async with orch:
        report = await orch.run("go")
    by_type = {r.agent_type: r for r in report.subagents}
    assert by_type["leaf"].depth == 2 and by_type["forger"].depth == 1
    # The grandchild's tools are resolved against the child's (read_file, grep), not the root's.
    assert by_type["leaf"].text == "read_file,grep"
    assert "[completed] leaf" in by_type["forger"].text
    assert "task" in [t.name for t in forger.calls[0].tools]


async def test_task_limits_in_tools_narrow_what_a_child_may_start(
    tracked: SpawnRecorder, tmp_path: Any
) -> None:
    lead = FunctionModel(child_models.delegate_to_each_word, name="function:lead")
    leaf = FunctionModel(child_models.answer_prompt, name="function:leaf")
    other = FunctionModel(child_models.answer_prompt, name="function:other")
    settings = Settings(approval="allow", max_depth=2, max_workers=4, warm_spares=1)
    orch = await make(
        tracked,
        main=main_model(lambda: [tool_call("task", subagent_type="lead", prompt="Leaf other")]),
        agents=[
            agent("lead", ["read_file", "Task(leaf)"], model="function:lead"),
            agent("leaf", [], model="function:leaf"),
            agent("other", [], model="function:other"),
        ],
        models={"function:lead": lead, "function:leaf": leaf, "function:other": other},
        settings=settings,
        workdir=tmp_path,
    )
    async with orch:
        report = await orch.run("go")
    by_type = {r.agent_type: r for r in report.subagents}
    assert set(by_type) == {"lead", "leaf"}  # `other` never ran
    assert other.calls == []
    allowed, refused = by_type["lead"].text.splitlines()
    assert allowed.startswith("[completed] leaf")  # "Leaf": any spelling of an allowed type
    assert refused == (
        "permission denied: lead may not start 'other' (its tools limit task to: leaf)"
    )
    # The schema the child was offered lists only what it may start.
    [task] = [t for t in lead.calls[0].tools if t.name == "task"]
    assert task.parameters["properties"]["subagent_type"]["enum"] == ["leaf"]
    assert "- other:" not in task.description and "- leaf:" in task.description


def test_a_task_limit_naming_no_registered_agent_offers_no_task(tmp_path: Any) -> None:
    from agentcell.orchestrator.delegation._request import DelegationRequest, Scope

    orch = Orchestrator(
        model=FunctionModel(lambda m, t: "x"),
        settings=Settings(max_depth=3),
        load_agent_files=False,
        record=False,
        workdir=tmp_path,
    )
    scope = Scope("main", ["read_file", "task"], "function:x")
    for tools, offered in ((["Task(ghost)"], False), (["Task(ghost, Explore)"], True)):
        lead = AgentDefinition(name="lead", tools=tools, model="inherit")
        request = DelegationRequest("lead", "p")
        spec = orch.runner.prepare.spec(lead, request, scope, "a1", False, run_dir="").spec
        assert [t.name for t in spec.remote_tools] == (["task"] if offered else []), tools
    enum = spec.remote_tools[0].parameters["properties"]["subagent_type"]["enum"]
    assert enum == ["Explore"]


async def test_a_background_definition_runs_in_the_background_unless_the_call_says_no(
    tracked: SpawnRecorder, settings: Settings, tmp_path: Any
) -> None:
    first_results: list[str] = []

    def main_fn(messages: list[Any], tools: list[Any]) -> Any:
        if not any(isinstance(m, ToolMessage) for m in messages):
            [task] = [t for t in tools if t.name == "task"]
            assert "runs in the background unless background is false" in task.description
            return reply(
                "",
                tool_call("task", subagent_type="watcher", prompt="by default"),
                tool_call("task", subagent_type="watcher", prompt="now", background=False),
            )
        if not first_results:
            first_results.extend(r.content for r in tool_results(messages))
        last = messages[-1]
        if isinstance(last, UserMessage) and "Background task results" in last.content:
            return "done"
        return "waiting"

    watcher = FunctionModel(child_models.answer_prompt, name="function:watcher")
    orch = await make(
        tracked,
        main=FunctionModel(main_fn, name="function:main"),
        agents=[agent("watcher", [], model="function:watcher", background=True)],
        models={"function:watcher": watcher},
        settings=settings,
        workdir=tmp_path,
    )
    async with orch:
        report = await asyncio.wait_for(orch.run("go"), 60)
    assert report.final_text == "done"
    by_default, forced = first_results
    assert by_default.startswith("[running] task a1 started in the background (watcher)")
    assert forced.startswith("[completed] watcher") and "answer to: now" in forced
    (record,) = orch.tracker.records()  # only the default run went through the tracker
    assert record.delivered and record.result is not None
    assert record.result.text == "answer to: by default" and record.result.background


async def test_steer_reaches_the_next_turn(
    tracked: SpawnRecorder, settings: Settings, tmp_path: Any
) -> None:
    async with gate() as door:
        model = FunctionModel(child_models.steerable, name="function:steerable")
        orch = await make(
            tracked,
            main=FunctionModel(lambda m, t: "unused", name="function:main"),
            agents=[agent("steerable", ["wait_at_gate"], model="function:steerable")],
            models={"function:steerable": model},
            settings=settings,
            tools=[door.tool()],
            workdir=tmp_path,
        )
        async with orch:
            acknowledged = asyncio.Event()
            agent_ids: list[str] = []

            def watch(event: Any) -> None:
                if isinstance(event, AgentActivity) and isinstance(event.event, ToolStarted):
                    agent_ids.append(event.agent_id)
                    record = orch.tracker.records()[0]
                    assert record.controls is not None
                    record.controls.steer("also check the tests")
                if (
                    isinstance(event, AgentActivity)
                    and isinstance(event.event, Notice)
                    and "steering" in event.event.message
                ):
                    acknowledged.set()
                    door.open()

            orch.bus.subscribe(watch)
            from agentcell.orchestrator.delegation._runner import DelegationRequest, RunHandle

            handle = RunHandle()
            record = orch.tracker.start("steerable", "steer me", handle)
            result = await asyncio.wait_for(
                orch.runner.run(
                    DelegationRequest(agent_type="steerable", prompt="first task"),
                    orch._direct.scope(),
                    handle=handle,
                ),
                60,
            )
            assert acknowledged.is_set()
            assert record.task_id == "t1"
    assert result.status is RunStatus.COMPLETED
    assert result.text == "first task | also check the tests"


async def test_map_keeps_input_order_and_contains_failures(
    tracked: SpawnRecorder, settings: Settings, tmp_path: Any
) -> None:
    crasher = FunctionModel(child_models.call_tool_named_in_prompt, name="function:crasher")
    orch = await make(
        tracked,
        main=FunctionModel(lambda m, t: "unused", name="function:main"),
        agents=[agent("crasher", ["segfault", "read_file"], model="function:crasher")],
        models={"function:crasher": crasher},
        settings=settings,
        tools=[child_models.segfault],
        workdir=tmp_path,
    )
    prompts = ["read_file", "segfault", "read_file", "segfault", "read_file"]
    async with orch:
        results = await orch.map("crasher", prompts, concurrency=3)
    assert [r.status for r in results] == [
        RunStatus.COMPLETED,
        RunStatus.CRASHED,
        RunStatus.COMPLETED,
        RunStatus.CRASHED,
        RunStatus.COMPLETED,
    ]
    assert all(r.text.startswith("after read_file") for r in results if r.ok)


async def test_usage_is_aggregated_per_agent_and_budgets_hold_under_fan_out(
    tracked: SpawnRecorder, tmp_path: Any
) -> None:
    fine = FunctionModel(child_models.answer_prompt, name="function:fine")
    settings = Settings(approval="allow", max_workers=8, warm_spares=2)
    settings.budgets.max_subagents = 3
    calls = lambda: [  # noqa: E731
        tool_call("task", subagent_type="fine", prompt=f"p{i}") for i in range(6)
    ]
    orch = await make(
        tracked,
        main=main_model(calls),
        agents=[agent("fine", [], model="function:fine")],
        models={"function:fine": fine},
        settings=settings,
        workdir=tmp_path,
    )
    async with orch:
        report = await orch.run("fan out")
    statuses = sorted(r.status.value for r in report.subagents)
    assert statuses == ["budget"] * 3 + ["completed"] * 3
    completed = [r for r in report.subagents if r.ok]
    for result in completed:
        entry = orch.ledger.agents[result.agent_id]
        assert entry.usage == result.usage and entry.usage.total_tokens > 0
    assert orch.ledger.total == orch.ledger.agents["main"].usage + sum(
        (r.usage for r in completed), type(report.usage)()
    )


async def test_context_fork_seeds_the_completed_turns(
    tracked: SpawnRecorder, settings: Settings, tmp_path: Any
) -> None:
    forked = FunctionModel(child_models.answer_prompt, name="function:forked")
    orch = await make(
        tracked,
        main=main_model(lambda: [tool_call("task", subagent_type="forked", prompt="continue")]),
        agents=[agent("forked", [], model="function:forked", context="fork")],
        models={"function:forked": forked},
        settings=settings,
        workdir=tmp_path,
    )
    async with orch:
        await orch.run("the earlier turn")
    (call,) = forked.calls
    contents = [getattr(m, "content", "") for m in call.messages]
    assert contents[1] == "the earlier turn"  # the parent's completed turn came along
    assert contents[-1] == "continue"


async def test_an_agent_file_cannot_loosen_the_permission_mode(
    tracked: SpawnRecorder, tmp_path: Any
) -> None:
    queries: list[ApprovalQuery] = []

    def decide(query: ApprovalQuery) -> bool:
        queries.append(query)
        return False

    writer = FunctionModel(child_models.run_echo, name="function:writer")
    orch = await make(
        tracked,
        main=FunctionModel(lambda m, t: "unused", name="function:main"),
        agents=[
            agent("writer", ["bash"], model="function:writer", permission_mode="bypassPermissions")
        ],
        models={"function:writer": writer},
        settings=Settings(approval="ask", permission_mode="default", max_workers=2, warm_spares=0),
        approval=CallbackChannel(decide),
        workdir=tmp_path,
    )
    async with orch:
        result = await orch.delegate("writer", "run it")
    assert len(queries) == 1  # it still had to ask: bypass was not granted by its file
    assert "permission denied" in result.text


async def test_a_forged_delegate_request_is_refused(tmp_path: Any) -> None:
    from agentcell.orchestrator.delegation._relay import delegation_reply
    from agentcell.protocol import AgentSpec, DelegateReply, DelegateRequest

    async def never(request: Any, scope: Any) -> Any:
        raise AssertionError("a refused delegation must not run")

    orch = Orchestrator(model=FunctionModel(lambda m, t: "x"), load_agent_files=False, record=False)
    spec = AgentSpec(
        agent_id="a1", agent_type="x", prompt="p", depth=1, max_depth=3
    )  # no task offered
    frame = DelegateRequest(
        request_id=7, call_id="c", tool="task", arguments='{"subagent_type":"Explore","prompt":"x"}'
    )
    reply = await delegation_reply(
        frame,
        AgentDefinition(name="x"),
        spec,
        registry=orch.registry,
        delegate=never,
        background=False,
        account=None,
    )
    assert isinstance(reply, DelegateReply) and reply.is_error and reply.request_id == 7
    assert "permission denied" in reply.content
