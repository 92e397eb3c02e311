"""Under pressure: huge results, full disks and deep nesting lose nothing and hang nothing."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from agentcell.orchestrator import AgentDefinition, Orchestrator, Settings
from agentcell.protocol import ToolMessage, UserMessage
from conftest import SpawnRecorder

from agentcell.testing import FunctionModel, reply, tool_call

ANSWER_CHARS = 300_000
FAN_OUT = 6


def _big_answer(messages: list[Any], tools: list[Any]) -> str:
    task = next(m.content for m in messages if isinstance(m, UserMessage))
    return f"<{task}>" + "x" * ANSWER_CHARS + f"</{task}>"


async def test_background_results_reach_the_main_agent_capped_and_kept_once_on_disk(
    spawned: SpawnRecorder, tmp_path: Path
) -> None:
    seen: list[str] = []  # the user messages the main agent's last turn carried

    def main(messages: list[Any], tools: list[Any]) -> Any:
        if not any(isinstance(m, ToolMessage) for m in messages):
            calls = [
                tool_call("task", subagent_type="big", prompt=f"p{i}", background=True)
                for i in range(FAN_OUT)
            ]
            return reply("fanning out", *calls)
        last = messages[-1]
        if isinstance(last, UserMessage) and "Background task results" in last.content:
            seen.append(last.content)
            return "summary"
        return "waiting for the background results"

    big = AgentDefinition(
        name="big",
        description="answers at length",
        system_prompt="-",
        model="function:big",
        source="test",
    )
    orch = Orchestrator(
        model=FunctionModel(main, name="function:main"),
        agents=[big],
        models={"function:big": FunctionModel(_big_answer, name="function:big")},
        settings=Settings(approval="allow", max_workers=FAN_OUT),
        load_agent_files=False,
        workdir=tmp_path,
    )
    async with orch:
        report = await orch.run("go")
    assert report.ok, report.error
    assert len(seen) == 1
    delivered = seen[0]
    # All six answers, each cut to its share of one tool result's cap (30,000 chars).
    assert len(delivered) < 40_000, len(delivered)
    assert delivered.count("characters of this answer omitted") == FAN_OUT
    assert all(f"<p{i}>" in delivered and f"</p{i}>" in delivered for i in range(FAN_OUT))
    run_dir = Path(report.run_dir)
    kept = sorted((run_dir / "results").iterdir())
    assert len(kept) == FAN_OUT
    for path in kept:
        text = path.read_text()
        assert len(text) > ANSWER_CHARS and path.stat().st_mode & 0o777 == 0o600
        assert str(path.relative_to(tmp_path)) in delivered  # the note says where


HUGE_ANSWER_CHARS = 17 * 1024 * 1024  # past the 16 MiB a frame may carry


def _huge_answer(messages: list[Any], tools: list[Any]) -> str:
    return "<start>" + "y" * HUGE_ANSWER_CHARS + "<end>"


async def test_an_answer_larger_than_a_frame_arrives_cut_and_is_saved_whole(
    spawned: SpawnRecorder, tmp_path: Path
) -> None:
    huge = AgentDefinition(
        name="huge",
        description="answers at great length",
        system_prompt="-",
        model="function:huge",
        source="test",
    )
    orch = Orchestrator(
        model="scripted:echo",
        agents=[huge],
        models={"function:huge": FunctionModel(_huge_answer, name="function:huge")},
        settings=Settings(approval="allow"),
        load_agent_files=False,
        workdir=tmp_path,
    )
    async with orch:
        result = await orch.delegate("huge", "go")
    assert result.status.value == "completed", result.error
    assert result.text.startswith("<start>") and result.text.endswith("<end>")
    assert "characters of this answer omitted" in result.text
    assert len(result.text.encode()) < 16 * 1024 * 1024
    saved = result.text.split("is saved at ", 1)[1].split(" ...]", 1)[0]
    whole = Path(saved).read_text()
    assert len(whole) == HUGE_ANSWER_CHARS + len("<start><end>")


async def test_bash_says_how_much_of_a_flood_it_dropped_and_that_it_is_not_saved(
    tmp_path: Path,
) -> None:
    from agentcell.worker.tools._bash import Bash
    from tool_calls import call, ctx_for

    ctx = ctx_for(tmp_path, run_dir=tmp_path / "run", call_id="c1")
    result = await call(Bash(), ctx, command="yes | head -c 20000000")
    # The 30,000-character cut says "the full output … is saved": that file holds only
    # the 128 KiB kept, and the result must say so, and how much was dropped.
    assert "the command printed 20,000,000 bytes" in result.content
    assert "dropped and are not saved anywhere" in result.content


_LONG_LINE_READER = """
import asyncio, json, resource, sys
from pathlib import Path
from agentcell.worker.tools import ToolContext
from agentcell.worker.tools._files import Grep, ReadFile

