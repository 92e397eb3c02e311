"""The orchestrator SIGKILLed at points hypothesis draws (a sub-agent starting, its
request sent, its answer in, between a tool call's start and its result, the main agent
between turns, a background result handed over), through the test-only switch
``AGENTCELL_TEST_KILL_AT``; then ``runs resume``. Whatever the point: the answer an
unkilled run gives, no request the journal had answered asked again, no tool call run
twice, each result handed to the main agent once, no process left.

A fan-out of two foreground sub-agents and one in the background, through the installed
command against a scripted model server (the relayed route the journal records).
"""

from __future__ import annotations

import json
import re
import signal
import struct
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import Any

import pytest
from agentcell.orchestrator.journal._file import MAGIC, read_journal
from agentcell.orchestrator.journal._place import journal_dir, run_state
from cli_runner import AGENTCELL, cli_env
from http_script import _first_user, _system, _tool_results, count_once, fan_out
from hypothesis import given, settings
from hypothesis import strategies as st
from model_servers import Call, ModelServer, Reply
from process_group import run_in_group
from small_disk import mounted_tmpfs

FOREGROUND = ["fg one", "fg two"]
BACKGROUND = "bg three"
PROMPTS = [*FOREGROUND, BACKGROUND]
FINAL = "All reported."

#: Where it may die: a kind of journal record (``fact:WHAT`` for a parent's fact) and
#: the how-manyth of them (one the run never writes: it is not killed, and must still
#: answer as usual).
KILL_POINTS = st.one_of(
    st.tuples(st.just("fact:started"), st.integers(1, 3)),
    st.tuples(st.just("ask"), st.integers(1, 6)),
    st.tuples(st.just("answer"), st.integers(1, 6)),
    st.tuples(st.just("fact:tool"), st.integers(1, 12)),
    st.tuples(st.just("main_answer"), st.integers(1, 3)),
    st.tuples(st.just("fact:ended"), st.integers(1, 3)),
    st.tuples(st.just("fact:delivered"), st.just(1)),
)


def _everything(body: dict[str, Any]) -> str:
    return json.dumps(body.get("messages", []))


class _Script:
    """Main: fan out (the third in the background); then, the background result not in
    yet, wait for it with task_wait; then the final answer. Each sub-agent appends its
    name to counter.txt with bash (the side effect that must happen once), then answers;
    the background one's answer waits until the main agent's second request is in, so
    the killed run's background result always comes through task_wait — and a resume
    that handed it out earlier (at a turn boundary) would change a journaled request."""

    def __init__(self) -> None:
        self.release = threading.Event()

    def __call__(self, body: dict[str, Any], api: str) -> Reply:
        results = _tool_results(body)
        if "main agent of agentcell" in _system(body):
            if not results:
                return fan_out(PROMPTS, background=(BACKGROUND,))
            if f"result of {BACKGROUND}" in _everything(body):
                return Reply(text=FINAL)
            self.release.set()
            task = re.search(r"task (a\d+) started in the background", _everything(body))
            assert task is not None, body
            return Reply(tool_calls=[Call("task_wait", {"task_ids": [task.group(1)]})])
        prompt = _first_user(body)
        if not results:
            return count_once(prompt)
        if prompt == BACKGROUND:
            return Reply(text=f"result of {prompt}", pause_after=1, release=self.release)
        return Reply(text=f"result of {prompt}")


