"""The prepare and settle phases of a delegation, without a process: plain definitions
and settings in, a spec or a result out."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from agentcell.orchestrator import AgentDefinition, Settings
from agentcell.orchestrator.backends._outcome import ChildOutcome, OutcomeKind
from agentcell.orchestrator.definitions._registry import AgentRegistry
from agentcell.orchestrator.delegation._prepare import Preparer, too_large
from agentcell.orchestrator.delegation._relay import Progress
from agentcell.orchestrator.delegation._request import DelegationRequest, Scope
from agentcell.orchestrator.delegation._settle import settle, with_cancel_reason
from agentcell.orchestrator.model_relay._limiter import ProviderLimiter
from agentcell.orchestrator.telemetry._usage import UsageLedger
from agentcell.protocol import Limits, RunResult, RunStatus, Usage


def preparer(tmp_path: Path, settings: Settings | None = None) -> Preparer:
    settings = settings or Settings(subagent_max_turns=20)
    return Preparer(
        settings=settings,
        registry=AgentRegistry.builtin(),
        workdir=str(tmp_path),
        home=tmp_path / "home",
        limiter=ProviderLimiter(settings.limits),
        model_objects={},
        custom_tools={},
    )


def test_prepare_narrows_the_definition_and_never_widens_it(tmp_path: Path) -> None:
    prep = preparer(tmp_path)
    definition = AgentDefinition(
        name="lead", tools=["read_file", "bash"], model="inherit", max_turns=50
    )
    scope = Scope("main", ["read_file", "grep"], "function:parent", permission_mode="plan")
    prepared = prep.spec(definition, DelegationRequest("lead", "p"), scope, "a1", False, run_dir="")
    spec = prepared.spec
    assert spec.tools == ["read_file"]  # never more than its parent's
    assert spec.model == "function:parent"  # inherit
    assert spec.max_turns == 20  # the operator's cap
    assert spec.permission_mode == "plan"  # the parent's, stricter than the default
    assert spec.depth == 1 and spec.remote_tools == []  # no task tool spec given
    assert spec.system_prompt.endswith(f"Working directory: {tmp_path}")
    with pytest.raises(ValueError, match="overrides may only narrow"):
        prep.spec(
            definition, DelegationRequest("lead", "p", max_turns=21), scope, "a2", False, run_dir=""
        )
    pinned = AgentDefinition(name="pinned", model="function:a")
    with pytest.raises(ValueError, match="may only narrow"):
        prep.spec(
            pinned,
            DelegationRequest("pinned", "p", model="function:b"),
            scope,
            "a3",
            False,
            run_dir="",
        )


def test_prepare_refuses_a_start_too_large_for_one_frame(tmp_path: Path) -> None:
    prep = preparer(tmp_path)
    definition = AgentDefinition(name="x", model="function:x")
    scope = Scope("main", [], "function:x")
    prepared = prep.spec(
        definition, DelegationRequest("x", "y" * 4096), scope, "a1", False, run_dir=""
    )
    assert too_large(prep.start(prepared), limit=1 << 20) == ""
    assert too_large(prep.start(prepared), limit=4096).startswith("the prompt is too large")


def outcome(kind: OutcomeKind, result: RunResult | None = None, detail: str = "") -> ChildOutcome:
    return ChildOutcome(kind=kind, pid=42, result=result, detail=detail)


@pytest.mark.parametrize(
    ("ended", "cancelled", "status"),
    [
        (
            outcome(OutcomeKind.RESULT, RunResult(status=RunStatus.COMPLETED, text="t")),
            False,
            RunStatus.COMPLETED,
        ),
        (outcome(OutcomeKind.KILLED, detail="killed"), False, RunStatus.CANCELLED),
        (outcome(OutcomeKind.DEADLINE, detail="too slow"), False, RunStatus.TIMEOUT),
        (outcome(OutcomeKind.MEMORY, detail="memory limit"), False, RunStatus.LIMIT),
        (outcome(OutcomeKind.FAILURE, detail="broke"), False, RunStatus.ERROR),
        (outcome(OutcomeKind.SIGNALED, detail="SIGSEGV"), False, RunStatus.CRASHED),
        (outcome(OutcomeKind.SIGNALED, detail="SIGKILL"), True, RunStatus.CANCELLED),
        (None, True, RunStatus.ERROR),  # it never got a process: an error (issue 27)
    ],
)
def test_settle_turns_each_way_a_child_ends_into_one_status(
    ended: ChildOutcome | None, cancelled: bool, status: RunStatus
) -> None:
    base = dict(agent_id="a1", agent_type="x", description="", background=False, depth=1)
    progress = Progress(turns=2, usage=Usage(input_tokens=3), model="function:x")
    result = settle(
        base,
        ended,
        progress,
        time.perf_counter(),
        limits=Limits(),
        cancelled=cancelled,
        ledger=UsageLedger(),
        run_dir="",
    )
    assert result.status is status, result
    assert result.turns == 2 and result.model == "function:x"
    assert result.pid == (42 if ended is not None else None)


def test_a_budget_cancel_replaces_an_answer_that_came_as_it_was_crossed() -> None:
    from agentcell.orchestrator.delegation._results import SubAgentResult

    done = SubAgentResult(agent_id="a1", agent_type="x", status=RunStatus.COMPLETED, text="t")
    over = with_cancel_reason(done, RunStatus.BUDGET, "over budget", cancelled=True)
    assert over.status is RunStatus.BUDGET and over.error == "over budget"
    kept = with_cancel_reason(done, RunStatus.CANCELLED, "stop", cancelled=True)
    assert kept.status is RunStatus.COMPLETED  # a plain cancel keeps an answer it got
