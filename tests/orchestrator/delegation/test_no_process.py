"""A sub-agent that never got a process is an error the run reports (issue 27 item 2).

Before, one cancelled while it waited for a process read ``cancelled before it got a
process`` and the run printed ``completed`` (exit 0); one whose pool could not start a
child was a sub-agent error the run's status did not mention.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

from agentcell.orchestrator import Orchestrator, Settings
from agentcell.orchestrator.backends._forkserver import WorkerPool
from agentcell.protocol import RunStatus, ToolMessage
from cli_runner import agentcell, cli_env, project
from conftest import SpawnRecorder
from http_script import _system, _tool_results
from model_servers import Call, ModelServer, Reply

from agentcell.testing import FunctionModel, reply, tool_call

__all__ = ["project"]  # the fixture (tests/support/cli_runner.py)


def _delegate_once(messages: list[Any], tools: list[Any]) -> Any:
    if not any(isinstance(m, ToolMessage) for m in messages):
        return reply("delegating", tool_call("task", subagent_type="Explore", prompt="look"))
    return "done, with what the sub-agent said"


async def test_a_pool_that_cannot_start_a_child_makes_the_run_an_error(
    spawned: SpawnRecorder, tmp_path: Path
) -> None:
    from pool_handlers import child_with_wrong_version

    # Every child it starts speaks another protocol: none ever gets to run.
    async with WorkerPool(max_workers=1, warm=0, target=child_with_wrong_version) as pool:
        orch = Orchestrator(
            model=FunctionModel(_delegate_once, name="function:main"),
            settings=Settings(approval="allow"),
            load_agent_files=False,
            workdir=tmp_path,
            pool=pool,
        )
        async with orch:
            report = await orch.run("go")
            direct = await orch.delegate("Explore", "look")
    assert report.main.status is RunStatus.COMPLETED  # the main agent itself answered
    assert report.status is RunStatus.ERROR and not report.ok
    assert report.error.startswith("a sub-agent of this run never got a process; a1 (Explore): ")
    assert "protocol mismatch" in report.error and "\n" not in report.error
    (sub,) = report.subagents
    assert sub.status is RunStatus.ERROR and sub.no_process and sub.pid is None
    assert sub.error.startswith("never got a process: WorkerStartError: ")
    summary = json.loads((Path(report.run_dir) / "summary.json").read_text())
    assert summary["status"] == "error" and summary["subagents"][0]["no_process"] is True
    assert direct.status is RunStatus.ERROR and direct.no_process


class _TwoBackgroundThenAnswer:
    """The main agent starts two background sub-agents and answers at once; each
    sub-agent's model request hangs until the run stops it. The second is asked for
    only once the first has its process (its model request came), so it is the one that
    waits in the queue."""

    def __init__(self) -> None:
        self.first_running = threading.Event()

    def __call__(self, body: dict[str, Any], api: str) -> Reply:
        if "main agent of agentcell" not in _system(body):
            self.first_running.set()
            return Reply(hang=True)
        done = len(_tool_results(body))
        if done == 1:
            assert self.first_running.wait(60), "the first sub-agent never asked its model"
        if done < 2:
            call = {"subagent_type": "Explore", "prompt": f"job {done}", "background": True}
            return Reply(tool_calls=[Call("task", call)])
        return Reply(text="the answer, without waiting")


def test_a_background_sub_agent_still_queued_at_the_end_fails_the_run_through_the_cli(
    project: Path, model_server: ModelServer
) -> None:
    # One worker: the first background sub-agent holds it (its model hangs), the second
    # waits in the queue; the run waits 0 s for background work, so it ends them both.
    config = project.parent / "home" / ".config" / "agentcell" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text("background_wait_s = 0\n")
    model_server.responder = _TwoBackgroundThenAnswer()
    done = agentcell(
        *("run", "--json", "--quiet", "--model", "openai:gpt-test"),
        *("--max-workers", "1", "--approve", "allow", "go"),
        cwd=project,
        env=cli_env(project, model_server),
    )
    assert done.returncode == 1, (done.stdout, done.stderr)
    out = json.loads(done.stdout)
    assert out["final_text"] == "the answer, without waiting"  # the answer still arrives
    assert out["status"] == "error"
    assert "never got a process" in out["error"] and "cancelled after waiting" in out["error"]
    by_prompt = {s["agent_id"]: s for s in out["subagents"]}
    assert sorted(s["status"] for s in by_prompt.values()) == ["cancelled", "error"]
    queued = next(s for s in by_prompt.values() if s["status"] == "error")
    assert queued["no_process"] is True and queued["pid"] is None
    assert "Traceback" not in done.stderr


def test_a_queued_sub_agent_stopped_by_a_budget_keeps_the_budget_status() -> None:
    import time

    from agentcell.orchestrator.delegation._relay import Progress
    from agentcell.orchestrator.delegation._settle import settle, with_cancel_reason
    from agentcell.orchestrator.telemetry._usage import UsageLedger
    from agentcell.protocol import Limits

    base = dict(agent_id="a1", agent_type="x", description="", background=False, depth=1)
    queued = settle(
        base, None, Progress(), time.perf_counter(), limits=Limits(), cancelled=True,
        ledger=UsageLedger(), run_dir="",
    )  # fmt: skip
    assert queued.status is RunStatus.ERROR and queued.no_process
    stopped = with_cancel_reason(queued, RunStatus.BUDGET, "over budget", cancelled=True)
    assert stopped.status is RunStatus.BUDGET and not stopped.no_process
    assert stopped.error == "over budget"


def test_a_queued_sub_agent_cancelled_by_name_stays_an_error_with_the_reason() -> None:
    import time

    from agentcell.orchestrator.delegation._relay import Progress
    from agentcell.orchestrator.delegation._settle import settle, with_cancel_reason
    from agentcell.orchestrator.telemetry._usage import UsageLedger
    from agentcell.protocol import Limits

    base = dict(agent_id="a1", agent_type="x", description="", background=False, depth=1)
    queued = settle(
        base, None, Progress(), time.perf_counter(), limits=Limits(), cancelled=True,
        ledger=UsageLedger(), run_dir="",
    )  # fmt: skip
    named = with_cancel_reason(queued, RunStatus.CANCELLED, "by task_control", cancelled=True)
    assert named.status is RunStatus.ERROR and named.no_process
    assert named.error.startswith("never got a process: cancelled after waiting ")
    assert named.error.endswith(" for one (by task_control)")
