"""Every task the parent starts for a run has an owner, and a run's failure stays its own.

A child's relay answers its questions (approvals, hooks, nested tasks) in tasks of the
relay's TaskGroup. One that raises ends that child's run, as that child's error result:
it neither hangs the child (an answer that never comes) nor reaches its siblings.
"""

from __future__ import annotations

import ast
import asyncio
from pathlib import Path
from typing import Any

import child_models
from agentcell.orchestrator import CallbackChannel, Orchestrator, Settings
from agentcell.protocol import RunStatus
from conftest import SpawnRecorder
from delegation_util import gate
from places import ROOT
from task_util import GUARD_S, agent

from agentcell.testing import FunctionModel


async def test_a_relay_that_raises_fails_its_own_child_and_its_sibling_completes(
    spawned: SpawnRecorder, tmp_path: Path
) -> None:
    def broken_channel(query: Any) -> bool:
        raise RuntimeError("the approval channel broke")

    async with gate() as door:
        orch = Orchestrator(
            model=FunctionModel(lambda m, t: "unused", name="function:main"),
            agents=[agent("breaker", ["bash"]), agent("steady", ["wait_at_gate"])],
            models={
                "function:breaker": FunctionModel(child_models.run_echo, name="function:breaker"),
                "function:steady": FunctionModel(
                    child_models.gate_then_answer, name="function:steady"
                ),
            },
            settings=Settings(
                approval="ask", permission_mode="default", max_workers=2, warm_spares=0
            ),
            approval=CallbackChannel(broken_channel),
            tools=[door.tool()],
            load_agent_files=False,
            record=False,
            workdir=tmp_path,
        )
        async with orch, asyncio.TaskGroup() as group:
            steady = group.create_task(orch.delegate("steady", "the steady job"))
            await asyncio.wait_for(door.wait_arrivals(1), GUARD_S)  # the sibling is mid-run
            # breaker's bash asks for approval; answering it raises in breaker's relay.
            broken = await asyncio.wait_for(orch.delegate("breaker", "run it"), GUARD_S)
            assert not steady.done()  # the failure did not touch the sibling
            door.open()
    assert broken.status is RunStatus.ERROR, broken
    assert "the parent could not run this sub-agent" in broken.error
    assert "the approval channel broke" in broken.error
    assert steady.result().status is RunStatus.COMPLETED, steady.result().error
    assert steady.result().text == "done: the steady job"


async def test_a_failure_before_the_child_starts_is_that_runs_result(
    spawned: SpawnRecorder, tmp_path: Path
) -> None:
    """A hook runner that raises (a bug, the environment) while a run is announced: the
    caller gets that run's error result, not the exception."""
    orch = Orchestrator(
        model=FunctionModel(lambda m, t: "unused", name="function:main"),
        agents=[agent("steady", [])],
        models={"function:steady": FunctionModel(lambda m, t: "ok", name="function:steady")},
        settings=Settings(max_workers=1, warm_spares=0),
        load_agent_files=False,
        record=False,
        workdir=tmp_path,
    )

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise OSError("the hook runner broke")

    async with orch:
        orch.runner.hooks.for_definition = broken  # type: ignore[method-assign]
        result = await asyncio.wait_for(orch.delegate("steady", "hi"), GUARD_S)
    assert result.status is RunStatus.ERROR
    assert result.error == "the parent could not run this sub-agent: OSError: the hook runner broke"


#: Where the parent may start a task outside a TaskGroup: nowhere. Every task it starts
#: is a member of a ``TaskNursery`` (``protocol/_tasks.py``) or a ``TaskGroup`` of its
#: owner: the pool, the Ray backend and driver, background sub-agents, streamed runs
#: (``_run_stream.py``), the runner's steps that outlive a cancel (``_finishing.py``:
#: releases, egress proxies, worktree git), the chat's turns, hook starts. The provider
#: limiter's token debt is a number the next request pays, not a task. A new exception
#: needs its reason here and an owner that cancels and awaits it.
KNOWN_BARE_TASKS: dict[tuple[str, str], str] = {}


def _makes_coroutines(arg: ast.expr) -> bool:
    if isinstance(arg, ast.Starred):
        arg = arg.value
    return isinstance(arg, ast.Call | ast.GeneratorExp | ast.ListComp)


def _bare_task_starts(path: Path) -> set[tuple[str, str]]:
    """(file, enclosing function) of each task started outside a TaskGroup."""
    found: set[tuple[str, str]] = set()

    def walk(node: ast.AST, where: list[str]) -> None:
        for child in ast.iter_child_nodes(node):
            inner = where
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                inner = [*where, child.name]
            # A call, or a reference handed on as a task starter (``start=...``); and
            # ``asyncio.shield(<a call>)``, which wraps a coroutine in a task of nobody's.
            if (
                (
                    isinstance(child, ast.Attribute)
                    and child.attr in ("create_task", "ensure_future")
                    and not ast.unparse(child.value).endswith("group")
                )
                or (
                    isinstance(child, ast.Call)
                    and ast.unparse(child.func) == "asyncio.shield"
                    and child.args
                    and isinstance(child.args[0], ast.Call)
                )
                or (
                    # ``asyncio.gather`` of coroutines wraps each in a task that outlives a
                    # sibling's failure (``gather_owned`` does not); of tasks, it only waits.
                    isinstance(child, ast.Call)
                    and ast.unparse(child.func) == "asyncio.gather"
                    and any(_makes_coroutines(arg) for arg in child.args)
                )
            ):
                found.add((str(path.relative_to(ROOT)), ".".join(where)))
            walk(child, inner)

    walk(ast.parse(path.read_text()), [])
    return found


def test_every_layer_starts_tasks_in_task_groups_but_for_known_owners() -> None:
    """The runner, the relay (approvals, hooks, nested tasks, provider permits), the
    pool, the Ray backend and driver, background sub-agents, the chat; the child's run,
    reader and heartbeat, the engine's loop, MCP servers' clients, the TCP channel's reader
    and handshakes; and everything new: every task is started in a group (``TaskGroup`` or
    ``TaskNursery``, in protocol/); exceptions (none today) are listed above, each with
    its reason."""
    layers = ("protocol", "worker", "orchestrator", "agentcell")
    files = [p for layer in layers for p in (ROOT / layer).rglob("*.py")]
    found = set().union(*(_bare_task_starts(p) for p in files))
    for (path, function), reason in sorted(KNOWN_BARE_TASKS.items()):
        print(f"bare task in {path} {function}: {reason}")
    assert found - set(KNOWN_BARE_TASKS) == set(), (
        "a task started outside a TaskGroup: start it in the group that owns its work"
    )
    assert set(KNOWN_BARE_TASKS) - found == set(), "a listed exception is gone: unlist it"