def _cli(project: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    command = [AGENTCELL, *args, "--model", "openai:m", "--approve", "allow", "--json"]
    return run_in_group(command, cwd=project, env=env)


def _key(body: dict[str, Any]) -> tuple[str, int]:
    """Which request of which agent: the main agent's n-th, or a sub-agent's (by prompt)."""
    if "main agent of agentcell" in _system(body):
        return "main", sum(m.get("role") == "assistant" for m in body["messages"])
    return _first_user(body), len(_tool_results(body))


def _answered(run_dir: Path) -> set[tuple[str, int]]:
    """The requests whose answers the killed run's journal holds whole."""
    records = read_journal(journal_dir(run_dir) / "journal").records
    prompts = {r["agent"]: r["prompt"] for r in records if r.get("what") == "started"}
    keys: set[tuple[str, int]] = set()
    count: dict[str, int] = {}
    for record in records:
        if record["k"] == "main_answer":
            agent = "main"
        elif record["k"] == "answer" and record["status"] == 200 and not record["error"]:
            agent = prompts[record["agent"]]
        else:
            continue
        keys.add((agent, count.get(agent, 0)))
        count[agent] = count.get(agent, 0) + 1
    return keys


def _runs(project: Path) -> set[Path]:
    runs = project / ".agentcell" / "runs"
    return {p for p in runs.iterdir() if p.is_dir()} if runs.is_dir() else set()


@settings(max_examples=6, deadline=None)
@given(points=st.lists(KILL_POINTS, min_size=1, max_size=2))
def test_killed_anywhere_it_resumes_to_the_same_answer_doing_nothing_twice(
    points: list[tuple[str, int]],
) -> None:
    """Killed at the first point; its resume killed at the second, if any (a resume of a
    resume); then resumed to its end."""
    with tempfile.TemporaryDirectory() as tmp, ModelServer(_Script()) as server:
        (Path(tmp) / "home").mkdir()
        project = Path(tmp) / "work"
        project.mkdir()
        env = cli_env(project, server)
        command = ["run", "fan out"]
        answered: set[tuple[str, int]] = set()  # by every killed run's journal
        for point in [*points, None]:
            known, before = _runs(project), len(server.requests)
            kill = {"AGENTCELL_TEST_KILL_AT": f"{point[0]}:{point[1]}"} if point else {}
            done = _cli(project, {**env, **kill}, *command)
            asked = {_key(r.body) for r in server.requests[before:]}
            assert not answered & asked, (points, answered & asked)
            (run_dir,) = _runs(project) - known
            if done.returncode != -signal.SIGKILL:  # it ran to its end
                break
            assert run_state(run_dir) == ("interrupted", None), (
                points,
                run_state(run_dir),
                done.returncode,
            )
            answered |= _answered(run_dir)
            command = ["runs", "resume", run_dir.name]
        report = json.loads(done.stdout)
        why = [
            report["status"],
            report["error"],
            [(s["status"], s["error"]) for s in report["subagents"]],
        ]
        assert done.returncode == 0, (points, why, done.stderr[-3000:])
        assert report["final_text"] == FINAL, points
        last = server.requests[-1].body
        for prompt in PROMPTS:  # each result reached the main agent exactly once
            assert _everything(last).count(f"result of {prompt}") == 1, (points, prompt)
        counter = project / "counter.txt"
        lines = counter.read_text().split() if counter.exists() else []
        assert len(lines) == len(set(lines)), (points, lines)  # no call ran twice
        statuses = {sub["status"] for sub in report["subagents"]}
        assert statuses == {"completed"}, (points, report["subagents"])
        assert server.errors == []


def _killed_run(project: Path, env: dict[str, str], point: str) -> Path:
    killed = _cli(project, {**env, "AGENTCELL_TEST_KILL_AT": point}, "run", "fan out")
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    (run_dir,) = [p for p in (project / ".agentcell" / "runs").iterdir() if p.is_dir()]
    return run_dir


def _finished(project: Path, env: dict[str, str], run_dir: Path) -> str:
    """``runs resume`` of the killed run: it answers as an unkilled run; its stderr."""
    resumed = _cli(project, env, "runs", "resume", run_dir.name)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert json.loads(resumed.stdout)["final_text"] == FINAL
    return resumed.stderr


@pytest.mark.parametrize("cut", ["first byte", "middle", "last byte"])
def test_a_journal_cut_in_its_last_record_resumes_from_the_one_before(
    tmp_path: Path, model_server: ModelServer, cut: str
) -> None:
    """A power loss, or a disk that filled, mid-record: the resume says where the journal
    stops and does again what came after; the answer is the same."""
    (tmp_path / "home").mkdir()
    project = tmp_path / "work"
    project.mkdir()
    model_server.responder = _Script()
    env = cli_env(project, model_server)
    run_dir = _killed_run(project, env, "fact:ended:1")
    path = journal_dir(run_dir) / "journal"
    data = path.read_bytes()
    start = len(MAGIC)  # walked record by record (a length, a CRC, the bytes) to the last
    while start + 8 + struct.unpack_from(">I", data, start)[0] < len(data):
        start += 8 + struct.unpack_from(">I", data, start)[0]
    at = {"first byte": start + 1, "middle": (start + len(data)) // 2, "last byte": len(data) - 1}
    path.write_bytes(data[: at[cut]])
    said = _finished(project, env, run_dir)
    assert f"stops at byte {start} of {at[cut]}" in said, said[-2000:]
    assert "Traceback" not in said


def test_a_full_disk_leaves_a_journal_the_run_resumes_from(
    tmp_path: Path, model_server: ModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The journal's disk fills mid-run (a real 16 KiB tmpfs): the run says so in one line
    and goes on; killed later, it resumes from the last whole record."""
    (tmp_path / "home").mkdir()
    project = tmp_path / "work"
    project.mkdir()
    model_server.responder = _Script()
    with mounted_tmpfs(tmp_path / "state", "size=16k") as state:
        env = cli_env(project, model_server, XDG_STATE_HOME=str(state))
        monkeypatch.setenv("XDG_STATE_HOME", str(state))  # where journal_dir looks
        killed = _cli(project, {**env, "AGENTCELL_TEST_KILL_AT": "fact:ended:2"}, "run", "fan out")
        assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
        assert "the run's journal could not be written (the disk is full)" in killed.stderr
        (run_dir,) = [p for p in (project / ".agentcell" / "runs").iterdir() if p.is_dir()]
        assert read_journal(journal_dir(run_dir) / "journal").damage == ""
        _finished(project, env, run_dir)
