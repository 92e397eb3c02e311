"""The orchestrator SIGKILLed mid fan-out, as a user's run is (the OOM killer, a dropped
SSH session): what its journal kept, what ``runs list`` and ``runs resume`` say, and
that no sub-agent can read the journal.

Run through the installed command against a scripted model server on 127.0.0.1, so
that the sub-agents' model requests take the relayed route the journal records.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import nobody_runtime
import psutil
import pytest
from agentcell.orchestrator.journal._file import read_journal
from agentcell.orchestrator.journal._place import journal_dir, run_state
from agentcell.worker import probe_sandbox
from cli_runner import AGENTCELL, cli_env
from compaction_models import SUMMARY, TASK, FillingModel
from git_util import git, git_repo
from http_script import _first_user, _system, _tool_results, count_once, fan_out
from model_servers import Call, ModelServer, Reply
from places import SUPPORT
from process_group import run_in_group

FINISHERS = ["count a", "count b", "count c"]
WAITERS = ["wait d", "wait e", "wait f"]


def _fan_out(key: str, body: dict[str, Any], api: str) -> Reply:
    """The main agent starts six sub-agents; three answer (a hostile server's answer
    carrying the provider key: the relay masks it in the stream, the journal in what the
    child made of it), three wait on the model for ever."""
    if "main agent of agentcell" in _system(body):
        if _tool_results(body):
            return Reply(text="never reached: the orchestrator is killed first")
        return fan_out([*FINISHERS, *WAITERS])
    prompt = _first_user(body)
    if prompt in WAITERS:
        return Reply(hang=True)
    if prompt == FINISHERS[-1]:  # split over deltas, which the relay's mask cannot see
        return Reply(text=f"result of {prompt} {key}", chunk_size=4)
    return Reply(text=f"result of {prompt} {key}", chunk_size=1000)  # in one delta


def _start(work: Path, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [AGENTCELL, "run", "--model", "openai:m", "--approve", "allow", "--json", "fan out"],
        cwd=work,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its children are killed with it, by its group
    )


def _wait_for(condition: Any, what: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _records(run_dir: Path) -> list[dict[str, Any]]:
    path = journal_dir(run_dir) / "journal"
    return read_journal(path).records if path.is_file() else []


def _answered(run_dir: Path) -> int:
    return sum(1 for r in _records(run_dir) if r["k"] == "fact" and r["what"] == "ended")


def _streamed_text(body: bytes) -> str:
    """The text of an OpenAI chat-completions stream, as the child's parser joins it."""
    text = ""
    for line in body.decode().splitlines():
        if line.startswith("data: {"):
            for choice in json.loads(line[6:]).get("choices", []):
                text += choice.get("delta", {}).get("content") or ""
    return text


def _run_dir(work: Path) -> Path | None:
    runs = work / ".agentcell" / "runs"
    found = [p for p in runs.iterdir() if p.is_dir()] if runs.is_dir() else []
    return found[0] if found else None


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "home").mkdir()
    work = tmp_path / "work"
    work.mkdir()
    return work


