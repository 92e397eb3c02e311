"""The last three of the parent's tasks that had no owner now have one (issue 20).

- A streamed run (``run_stream``) is a member of the orchestrator's nursery: a stream its
  consumer drops without closing is cancelled and awaited when the orchestrator closes.
- A worktree's git step is a member of the runner's nursery (its finishing steps): a run
  cancelled (by its caller, then by its handle) while git works leaves the step, and the
  take-away of its tree, to the runner, whose close lets both finish: nothing pending,
  no tree left.
- The provider limiter's token debt is a number the next request pays, not a task.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import child_models
import pytest
from agentcell.orchestrator import AgentDefinition, Orchestrator, RunReport, Settings
from agentcell.orchestrator.backends._workers import Lease
from agentcell.orchestrator.config._settings import ProviderLimits
from agentcell.orchestrator.delegation import _finishing
from agentcell.orchestrator.model_relay._limiter import ModelLimiter
from agentcell.worker.tools import function_tool
from conftest import SpawnRecorder
from delegation_util import gate
from git_util import branches, git, git_repo

from agentcell.testing import FunctionModel, reply, tool_call, tool_results

#: A guard, not a synchronisation: each wait below is for a state, never for time.
GUARD_S = 60.0


async def until(condition: Callable[[], bool], what: str) -> None:
    try:
        async with asyncio.timeout(GUARD_S):
            while not condition():  # noqa: ASYNC110 - the state is changed by other tasks
                await asyncio.sleep(0.005)
    except TimeoutError:
        raise AssertionError(f"timed out waiting for {what}") from None


def others(before: set[asyncio.Task[Any]]) -> set[asyncio.Task[Any]]:
    """Tasks still pending that the test did not find running when it began."""
    return {t for t in asyncio.all_tasks() - before if t is not asyncio.current_task()}


# -- run_stream ----------------------------------------------------------------------------
async def test_a_dropped_run_stream_is_cancelled_and_awaited_when_the_orchestrator_closes(
    spawned: SpawnRecorder, tmp_path: Path
) -> None:
    holding, cancelled = asyncio.Event(), asyncio.Event()

    @function_tool(read_only=True)
    async def hold() -> str:
        """Wait until the run is cancelled."""
        holding.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return "never"

    def main(messages: list[Any], tools: list[Any]) -> Any:
        return reply("", tool_call("hold")) if not tool_results(messages) else "never"

    orch = Orchestrator(
        model=FunctionModel(main, name="function:main"),
        tools=[hold],
        settings=Settings(approval="allow", max_workers=1, warm_spares=0),
        load_agent_files=False,
        record=False,
        workdir=tmp_path,
    )
    before = asyncio.all_tasks()
    async with orch:
        stream = orch.run_stream("go")
        await asyncio.wait_for(anext(stream), GUARD_S)
        await asyncio.wait_for(holding.wait(), GUARD_S)
        # The consumer drops the stream here without closing it, mid-run.
    assert cancelled.is_set()  # the orchestrator's close cancelled the streamed run
    assert others(before) == set()  # ... and waited for it: nothing is left pending
    with pytest.raises(RuntimeError, match="the orchestrator closed while the run streamed"):
        async for _ in stream:
            pass


async def test_a_streamed_runs_failure_is_raised_by_the_stream(
    spawned: SpawnRecorder, tmp_path: Path
) -> None:
    orch = Orchestrator(
        model=FunctionModel(lambda m, t: "ok", name="function:main"),
        settings=Settings(max_workers=1, warm_spares=0),
        load_agent_files=False,
        record=False,
        workdir=tmp_path,
    )

    async def broken(prompt: str, **kwargs: Any) -> RunReport:
        raise ValueError("the run broke")

    async with orch:
        orch.run = broken  # type: ignore[method-assign]
        with pytest.raises(ValueError, match="the run broke"):
            async for _ in orch.run_stream("go"):
                pass


# -- the worktree step ---------------------------------------------------------------------
async def test_a_worktree_step_outlives_its_cancelled_run_and_its_tree_is_taken_away(
    spawned: SpawnRecorder, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = git_repo(tmp_path / "repo")
    arrived, release = asyncio.Event(), asyncio.Event()
    made: list[Path] = []
    real = _finishing.create_worktree

    async def held_git(*args: Any) -> Any:  # git in flight until the test lets it go on
        arrived.set()
        await release.wait()
        tree = await real(*args)
        made.append(tree.path)
        return tree

    monkeypatch.setattr(_finishing, "create_worktree", held_git)
    orch = Orchestrator(
        model=FunctionModel(lambda m, t: "unused", name="function:main"),
        agents=[
            AgentDefinition(
                name="isolated",
                description="d",
                tools=[],
                model="function:isolated",
                isolation="worktree",
            )
        ],
        models={
            "function:isolated": FunctionModel(child_models.answer_prompt, name="function:iso")
        },
        settings=Settings(approval="allow", max_workers=1, warm_spares=0),
        load_agent_files=False,
        record=False,
        workdir=repo,
        run_dir=tmp_path / "run",
    )
    before = asyncio.all_tasks()
    async with orch:
        steps = orch.runner.finishing
        caller = asyncio.create_task(orch.delegate("isolated", "hi"))
        await asyncio.wait_for(arrived.wait(), GUARD_S)
        caller.cancel()
        await until(lambda: len(steps) == 2, "the take-away to join git's step")
        # Cancelled again (the run's handle: orch.cancel(), the orchestrator closing): it
        # ends the run's wait for the take-away, never the steps.
        orch.cancel()
        with pytest.raises(asyncio.CancelledError):
            await caller
        assert len(steps) == 2  # git goes on, and the take-away after it, in the runner
        release.set()
    # The orchestrator's close let both steps finish: git made the tree (it was not
    # cancelled half-way), then the unchanged tree was taken away.
    assert len(steps) == 0
    assert len(made) == 1 and not made[0].exists()
    assert others(before) == set()
    assert len(git(repo, "worktree", "list").splitlines()) == 1
    assert set(branches(repo)) <= {"master", "main"}


# -- the limiter ---------------------------------------------------------------------------
async def test_a_low_estimate_is_a_debt_the_next_request_pays_and_no_task() -> None:
    limiter = ModelLimiter("openai:m", ProviderLimits(tokens_per_minute=1000))
    before = asyncio.all_tasks()
    first, second = await limiter.acquire(tokens=600), await limiter.acquire(tokens=300)
    first.release(tokens=1000)  # 400 more than admitted: the bucket is over by 300
    assert others(before) == set()  # the release started nothing that could be left pending
    async with asyncio.TaskGroup() as group:
        # The next request waits for the debt (900 + 400 do not fit); cancelled, it
        # leaves the debt for the one after it.
        waiting = group.create_task(limiter.acquire(tokens=0))
        await until(lambda: limiter.stats.waiting == 1, "the request to wait for the debt")
        assert not waiting.done()
        waiting.cancel()
    assert limiter._debt == 400  # given back whole: the bucket took none of it
    second.release(tokens=300)
    limiter.close()
    assert limiter._debt == 0 and others(before) == set()


# -- a process's release -------------------------------------------------------------------
async def test_a_cancelled_runs_release_is_owned_by_the_runner_until_it_ends(
    spawned: SpawnRecorder, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The release of a run's process (its outcome read, the process reaped) goes on
    after a second cancel of the run, as a step of the runner, which waits for it."""
    releasing, go_on = asyncio.Event(), asyncio.Event()
    released: list[Any] = []
    real = Lease.release

    async def held_release(self: Lease) -> Any:
        releasing.set()
        await go_on.wait()
        outcome = await real(self)
        released.append(outcome)
        return outcome

    monkeypatch.setattr(Lease, "release", held_release)
    async with gate() as door:
        orch = Orchestrator(
            model=FunctionModel(lambda m, t: "unused", name="function:main"),
            agents=[
                AgentDefinition(
                    name="slow", description="d", tools=["wait_at_gate"], model="function:slow"
                )
            ],
            models={
                "function:slow": FunctionModel(child_models.gate_then_answer, name="function:slow")
            },
            tools=[door.tool()],
            settings=Settings(approval="allow", max_workers=1, warm_spares=0),
            load_agent_files=False,
            record=False,
            workdir=tmp_path,
        )
        before = asyncio.all_tasks()
        async with orch:
            steps = orch.runner.finishing
            caller = asyncio.create_task(orch.delegate("slow", "hi"))
            await asyncio.wait_for(door.wait_arrivals(1), GUARD_S)  # the child is mid-run
            caller.cancel()  # the child is stopped, then its process released ...
            await asyncio.wait_for(releasing.wait(), GUARD_S)
            orch.cancel()  # ... and the run cancelled again while the release is held
            with pytest.raises(asyncio.CancelledError):
                await caller
            assert len(steps) == 1 and not released  # the release goes on, in the runner
            go_on.set()
        assert len(steps) == 0 and len(released) == 1  # the close waited for it
        # Pending now: only the test's own gate, whose server the child still holds.
        assert {t for t in others(before) if "Gate._serve" not in repr(t.get_coro())} == set()


async def test_gather_owned_ends_every_sibling_before_the_first_error_goes_on() -> None:
    from agentcell.protocol._tasks import gather_owned

    ended: list[str] = []
    started = asyncio.Event()

    async def sibling() -> str:
        try:
            started.set()
            await asyncio.Event().wait()  # until cancelled
        finally:
            ended.append("sibling")
        return "never"

    async def failing() -> str:
        await started.wait()
        raise ValueError("the first error")

    with pytest.raises(ValueError, match="the first error"):  # itself, not a group
        await gather_owned(sibling(), failing())
    assert ended == ["sibling"]  # asyncio.gather leaves it running
    assert await gather_owned(asyncio.sleep(0, "a"), asyncio.sleep(0, "b")) == ["a", "b"]
