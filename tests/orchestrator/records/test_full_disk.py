"""A full disk is a state agentcell reports, not a crash (issue 27 item 1).

Each test mounts a small tmpfs of its own (8 MiB, or 8 MiB and few inodes), works on it,
and unmounts it afterwards however the test ended. Before: a sub-agent's ``dd`` filled a
64 MiB workdir, the parent died writing ``summary.json`` (a traceback, exit 1, empty
stdout under ``--json``, a 0-byte ``summary.json.tmp``), ``runs list`` said "unfinished · 0
sub-agents", the next run crashed at its first write, and a sub-agent whose own record
hit the disk ended ``error: OSError: [Errno 28]`` with "0 tool calls" for 3.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from agentcell.orchestrator import Orchestrator, Settings
from agentcell.protocol import RunStatus
from cli_runner import agentcell, cli_env
from conftest import SpawnRecorder
from http_script import _system, _tool_results
from model_servers import Call, ModelServer, Reply
from small_disk import mount_tmpfs, mounted_tmpfs, unmount

from agentcell.testing import FunctionModel

_FILL = "dd if=/dev/zero of=fill.bin bs=64k count=1000 2>/dev/null; echo filled"
_MANY_FILES = "for i in $(seq 1000); do : > f$i 2>/dev/null; done; echo filled"


@pytest.fixture(params=["space", "inodes"])
def small_disk(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """(a folder on a fresh 8 MiB tmpfs, the command that fills it): of space, or of
    inodes (512 of them)."""
    where = tmp_path / "disk"
    options = "size=8m,mode=0755" + (",nr_inodes=512" if request.param == "inodes" else "")
    with mounted_tmpfs(where, options):
        yield where, _FILL if request.param == "space" else _MANY_FILES


def _free_floor(home: Path) -> None:
    """The start check's floors low enough for an 8 MiB disk that is not full yet."""
    config = home / ".config" / "agentcell" / "config.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text("min_free_mb = 1\nmin_free_inodes = 16\n")


class _FillThenAnswer:
    """The main agent asks one sub-agent to fill the disk; the sub-agent runs its command
    and two more, then answers; the main agent answers after it."""

    def __init__(self, fill: str) -> None:
        self.fill = fill
        self.main_requests = 0

    def __call__(self, body: dict[str, Any], api: str) -> Reply:
        done = len(_tool_results(body))
        if "main agent of agentcell" in _system(body):
            self.main_requests += 1
            if done == 0:
                call = {"subagent_type": "general-purpose", "prompt": "fill the disk"}
                return Reply(tool_calls=[Call("task", call)])
            return Reply(text="the answer after a full disk")
        commands = [self.fill, "seq 5000", "seq 5000"]  # long lines for its record
        if done < len(commands):
            return Reply(tool_calls=[Call("bash", {"command": commands[done]})])
        return Reply(text="filled it")


def test_a_full_disk_is_reported_and_the_answer_still_reaches_the_caller(
    small_disk: tuple[Path, str], tmp_path: Path, model_server: ModelServer
) -> None:
    disk, fill = small_disk
    project = disk / "work"
    project.mkdir()
    home = tmp_path / "home"
    home.mkdir()
    _free_floor(home)
    responder = _FillThenAnswer(fill)
    model_server.responder = responder
    env = cli_env(project, model_server, HOME=str(home))
    args = ("run", "--json", "--quiet", "--model", "openai:gpt-test", "--approve", "allow")
    done = agentcell(*args, "go", cwd=project, env=env)
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr, done.stderr
    out = json.loads(done.stdout)  # the answer reaches a JSON caller
    assert out["final_text"] == "the answer after a full disk"
    assert out["status"] == "error"
    assert out["error"].startswith("the disk is full"), out["error"]
    assert "summary.json" in out["error"] and "\n" not in out["error"]
    kind = "no free space" if fill == _FILL else "no free inodes"
    assert f"({kind}, ENOSPC)" in out["error"], out["error"]
    # The sub-agent's answer reached the parent, with the count of its three tool calls,
    # and its result says its own record is incomplete.
    (sub,) = out["subagents"]
    assert sub["status"] == "completed" and sub["final_text"] == "filled it"
    assert sub["tool_calls"] == 3
    if fill == _FILL:  # (its record file is there already: out of inodes, it grows on)
        assert any("its record is incomplete" in w for w in sub["warnings"]), sub
    # Written whole or not at all: no summary, and no temporary file left behind.
    run_dir = Path(out["run_dir"])
    assert not (run_dir / "summary.json").exists()
    assert not list(run_dir.glob("*.tmp"))
    for record in run_dir.glob("*.jsonl"):  # every line that is there is whole
        for line in record.read_bytes().splitlines():
            json.loads(line)
    # runs list says what is known and that the record is incomplete.
    listed = agentcell("runs", "list", "--json", cwd=project, env=env)
    assert listed.returncode == 0, listed.stderr
    (run,) = json.loads(listed.stdout)
    assert run["missing"] and run["subagents"][0]["agent_id"] == sub["agent_id"]
    shown = agentcell("runs", "list", cwd=project, env=env)
    assert "record incomplete" in shown.stdout and "Traceback" not in shown.stderr
    shown = agentcell("runs", "show", run["run_id"], cwd=project, env=env)
    assert shown.returncode == 0 and "Traceback" not in shown.stderr, shown.stderr
    assert "record incomplete, missing: summary.json" in shown.stdout, shown.stdout
    assert f"{sub['agent_id']}  general-purpose  " in shown.stdout, shown.stdout
    # The next run on the still-full disk says so before it starts work.
    requests = responder.main_requests
    again = agentcell(*args, "again", cwd=project, env=env)
    assert again.returncode == 1 and "Traceback" not in again.stderr, again.stderr
    refused = json.loads(again.stdout)
    assert refused["status"] == "error" and refused["run_dir"] == ""
    assert f"the disk holding {project}" in refused["error"], refused["error"]
    assert "min_free" in refused["error"]
    assert responder.main_requests == requests  # no model request: no work started
    assert len(list((project / ".agentcell" / "runs").iterdir())) == 2  # run + .gitignore
    plain = agentcell("run", *args[3:], "again", cwd=project, env=env)  # no --json, no --quiet
    assert plain.returncode == 1 and plain.stdout == "", plain.stdout
    assert "the disk holding" in plain.stderr and "Traceback" not in plain.stderr, plain.stderr