def test_a_killed_fan_out_keeps_what_finished_and_reads_interrupted(
    project: Path, model_server: ModelServer
) -> None:
    env = cli_env(project, model_server)
    model_server.responder = functools.partial(_fan_out, env["OPENAI_API_KEY"])
    proc = _start(project, env)
    try:
        _wait_for(lambda: _run_dir(project) is not None, "the run's folder")
        run_dir = _run_dir(project)
        assert run_dir is not None
        _wait_for(lambda: _answered(run_dir) == 3, "three sub-agents' results")
        # The run is held by its orchestrator: a resume now is refused, and says why.
        state, pid = run_state(run_dir)
        assert (state, pid) == ("running", proc.pid)
        refused = subprocess.run(
            [AGENTCELL, "runs", "resume", run_dir.name, "go on"],
            cwd=project,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert refused.returncode == 2, refused.stderr
        assert f"run {run_dir.name} is still running (pid {proc.pid})" in refused.stderr
        assert "Traceback" not in refused.stderr
        children = psutil.Process(proc.pid).children(recursive=True)
        assert len(children) >= 3  # the fork server and the waiting sub-agents at least
        os.kill(proc.pid, signal.SIGKILL)  # the orchestrator alone, as the OOM killer does
        proc.communicate()
        _, alive = psutil.wait_procs(children, timeout=10)
        assert alive == [], f"outlived the orchestrator: {alive}"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # whatever the test left, even failing
        proc.communicate()
    assert run_state(run_dir) == ("interrupted", None)
    records = _records(run_dir)
    started = {r["prompt"]: r["agent"] for r in records if r.get("what") == "started"}
    # What a sub-agent could have written before the kill: its own record, claiming a
    # result. runs list reads the journal, which no sub-agent can write.
    forged = {"kind": "result", "result": {"status": "completed", "text": "FORGED"}}
    with (run_dir / f"{started[WAITERS[0]]}.jsonl").open("a") as record:
        record.write(json.dumps(forged) + "\n")
    listed = subprocess.run(
        [AGENTCELL, "runs", "list", "--json"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert listed.returncode == 0, listed.stderr
    (run,) = json.loads(listed.stdout)
    assert run["status"] == "interrupted"
    statuses = {sub["agent_id"]: sub["status"] for sub in run["subagents"]}
    assert statuses == {
        **{started[p]: "completed" for p in FINISHERS},
        **{started[p]: "interrupted" for p in WAITERS},
    }
    assert "FORGED" not in listed.stdout

    assert records[0]["k"] == "run" and records[0]["pid"] == proc.pid
    assert not [r for r in records if r["k"] == "end"]
    assert set(started) == {*FINISHERS, *WAITERS}
    ended = {r["agent"]: r["result"] for r in records if r.get("what") == "ended"}
    assert {started[p] for p in FINISHERS} == set(ended)
    for prompt in FINISHERS:
        result = ended[started[prompt]]
        assert result["status"] == "completed"
        assert result["final_text"].startswith(f"result of {prompt} ")
    # Every sub-agent's request is journaled, and each finished one's answer whole; the
    # waiting ones' answers never came.
    asked = {r["agent"] for r in records if r["k"] == "ask"}
    assert set(started.values()) <= asked
    answers = {r["agent"]: r for r in records if r["k"] == "answer"}
    for prompt in FINISHERS:
        answer = answers[started[prompt]]
        assert answer["status"] == 200 and answer["error"] == ""
        assert _streamed_text(answer["body"]).startswith(f"result of {prompt} ")
    assert not {started[p] for p in WAITERS} & set(answers)
    # The parent's own facts: what each was granted, what each finished one was charged.
    grants = {r["agent"]: r["grants"] for r in records if r.get("what") == "definition"}
    assert set(grants) == set(started.values())
    assert all("bash" in g["tools"] and g["sandbox"] == "workspace" for g in grants.values())
    charged = {r["agent"] for r in records if r.get("what") == "charged"}
    assert {started[p] for p in FINISHERS} | {"main"} <= charged
    # Nothing of the provider's key, nor of the request headers.
    raw = (journal_dir(run_dir) / "journal").read_bytes()
    assert env["OPENAI_API_KEY"].encode() not in raw
    assert b"authorization" not in raw.lower()


def _peek(user: str, tmp_path: Path) -> subprocess.Popen[str]:
    """tests/support/journal_peek_driver.py as ``user``, in a process group of its own."""
    if user == "root":
        if os.geteuid() != 0:
            pytest.skip("needs root")
        (tmp_path / "work").mkdir()
        env = {
            **os.environ,
            "PYTHONPATH": str(SUPPORT),
            "HOME": str(tmp_path),
            "XDG_STATE_HOME": str(tmp_path / "state"),
        }
        command = [sys.executable, str(SUPPORT / "journal_peek_driver.py"), str(tmp_path / "work")]
    else:
        if (why := nobody_runtime.unavailable()) is not None:
            pytest.skip(why)
        runtime = nobody_runtime.runtime()
        home = runtime.home()  # nobody's: its state folder, and the workdir beneath it
        (home / "work").mkdir()
        os.chown(home / "work", nobody_runtime.NOBODY, nobody_runtime.NOBODY)
        env = {**runtime.env, "HOME": str(home)}
        script = str(runtime.folder / "tests" / "journal_peek_driver.py")
        command = runtime.command(script, str(home / "work"))
    return subprocess.Popen(
        command, env=env, cwd="/", stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip


@pytest.mark.parametrize("user", ["root", "nobody"])
def test_no_sub_agent_can_read_the_journal(tmp_path: Path, user: str) -> None:
    """A real sub-agent behind the default sandbox, of an orchestrator run as root and as
    a normal user, tries the journal of its own run with bash and with its file tools:
    the journal folder is outside what its walls grant, and no descriptor to it is open
    in the sub-agent."""
    if not probe_sandbox()["landlock_scopes"]:
        pytest.skip("needs Landlock ABI 6 (this project's CI has 7)")
    driver = _peek(user, tmp_path)
    try:
        out, err = driver.communicate(timeout=180)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(driver.pid, signal.SIGKILL)
        driver.wait()
    assert driver.returncode == 0, err[-4000:]
    seen = json.loads(out)
    assert seen["status"] == "completed", seen
    assert seen["written"], seen  # there was a journal to read, at the path tried
    descriptors, cat, read, listing = seen["outputs"]
    assert descriptors.strip() == "0", descriptors
    assert "Permission denied" in cat or "No such file" in cat, cat
    assert "agentcell-journal" not in cat + read + listing
    assert "journal" not in listing.replace(seen["target"].rsplit("/", 2)[0], ""), listing


class _Resumable:
    """A fan-out of six whose every sub-agent first appends its name to a counter file
    with bash (a side effect that must happen once), then answers; while ``hang`` is
    set the three waiters hang on their second request, the one after their tool call."""

    def __init__(self) -> None:
        self.hang = True

    def __call__(self, body: dict[str, Any], api: str) -> Reply:
        results = _tool_results(body)
        if "main agent of agentcell" in _system(body):
            if not results:
                return fan_out([*FINISHERS, *WAITERS])
            return Reply(text="All six reported.")
        prompt = _first_user(body)
        if not results:
            return count_once(prompt)
        if prompt in WAITERS and self.hang:
            return Reply(hang=True)
        return Reply(text=f"result of {prompt}")


def _killed_when(project: Path, env: dict[str, str], condition: Any) -> Path:
    """The fan-out started, SIGKILLed once ``condition`` holds; its run folder."""
    proc = _start(project, env)
    try:
        _wait_for(condition, "the point to kill it at")
        os.kill(proc.pid, signal.SIGKILL)
        proc.communicate()
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
    run_dir = _run_dir(project)
    assert run_dir is not None
    return run_dir


def _resume(project: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """``runs resume ARGS`` (approvals allowed, JSON out), in a group of its own."""
    command = [AGENTCELL, "runs", "resume", *args, "--approve", "allow", "--json"]
    return run_in_group(command, cwd=project, env=env)


def _finished_tools(run_dir: Path, agents: set[str]) -> int:
    return sum(
        1
        for r in _records(run_dir)
        if r.get("what") == "tool" and r.get("finished") and r["agent"] in agents
    )


def test_a_killed_fan_out_resumes_and_asks_nothing_twice(
    project: Path, model_server: ModelServer
) -> None:
    """Killed with three results in and three sub-agents past their tool call, the run is
    finished by ``runs resume``: the answer an unkilled run gives, no journaled model
    request made again, no tool call run twice, each result delivered once."""
    env = cli_env(project, model_server)
    script = model_server.responder = _Resumable()

    def past_their_tool_calls() -> bool:
        # Three results in; the waiters' tool calls journaled and their next requests in.
        run_dir = _run_dir(project)
        if run_dir is None or _answered(run_dir) < 3:
            return False
        waiters = {r["agent"] for r in _records(run_dir) if r.get("prompt") in WAITERS}
        return _finished_tools(run_dir, waiters) == 3 and len(model_server.requests) == 13

    run_dir = _killed_when(project, env, past_their_tool_calls)
    started = {r["prompt"]: r["agent"] for r in _records(run_dir) if r.get("what") == "started"}
    assert run_state(run_dir) == ("interrupted", None)
    # What the sub-agents could have written before the kill: their own transcripts and
    # any file of the run folder. The resume reads none of it.
    for record in run_dir.glob("a*.jsonl"):
        with record.open("a") as forged:
            forged.write(json.dumps({"kind": "result", "result": {"text": "FORGED"}}) + "\n")
            forged.write(json.dumps({"kind": "messages", "messages": [{"content": "FORGED"}]}))
    (run_dir / "summary.json").write_text(json.dumps({"final_text": "FORGED"}))
    before = len(model_server.requests)
    script.hang = False
    resumed = _resume(project, env, run_dir.name)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    report = json.loads(resumed.stdout)
    assert report["final_text"] == "All six reported."
    assert report["resumed_from"] == run_dir.name
    asked = [r.body for r in model_server.requests[before:]]
    # Asked again: the waiters' hanging request (its answer never came) and the main
    # agent's turn after the results; nothing the journal had.
    mains = [b for b in asked if "main agent of agentcell" in _system(b)]
    assert len(mains) == 1 and len(_tool_results(mains[0])) == 6
    subs = sorted(_first_user(b) for b in asked if b not in mains)
    assert subs == WAITERS
    for prompt in [*FINISHERS, *WAITERS]:  # each result reached the main agent once
        assert sum(f"result of {prompt}" in t for t in _tool_results(mains[0])) == 1
    assert "FORGED" not in json.dumps([r.body for r in model_server.requests[before:]])
    lines = (project / "counter.txt").read_text().split()
    assert sorted(lines) == sorted(p.replace(" ", "-") for p in [*FINISHERS, *WAITERS])
    statuses = {sub["agent_id"]: sub["status"] for sub in report["subagents"]}
    assert statuses == dict.fromkeys(started.values(), "completed")
    # A finished one was not run again, not even from the journal: no process of its own.
    ended = {r["agent"]: r["result"]["pid"] for r in _records(run_dir) if r.get("what") == "ended"}
    pids = {sub["agent_id"]: sub["pid"] for sub in report["subagents"]}
    assert {started[p]: pids[started[p]] for p in FINISHERS} == ended
    resumer = Path(report["run_dir"]).name
    assert (journal_dir(run_dir) / "resumed-by").read_text().strip() == resumer

    def show_of(run_id: str) -> str:
        return subprocess.run(
            [AGENTCELL, "runs", "show", run_id], cwd=project, env=env,
            capture_output=True, text=True, timeout=60,
        ).stdout  # fmt: skip

    # Both runs say what became of each sub-agent, and which resumed which.
    for shown, says in [(run_dir.name, f"resumed since as: {resumer}"),
                        (resumer, f"resumes run {run_dir.name}")]:  # fmt: skip
        show = subprocess.run(
            [AGENTCELL, "runs", "show", shown], cwd=project, env=env,
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert show.returncode == 0, show.stderr
        assert says in show.stdout, show.stdout
        assert "FORGED" not in show.stdout, show.stdout  # a sub-agent's word is not read
    assert f"run {run_dir.name}: interrupted" in show_of(run_dir.name)
    page = project / "killed.html"
    view = [AGENTCELL, "runs", "view", run_dir.name, "-o", str(page)]
    assert subprocess.run(view, cwd=project, env=env, capture_output=True).returncode == 0
    assert "FORGED" not in page.read_text()  # its lanes' states are the journal's
    # Its budget counts what the killed run spent: the three finished sub-agents' tokens
    # (as they reported them) and the three requests cut off (their estimated input).
    ended_usage = [r["result"]["usage"] for r in _records(run_dir) if r.get("what") == "ended"]
    carried = report["carried_usage"]
    assert carried["input_tokens"] > sum(u["input_tokens"] for u in ended_usage) > 0
    assert carried["output_tokens"] == sum(u["output_tokens"] for u in ended_usage)
    assert report["usage"]["input_tokens"] > carried["input_tokens"]
    assert "of which spent by the run it resumed" in show_of(resumer)


class _Nested:
    """Main → "outer" → "inner" (a task of the sub-agent's own); inner appends to the
    counter with bash, then, while ``hang`` is set, hangs on its next request."""

    def __init__(self) -> None:
        self.hang = True

    def __call__(self, body: dict[str, Any], api: str) -> Reply:
        results = _tool_results(body)
        who = "main" if "main agent of agentcell" in _system(body) else _first_user(body)
        if who in ("main", "outer") and not results:
            inner = "outer" if who == "main" else "inner"
            task = {"subagent_type": "general-purpose", "prompt": inner, "description": inner}
            return Reply(tool_calls=[Call("task", task)])
        if who == "inner" and not results:
            return Reply(tool_calls=[Call("bash", {"command": "echo inner >> counter.txt"})])
        if who == "inner" and self.hang:
            return Reply(hang=True)
        return Reply(text=f"{who} done after: {' | '.join(results)[:300]}")


def test_a_killed_nested_run_resumes_at_every_depth(
    project: Path, model_server: ModelServer
) -> None:
    """Killed while a sub-agent's own sub-agent waits on the model: the resume goes on
    with both, at their depths, from their journaled turns."""
    env = cli_env(project, model_server, AGENTCELL_MAX_DEPTH="2")
    script = model_server.responder = _Nested()
    run_dir = _killed_when(project, env, lambda: len(model_server.requests) == 4)
    started = {r["prompt"]: r for r in _records(run_dir) if r.get("what") == "started"}
    assert started["inner"]["depth"] == 1 and started["inner"]["by"] == started["outer"]["agent"]
    script.hang = False
    before = len(model_server.requests)
    resumed = _resume(project, env, run_dir.name)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    report = json.loads(resumed.stdout)
    assert report["final_text"].startswith("main done after: [completed] general-purpose")
    assert "inner done after" in report["final_text"]
    # Asked again: inner's hanging request, then outer's and main's next turns.
    asked = [_first_user(r.body) if "main agent" not in _system(r.body) else "main"
             for r in model_server.requests[before:]]  # fmt: skip
    assert asked == ["inner", "outer", "main"]
    assert (project / "counter.txt").read_text() == "inner\n"
    ids = {sub["agent_id"]: sub["depth"] for sub in report["subagents"]}
    assert ids == {started["outer"]["agent"]: 1, started["inner"]["agent"]: 2}


class _OneWaiter:
    """Main → one "waiter" sub-agent (a project agent file) that runs bash, then, while
    ``hang`` is set, hangs; each of its requests' system prompt is kept."""

    def __init__(self) -> None:
        self.hang = True
        self.systems: list[str] = []

    def __call__(self, body: dict[str, Any], api: str) -> Reply:
        results = _tool_results(body)
        if "main agent of agentcell" in _system(body):
            if results:
                return Reply(text="main done")
            task = {"subagent_type": "waiter", "prompt": "wait", "description": "wait"}
            return Reply(tool_calls=[Call("task", task)])
        self.systems.append(_system(body))
        if not results:
            return Reply(tool_calls=[Call("bash", {"command": "echo w >> counter.txt"})])
        return Reply(hang=True) if self.hang else Reply(text="waited")


def _objects(text: str) -> list[Any]:
    """The JSON objects printed one after another (each run's ``--json``)."""
    decoder, found, at = json.JSONDecoder(), [], 0
    while text[at:].strip():
        at += len(text[at:]) - len(text[at:].lstrip())
        value, at = decoder.raw_decode(text, at)
        found.append(value)
    return found


def test_an_agent_file_changed_since_the_kill_resumes_as_it_was(
    project: Path, model_server: ModelServer
) -> None:
    agents = project / ".agentcell" / "agents"
    agents.mkdir(parents=True)
    (agents / "waiter.md").write_text("---\nname: waiter\ndescription: w\n---\nWAITER V1\n")
    env = cli_env(project, model_server)
    script = model_server.responder = _OneWaiter()
    run_dir = _killed_when(project, env, lambda: len(model_server.requests) == 3)
    (agents / "waiter.md").write_text("---\nname: waiter\ndescription: w\n---\nWAITER V2\n")
    script.hang = False
    # With a prompt: the killed run finished first, then one more run on its session.
    resumed = _resume(project, env, run_dir.name, "and then?")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    finished, more = _objects(resumed.stdout)
    assert finished["final_text"] == "main done" and finished["resumed_from"] == run_dir.name
    assert more["resumed_from"] == Path(finished["run_dir"]).name
    assert more["prompt"] == "and then?"
    assert f"{agents / 'waiter.md'} changed since the killed run" in resumed.stderr
    # Its one request asked again (the one that hung) is the same agent: V1, as it started.
    assert len(script.systems) == 3 and "WAITER V1" in script.systems[-1]
    assert (project / "counter.txt").read_text() == "w\n"


def _coded_driver(
    project: Path, env: dict[str, str], *args: str
) -> subprocess.CompletedProcess[str]:
    driver = str(SUPPORT / "coded_model_resume_driver.py")
    command = [sys.executable, driver, args[0], str(project), *args[1:]]
    return run_in_group(command, cwd=project, env={**env, "PYTHONPATH": str(SUPPORT)})


def test_a_sub_agent_whose_model_the_parent_never_saw_restarts_from_its_prompt(
    project: Path, model_server: ModelServer
) -> None:
    """A model object given in code: its calls are not journaled, so its resume starts it
    from its prompt, and its result says so."""

    def main(body: dict[str, Any], api: str) -> Reply:
        if _tool_results(body):
            return Reply(text="main done")
        task = {"subagent_type": "coded", "prompt": "work", "description": "work"}
        return Reply(tool_calls=[Call("task", task)])

    model_server.responder = main
    env = cli_env(project, model_server)
    (project / "hang").touch()
    killed = _coded_driver(project, {**env, "AGENTCELL_TEST_KILL_AT": "fact:tool:3"}, "run")
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    run_dir = _run_dir(project)
    assert run_dir is not None
    (project / "hang").unlink()
    # Resumed without the model object the run was given: refused, naming it.
    refused = _coded_driver(project, env, "bare", run_dir.name)
    assert "was given 'function:coded' in code" in refused.stdout, refused.stderr[-2000:]
    resumed = _coded_driver(project, env, "resume", run_dir.name)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    report = json.loads(resumed.stdout)
    assert report["final_text"] == "main done"
    (coded,) = report["subagents"]
    assert coded["status"] == "completed"
    assert any(w.startswith("resumed from its prompt") for w in coded["warnings"])


def _chat_script(body: dict[str, Any], api: str) -> Reply:
    """The main agent answers each chat line; "fan out" starts one sub-agent first."""
    if "main agent of agentcell" not in _system(body):
        return Reply(text="sub-agent result")
    users = [m["content"] for m in body["messages"] if m["role"] == "user"]
    last = body["messages"][-1]
    if users[-1] == "fan out" and last["role"] == "user":
        task = {"subagent_type": "general-purpose", "prompt": "go", "description": "go"}
        return Reply(tool_calls=[Call("task", task)])
    return Reply(text=f"answer to {users[-1]!r} after {len(users)} lines")


def test_an_interrupted_chat_finishes_its_turn_then_goes_on(
    project: Path, model_server: ModelServer
) -> None:
    model_server.responder = _chat_script
    env = cli_env(project, model_server, AGENTCELL_TEST_KILL_AT="fact:ended:1")
    chat = [AGENTCELL, "chat", "--model", "openai:m"]
    killed = run_in_group(chat, cwd=project, env=env, input="hello\nfan out\n")
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    assert "answer to 'hello' after 1 lines" in killed.stdout
    run_dir = _run_dir(project)
    assert run_dir is not None
    before = len(model_server.requests)
    env.pop("AGENTCELL_TEST_KILL_AT")
    resume = [AGENTCELL, "runs", "resume", run_dir.name]
    resumed = run_in_group(resume, cwd=project, env=env, input="and more\n")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    # The interrupted turn is finished on the session its first turn left, then the chat
    # goes on with a line of its own.
    assert "answer to 'fan out' after 2 lines" in resumed.stdout, resumed.stdout
    assert "answer to 'and more' after 3 lines" in resumed.stdout, resumed.stdout
    asked = [r.body for r in model_server.requests[before:]]
    assert [len(_tool_results(b)) for b in asked] == [1, 1]  # nothing answered asked again


def _killed_worktree_run(project: Path, model_server: ModelServer) -> tuple[Path, Path, Any]:
    """A run whose one sub-agent, in a worktree of its own, ran bash there (appending to
    ``counter.txt``), then hung, killed: its run folder, its worktree, its script."""
    project.rmdir()
    git_repo(project)
    agents = project / ".agentcell" / "agents"
    agents.mkdir(parents=True)
    (agents / "waiter.md").write_text(
        "---\nname: waiter\ndescription: w\nisolation: worktree\n---\nW\n"
    )
    script = model_server.responder = _OneWaiter()
    env = cli_env(project, model_server)
    run_dir = _killed_when(project, env, lambda: len(model_server.requests) == 3)
    (killed_tree,) = [p.parent for p in run_dir.rglob("counter.txt")]
    script.hang = False
    return run_dir, killed_tree, script


def test_a_worktree_agent_in_flight_goes_on_in_its_own_worktree(
    project: Path, model_server: ModelServer
) -> None:
    """Its tool's work is in the killed run's worktree: the resume goes on there (bash not
    run again, its one hung request asked again) and commits all of it on its branch."""
    run_dir, killed_tree, script = _killed_worktree_run(project, model_server)
    resumed = _resume(project, cli_env(project, model_server), run_dir.name)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    (waiter,) = json.loads(resumed.stdout)["subagents"]
    assert waiter["status"] == "completed" and waiter["warnings"] == []
    assert waiter["worktree"] == str(killed_tree)
    assert len(script.systems) == 3  # its first request served from the journal
    assert (killed_tree / "counter.txt").read_text() == "w\n"  # bash ran once
    committed = git(project, "show", f"{waiter['branch']}:counter.txt")
    assert waiter["commit"] == git(project, "rev-parse", waiter["branch"]) and committed == "w"


def test_a_folder_planted_where_the_worktree_was_is_not_gone_on_in(
    project: Path, model_server: ModelServer
) -> None:
    """A folder put at the killed worktree's path since (the run folder is writable by
    sub-agents) is not the one the journal recorded: the agent starts again from its
    prompt in a fresh worktree, says why, and nothing runs or lands in the planted one."""
    run_dir, killed_tree, script = _killed_worktree_run(project, model_server)
    shutil.move(killed_tree, run_dir / "aside")
    killed_tree.mkdir()
    (killed_tree / "counter.txt").write_text("planted\n")
    resumed = _resume(project, cli_env(project, model_server), run_dir.name)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    (waiter,) = json.loads(resumed.stdout)["subagents"]
    assert waiter["status"] == "completed" and waiter["worktree"] != str(killed_tree)
    (warning,) = waiter["warnings"]
    assert f"{killed_tree} was replaced or removed since the killed run" in warning
    assert warning.startswith("resumed from its prompt in a fresh worktree")
    assert len(script.systems) == 4  # its two requests asked again, from its prompt
    assert (killed_tree / "counter.txt").read_text() == "planted\n"
    assert git(project, "show", f"{waiter['branch']}:counter.txt") == "w"


class _Compacting:
    """Main → one "long" sub-agent whose context fills (``FillingModel``) until its older
    turns are summarised; while ``hang`` is set, its first request after the summary
    hangs (``hung`` then)."""

    def __init__(self) -> None:
        self.filling = FillingModel()
        self.hang, self.hung = True, False
        self.asked_after: list[list[dict[str, Any]]] = []  # once it no longer hangs

    def __call__(self, body: dict[str, Any], api: str) -> Reply:
        if "main agent of agentcell" in _system(body):
            if _tool_results(body):
                return Reply(text="main done")
            task = {"subagent_type": "long", "prompt": TASK, "description": "long"}
            return Reply(tool_calls=[Call("task", task)])
        summarising = "compacting the history" in str(body["messages"][0].get("content", ""))
        if self.filling.summary_requests and not summarising:
            if self.hang:
                self.hung = True
                return Reply(hang=True)
            self.asked_after.append(body["messages"])
        return self.filling(body, api)


def test_a_compacted_sub_agent_resumes_compacted(project: Path, model_server: ModelServer) -> None:
    """Killed after its history was summarised: the resume serves the summary from the
    journal (not asked again) and goes on with the compacted history, as the run did."""
    agents = project / ".agentcell" / "agents"
    agents.mkdir(parents=True)
    (agents / "long.md").write_text(
        "---\nname: long\ndescription: l\ntools: Bash\nautoCompactWindow: 1000\n---\nL\n"
    )
    env = cli_env(project, model_server)
    script = model_server.responder = _Compacting()
    run_dir = _killed_when(project, env, lambda: script.hung)
    script.hang = False
    resumed = _resume(project, env, run_dir.name)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    report = json.loads(resumed.stdout)
    assert report["final_text"] == "main done"
    (long,) = report["subagents"]
    assert long["status"] == "completed" and long["final_text"] == "DONE"
    assert len(script.filling.summary_requests) == 1  # the summary, never asked again
    first = json.dumps(script.asked_after[0])  # the request that hung, asked again
    assert SUMMARY in first and "OUT-1" not in first.replace(SUMMARY, "")
