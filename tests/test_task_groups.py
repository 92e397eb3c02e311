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
from agentcell.orchestrator import AgentDefinition, CallbackChannel, Orchestrator, Settings
from agentcell.protocol import RunStatus
from agentcell.worker.testing import FunctionModel
from conftest import SpawnRecorder
from delegation_util import gate

ROOT = Path(__file__).resolve().parents[1]

#: A guard, not a synchronisation: without containment the broken run never ends.
GUARD_S = 120


def agent(name: str, tools: list[str]) -> AgentDefinition:
    return AgentDefinition(
        name=name,
        description=f"{name} test agent",
        system_prompt=f"You are {name}.",
        tools=tools,
        model=f"function:{name}",
        source="test",
    )


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

    async def broken_run(*args: Any, **kwargs: Any) -> Any:
        raise OSError("the hook runner broke")

    async with orch:
        orch.runner.hooks.run = broken_run  # type: ignore[method-assign]
        result = await asyncio.wait_for(orch.delegate("steady", "hi"), GUARD_S)
    assert result.status is RunStatus.ERROR
    assert result.error == "the parent could not run this sub-agent: OSError: the hook runner broke"


def _bare_task_starts(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("create_task", "ensure_future")
            and not ast.unparse(node.func.value).endswith("group")
        ):
            found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def test_the_delegation_phases_start_tasks_only_in_task_groups() -> None:
    """The runner and the relay start tasks only as ``group.create_task`` of a TaskGroup."""
    phases = ("_runner.py", "_relay.py", "_prepare.py", "_settle.py")
    folder = ROOT / "orchestrator" / "delegation"
    bare = [hit for name in phases for hit in _bare_task_starts(folder / name)]
    # The one exception: git's worktree creation is shielded so a cancel lets it finish.
    assert bare == [f"orchestrator/delegation/_runner.py:{_worktree_line(folder)}"], bare


def _worktree_line(folder: Path) -> int:
    for number, line in enumerate((folder / "_runner.py").read_text().splitlines(), 1):
        if "making = asyncio.ensure_future(" in line:
            return number
    return -1