async def main(workdir):
    ctx = ToolContext(workdir=Path(workdir))
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    read = await ReadFile().execute(ReadFile().parse_args('{"path": "one-line.txt"}'), ctx)
    found = await Grep().execute(Grep().parse_args('{"pattern": "NEEDLE"}'), ctx)
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    text = lambda out: out if isinstance(out, str) else out.content
    print(json.dumps({"grown_kib": after - before, "read": text(read), "grep": text(found)}))

asyncio.run(main(sys.argv[1]))
"""


def test_read_file_and_grep_read_a_huge_single_line_in_bounded_pieces(tmp_path: Path) -> None:
    line_bytes = 96 * 1024 * 1024
    with open(tmp_path / "one-line.txt", "wb") as f:
        for _ in range(line_bytes // (1 << 20)):
            f.write(b"z" * (1 << 20))
        f.write(b"NEEDLE at the end\n")
    done = subprocess.run(
        [sys.executable, "-c", _LONG_LINE_READER, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    report = json.loads(done.stdout)
    # Whole-line reads held the line's bytes and its decoded text (> 192 MiB here).
    assert report["grown_kib"] < 32 * 1024, report["grown_kib"]
    assert "line cut" in report["read"] and f"{line_bytes}" not in report["read"]
    assert "one-line.txt:1:" in report["grep"] and "NEEDLE" in report["grep"]


async def test_a_new_pool_removes_the_temp_folders_a_killed_orchestrators_children_left(
    spawned: SpawnRecorder,
) -> None:
    from agentcell.orchestrator.backends._forkserver import WorkerPool
    from agentcell.worker.sandbox._spare import private_tmp

    gone = await asyncio.create_subprocess_exec("true")
    await gone.wait()  # a pid that no longer exists: a sub-agent SIGKILLed with its parent
    stale, live = private_tmp(gone.pid), private_tmp(os.getpid())
    for folder in (stale, live):
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "big.bin").write_bytes(b"x" * 4096)
    try:
        async with WorkerPool(max_workers=1, warm=0):
            pass
        assert not stale.exists()
        assert (live / "big.bin").exists()  # a live process's folder is never touched
    finally:
        shutil.rmtree(stale, ignore_errors=True)
        shutil.rmtree(live, ignore_errors=True)


async def test_nested_delegation_with_one_worker_lends_the_waiting_parents_slot(
    spawned: SpawnRecorder, tmp_path: Path
) -> None:
    """``--max-depth 2 --max-workers 1``: the sub-agent waiting on its own ``task`` held
    the only slot its child could use, and the run hung until its 1,800 s timeout."""
    import child_models

    def agent(name: str, model: str, tools: list[str]) -> AgentDefinition:
        return AgentDefinition(
            name=name,
            description=name,
            system_prompt="-",
            model=model,
            tools=tools,
            source="test",
        )

    orch = Orchestrator(
        model="scripted:echo",
        agents=[agent("forger", "function:forger", ["task"]), agent("leaf", "function:leaf", [])],
        models={
            "function:forger": FunctionModel(child_models.forge_task_call, name="function:forger"),
            "function:leaf": FunctionModel(child_models.answer_prompt, name="function:leaf"),
        },
        settings=Settings(approval="allow", max_depth=2, max_workers=1, warm_spares=0),
        load_agent_files=False,
        workdir=tmp_path,
    )
    async with orch:
        result = await asyncio.wait_for(orch.delegate("forger", "go"), 120)
    assert result.status.value == "completed", result.error
    assert "[completed] leaf" in result.text and "answer to: deeper work" in result.text


def test_one_prompt_cannot_start_an_unbounded_tree_by_default() -> None:
    from agentcell.orchestrator.config._settings import Settings as Loaded

    assert Loaded().budgets.max_subagents == 256