def test_a_failed_rewrite_of_a_record_keeps_the_previous_one_and_no_temporary_file(
    tmp_path: Path,
) -> None:
    from agentcell.orchestrator.records._store import write_summary

    disk = tmp_path / "disk"
    mount_tmpfs(disk, "size=1m")
    try:
        write_summary(disk, {"status": "completed", "final_text": "first"})
        with (
            open(disk / "fill.bin", "wb", buffering=0) as f,
            pytest.raises(OSError),
        ):  # the rest of it
            while True:
                f.write(b"\0" * 65536)
        with pytest.raises(OSError) as raised:
            write_summary(disk, {"status": "completed", "final_text": "y" * 200_000})
        assert raised.value.errno == 28
        assert json.loads((disk / "summary.json").read_text())["final_text"] == "first"
        assert sorted(p.name for p in disk.iterdir()) == ["fill.bin", "summary.json"]
    finally:
        unmount(disk)


async def test_the_api_returns_the_answer_with_the_full_disk_named(tmp_path: Path) -> None:
    disk = tmp_path / "disk"
    mount_tmpfs(disk, "size=4m")
    try:

        def fill_then_answer(messages: list[Any], tools: list[Any]) -> str:
            with open(disk / "fill.bin", "wb", buffering=0) as f:  # something else fills the disk
                try:
                    while True:
                        f.write(b"\0" * 65536)
                except OSError:
                    pass
            return "the answer"

        orch = Orchestrator(
            model=FunctionModel(fill_then_answer, name="function:main"),
            settings=Settings(approval="allow", min_free_mb=1, min_free_inodes=16),
            load_agent_files=False,
            workdir=disk,
        )
        async with orch:
            report = await orch.run("go")
            again = await orch.run("again")
        assert report.final_text == "the answer"
        assert report.status is RunStatus.ERROR and report.main.status is RunStatus.COMPLETED
        assert report.error.startswith("the disk is full"), report.error
        assert not list(Path(report.run_dir).glob("*.tmp"))
        assert again.status is RunStatus.ERROR and again.run_dir == ""
        assert again.error.startswith(f"the disk holding {disk}")
    finally:
        (disk / "fill.bin").unlink(missing_ok=True)
        unmount(disk)


def test_the_start_check_counts_space_and_inodes(tmp_path: Path) -> None:
    from agentcell.orchestrator.records._disk import DiskFull, check_free

    disk = tmp_path / "disk"
    mount_tmpfs(disk, "size=4m,nr_inodes=64")
    try:
        check_free([disk / "not" / "made"], min_free_mb=1, min_free_inodes=16)
        with pytest.raises(DiskFull, match=r"MiB free, under min_free_mb = 8"):
            check_free([disk], min_free_mb=8, min_free_inodes=0)
        for i in range(60):
            (disk / f"f{i}").touch()
        with pytest.raises(DiskFull, match=r"out of inodes: \d+ free, under min_free_inodes"):
            check_free([disk], min_free_mb=1, min_free_inodes=16)
        check_free([disk], min_free_mb=0, min_free_inodes=0)  # 0 turns each check off
    finally:
        unmount(disk)
    assert os.path.ismount(disk) is False


def test_a_long_tool_output_that_cannot_be_saved_says_so(tmp_path: Path) -> None:
    from agentcell.worker.tools import ToolContext
    from agentcell.worker.tools._base import truncate_output

    disk = tmp_path / "disk"
    mount_tmpfs(disk, "size=1m")
    try:
        (disk / "run").mkdir()
        with open(disk / "fill.bin", "wb", buffering=0) as f, pytest.raises(OSError):
            while True:
                f.write(b"\0" * 65536)
        ctx = ToolContext(workdir=disk, run_dir=disk / "run", call_id="c1", max_output_chars=100)
        shown = truncate_output("z" * 200_000, ctx)
        assert "the full output (200000 chars) is NOT saved: the disk is full" in shown
        assert not list((disk / "run").rglob("*.txt"))  # no cut copy passing for the whole
    finally:
        unmount(disk)


def test_a_background_answer_that_cannot_be_kept_leaves_no_cut_copy(tmp_path: Path) -> None:
    from agentcell.orchestrator.delegation._results import SubAgentResult
    from agentcell.orchestrator.task_tools._delivery import ResultDelivery

    disk = tmp_path / "disk"
    mount_tmpfs(disk, "size=1m")
    try:
        (disk / "results").mkdir()
        with open(disk / "fill.bin", "wb", buffering=0) as f, pytest.raises(OSError):
            while True:
                f.write(b"\0" * 65536)
        answer = SubAgentResult(
            agent_id="a1", agent_type="x", status=RunStatus.COMPLETED, text="w" * 300_000
        )
        delivery = ResultDelivery(limit_chars=10_000, run_dir=disk, workdir=disk)
        for _ in range(2):  # the second delivery must not take a cut copy for the whole
            (capped,) = delivery.capped([answer])
            assert "the whole answer could not be saved (No space left on device)" in capped.text
        assert not (disk / "results" / "a1.txt").exists()
    finally:
        unmount(disk)


def test_a_record_on_a_full_disk_ends_at_its_last_whole_line_and_its_chain_holds(
    tmp_path: Path,
) -> None:
    from agentcell.worker import Transcript
    from agentcell.worker.records._chain import verified_lines

    disk = tmp_path / "disk"
    mount_tmpfs(disk, "size=1m")
    try:
        key = b"k" * 32
        record = Transcript(disk / "a1.jsonl", "a1", key=key)
        for number in range(1000):  # 3 MB of lines: the disk fills inside one of them
            record.write("event", number=number, text="x" * 3000)
        record.close()
        assert record.problem.startswith("a1.jsonl cut after "), record.problem
        assert "(the disk is full: No space left on device)" in record.problem
        data = (disk / "a1.jsonl").read_bytes()
        assert data.endswith(b"\n")  # no part of a line left at the end
        lines = verified_lines(disk / "a1.jsonl", key)
        assert len(lines) == record.lines > 100
        assert [json.loads(line)["number"] for line in lines] == list(range(record.lines))
    finally:
        unmount(disk)


def _fill_the_file_named_in_the_prompt(messages: list[Any], tools: list[Any]) -> str:
    from agentcell.protocol import UserMessage

    target = next(m.content for m in messages if isinstance(m, UserMessage))
    with open(target, "wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * 65536)
        except OSError:
            pass
    return "filled, and answered"


async def test_delegate_on_a_disk_its_sub_agent_filled_still_returns_the_result(
    spawned: SpawnRecorder, tmp_path: Path
) -> None:
    from agentcell.orchestrator import AgentDefinition

    disk = tmp_path / "disk"
    mount_tmpfs(disk, "size=4m")
    try:
        filler = AgentDefinition(
            name="filler", description="-", system_prompt="-", model="function:f", source="t"
        )
        orch = Orchestrator(
            model="scripted:echo",
            agents=[filler],
            models={"function:f": FunctionModel(_fill_the_file_named_in_the_prompt)},
            settings=Settings(approval="allow", min_free_mb=1, min_free_inodes=16),
            load_agent_files=False,
            workdir=disk,
        )
        async with orch:
            result = await orch.delegate("filler", str(disk / "fill.bin"))
        assert result.status is RunStatus.COMPLETED, result.error
        assert result.text == "filled, and answered"
    finally:
        (disk / "fill.bin").unlink(missing_ok=True)
        unmount(disk)


async def test_delegate_and_map_refuse_to_start_on_a_full_disk_as_run_does(
    spawned: SpawnRecorder, tmp_path: Path
) -> None:
    from agentcell.orchestrator import AgentDefinition

    worker = AgentDefinition(
        name="worker", description="-", system_prompt="-", model="scripted:echo", source="t"
    )
    # A floor no disk has: every call's start check refuses.
    orch = Orchestrator(
        model="scripted:echo",
        agents=[worker],
        settings=Settings(approval="allow", min_free_mb=2**30, warm_spares=0),
        load_agent_files=False,
        workdir=tmp_path,
    )
    async with orch:
        one = await orch.delegate("worker", "hi")
        many = await orch.map("worker", ["a", "b", "c"])
    for result in (one, *many):
        assert result.status is RunStatus.ERROR and result.agent_type == "worker"
        assert result.error.startswith(f"the disk holding {tmp_path}"), result.error
        assert "min_free_mb" in result.error and "\n" not in result.error
    assert [r.description for r in many] == ["item 0", "item 1", "item 2"]
    assert not (tmp_path / ".agentcell" / "runs").exists()  # no record begun
    assert spawned.pids == set(), "no sub-agent process may start"
