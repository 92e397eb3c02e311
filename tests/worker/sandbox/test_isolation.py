"""Isolation boundaries, tested by attack over real child processes: worktrees, resource
limits, environment and secrets, path confinement, output floods, bad model servers."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import child_models
import pytest
from agentcell.orchestrator import AgentDefinition, Orchestrator, Settings
from agentcell.orchestrator.workspace._worktree import create_worktree, finish_worktree
from agentcell.protocol import RunStatus
from agents import agent
from conftest import SpawnRecorder
from git_util import branches, git, git_repo
from model_servers import Call, ModelServer, Reply

from agentcell.testing import FunctionModel


def orchestrator(
    workdir: Path, agents: list[AgentDefinition], models: dict[str, Any], **kwargs: Any
) -> Orchestrator:
    settings = kwargs.pop("settings", None) or Settings(
        model="scripted:echo", approval="allow", max_workers=6, warm_spares=1
    )
    return Orchestrator(
        settings=settings,
        workdir=workdir,
        agents=agents,
        models=models,
        load_agent_files=False,
        **kwargs,
    )


# -- file-system isolation: worktrees ---------------------------------------------------------


async def test_worktrees_keep_changes_and_drop_clean_ones(
    spawned: SpawnRecorder, tmp_path: Path
) -> None:
    repo = git_repo(tmp_path / "repo")
    writer = FunctionModel(child_models.write_a_file, name="function:writer")
    orch = orchestrator(
        repo,
        [agent("writer", ["write_file"], model="function:writer", isolation="worktree")],
        {"function:writer": writer},
        run_dir=tmp_path / "run",
    )
    prompts = ["one.txt", "two.txt", "three.txt", "four.txt", "nothing"]
    async with orch:
        results = await orch.map("writer", prompts, concurrency=5)  # all at once: no collisions

    assert all(r.status is RunStatus.COMPLETED for r in results), [r.error for r in results]
    changed, clean = results[:4], results[4]
    assert clean.worktree is None  # nothing changed: worktree and branch removed
    kept_branches = set()
    for name, result in zip(prompts, changed, strict=False):
        tree = Path(result.worktree or "")
        assert tree.is_dir() and (tree / name).read_text() == f"made by {name}\n"
        assert name in result.diff_stat and "1 file changed" in result.diff_stat
        assert result.branch and result.branch in result.render()
        kept_branches.add(result.branch)
        # Committed on its branch, naming the agent and the task; nothing left uncommitted.
        assert result.commit == git(repo, "rev-parse", result.branch)
        assert result.commit[:12] in result.render()
        subject, body = git(repo, "log", "-1", "--format=%s%n%b", result.branch).split("\n", 1)
        assert subject == f"agentcell: writer ({result.agent_id}): {result.description}"
        assert f"Task:\n{name}" in body
        assert git(tree, "status", "--porcelain") == ""
        assert git(repo, "show", f"{result.branch}:{name}") == f"made by {name}"
    assert len(kept_branches) == 4
    assert set(branches(repo)) - {"master", "main"} == kept_branches
    assert not (repo / "one.txt").exists()  # the main checkout is untouched
    worktree_dirs = sorted(p.name for p in (tmp_path / "run" / "worktrees").iterdir())
    assert worktree_dirs == sorted(Path(r.worktree or "").name for r in changed)


def anonymous_repo(repo: Path) -> Path:
    """A repository with one commit and no author configured."""
    repo.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    (repo / "a.txt").write_text("a\n")
    subprocess.run(["git", "add", "."], cwd=repo, check=True)
    ident = ["-c", "user.name=x", "-c", "user.email=x@x"]
    subprocess.run(["git", *ident, "commit", "-qm", "init"], cwd=repo, check=True)
    return repo


async def test_worktree_changes_are_committed_without_an_identity_or_hooks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A repository (and home) that names no author, with a hook that refuses every commit.
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    repo = anonymous_repo(tmp_path / "bare-identity")
    hook = repo / ".git" / "hooks" / "pre-commit"
    hook.write_text("#!/bin/sh\nexit 1\n")
    hook.chmod(0o755)
    tree = await create_worktree(repo, tmp_path / "rec", "a1", "agentcell/r/a1")
    (tree.workdir / "new.txt").write_text("new\n")
    kept = await finish_worktree(tree, "agentcell: writer (a1): add new.txt")
    assert kept is not None and kept.commit_error == ""
    assert git(repo, "log", "-1", "--format=%s|%an", "agentcell/r/a1") == (
        "agentcell: writer (a1): add new.txt|agentcell"
    )
    assert kept.commit == git(repo, "rev-parse", "agentcell/r/a1")
    assert "new.txt" in kept.diff_stat and "1 file changed" in kept.diff_stat


async def test_worktree_outside_git_is_a_clear_error(
    spawned: SpawnRecorder, tmp_path: Path
) -> None:
    writer = FunctionModel(child_models.write_a_file, name="function:writer")
    orch = orchestrator(
        tmp_path,
        [agent("writer", ["write_file"], model="function:writer", isolation="worktree")],
        {"function:writer": writer},
        record=False,
    )
    async with orch:
        result = await orch.delegate("writer", "x.txt")
    assert result.status is RunStatus.ERROR
    assert "isolation: worktree needs a git repository" in result.error
    assert result.pid is None  # no process was spent on it


# -- resource limits -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tool", "fields", "needle"),
    [
        (
            "allocate",
            {"memory_limit_mb": 256},
            "memory limit exceeded: an allocation failed under the 256 MiB limit",
        ),
        ("burn", {"cpu_limit_s": 1}, "CPU time limit exceeded: cpu_limit_s is 1"),
        ("read_file", {"max_tool_calls": 3}, "tool call limit reached: max_tool_calls is 3"),
    ],
    ids=["address-space", "cpu", "tool-calls"],
)
async def test_limits_end_the_child_with_a_message_naming_the_limit(
    spawned: SpawnRecorder, tmp_path: Path, tool: str, fields: dict[str, Any], needle: str
) -> None:
    model = FunctionModel(child_models.call_the_named_tool_twice, name="function:looper")
    orch = orchestrator(
        tmp_path,
        [agent("looper", [tool], model="function:looper", **fields)],
        {"function:looper": model},
        tools=[child_models.allocate, child_models.burn],
        record=False,
    )
    async with orch:
        results = await asyncio.gather(
            orch.delegate("looper", tool), orch.delegate("Explore", "sibling")
        )
    limited, sibling = results
    assert limited.status is RunStatus.LIMIT, limited
    assert needle in limited.error
    assert sibling.status is RunStatus.COMPLETED


async def test_memory_watchdog_counts_grandchildren(
    spawned: SpawnRecorder,
    tmp_path: Path,
    model_server: ModelServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Three grandchildren of 120 MiB each: every one is under the address-space limit
    # (inherited from the child), but together with the child they pass 200 MiB. The
    # memory is written, not just reserved: resident memory grows only as pages are touched.
    one = "python3 -c 'x = b\"x\" * (120 * 2**20); import time; time.sleep(120)'"
    hog = f"for i in 1 2 3; do {one} & done; wait"
    model_server.responder = lambda body, api: Reply(tool_calls=[Call("bash", {"command": hog})])
    monkeypatch.setenv("OPENAI_BASE_URL", model_server.openai_base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-key-for-memory")
    orch = orchestrator(
        tmp_path,
        [agent("hog", ["bash"], model="openai:test", memory_limit_mb=200)],
        {},
        record=False,
    )
    async with orch:
        result = await asyncio.wait_for(orch.delegate("hog", "use memory"), 60)
    assert result.status is RunStatus.LIMIT, result
    assert "memory limit exceeded: its processes used" in result.error
    assert "the limit is 200 MiB" in result.error


async def test_tool_output_is_capped_with_the_limit_named(
    spawned: SpawnRecorder, tmp_path: Path
) -> None:
    (tmp_path / "big.txt").write_text("line\n" * 20_000)
    model = FunctionModel(child_models.read_big_file, name="function:reader")
    orch = orchestrator(
        tmp_path,
        [agent("reader", ["read_file"], model="function:reader", max_tool_output_bytes=500)],
        {"function:reader": model},
        run_dir=tmp_path / "run",
    )
    async with orch:
        result = await orch.delegate("reader", "read it")
    # The output limit truncates (head and tail kept, the whole saved) rather than ending the
    # run: an agent can go on and read the rest in pieces.
    assert result.status is RunStatus.COMPLETED
    assert len(result.text) < 800
    assert "tool outputs are limited to 500 characters" in result.text
    saved = next((tmp_path / "run" / "tool-outputs").iterdir())
    assert saved.read_text().count("\tline") == 2000  # the whole tool output, saved


# -- environment and secrets ------------------------------------------------------------------


async def test_a_child_holds_no_provider_key_and_bash_sees_none(
    spawned: SpawnRecorder,
    tmp_path: Path,
    model_server: ModelServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", model_server.openai_base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-parent-openai-key-000")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-parent-key-000")

    def script(body: dict, api: str) -> Reply:
        results = [m for m in body["messages"] if m["role"] == "tool"]
        if not results:
            # Also the initial environments of the sub-agent and of its fork server, which
            # /proc keeps whatever the process did to its variables since.
            grandparent = "$(ps -o ppid= -p $PPID | tr -d ' ')"
            snoop = (
                "env; tr '\\0' '\\n' < /proc/$PPID/environ; "
                f"tr '\\0' '\\n' < /proc/{grandparent}/environ"
            )
            return Reply(tool_calls=[Call("bash", {"command": snoop}), Call("env_seen", {})])
        return Reply(text=json.dumps([r["content"] for r in results]))

    model_server.responder = script
    orch = orchestrator(
        tmp_path,
        [agent("snoop", ["bash", "env_seen"], model="openai:test")],
        {},
        tools=[child_models.env_seen],
        run_dir=tmp_path / "run",
    )
    async with orch:
        result = await asyncio.wait_for(orch.delegate("snoop", "look around"), 60)
    bash_output, tool_view = json.loads(result.text)
    assert "sk-parent-openai-key-000" not in bash_output and "OPENAI_API_KEY" not in bash_output
    assert "ANTHROPIC" not in bash_output
    assert "PATH=" in bash_output  # bash's env was read
    # The /proc views of the sub-agent and its fork server: neither is dumpable, and bash
    # holds no capability (a root orchestrator's bash held CAP_SYS_PTRACE and read both).
    assert bash_output.count("environ: Permission denied") == 2, bash_output
    # No key at all: its model requests go through the parent, which holds the key.
    assert tool_view == ""
    for path in (tmp_path / "run").rglob("*"):
        if path.is_file():
            text = path.read_text(errors="replace")
            assert "sk-parent-openai-key-000" not in text and "sk-ant-parent-key-000" not in text


async def test_secrets_are_redacted_from_records(
    spawned: SpawnRecorder,
    tmp_path: Path,
    model_server: ModelServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", model_server.openai_base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-leaky-key-123456789")
    model_server.responder = lambda body, api: Reply(text="the key is sk-leaky-key-123456789")
    orch = orchestrator(
        tmp_path,
        [agent("leaker", [], model="openai:test")],
        {},
        run_dir=tmp_path / "run",
        settings=Settings(model="openai:test", approval="allow", max_workers=2, warm_spares=0),
    )
    async with orch:
        await orch.delegate("leaker", "say the key")
        await orch.run("say the key")
    texts = [p.read_text() for p in (tmp_path / "run").rglob("*.json*")]
    assert texts and all("sk-leaky-key-123456789" not in t for t in texts)
    assert any("[REDACTED]" in t for t in texts)


# -- path attacks, floods, bad servers ---------------------------------------------------------


async def test_a_child_cannot_reach_outside_its_workdir(
    spawned: SpawnRecorder, tmp_path: Path
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (tmp_path / "secret.txt").write_text("top secret\n")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret.txt").write_text("top secret\n")
    os.symlink(tmp_path / "outside", work / "link-out")
    model = FunctionModel(child_models.attack_paths, name="function:attacker")
    tools = ["read_file", "write_file", "edit_file", "glob", "grep"]
    orch = orchestrator(
        work,
        [agent("attacker", tools, model="function:attacker")],
        {"function:attacker": model},
        record=False,
    )
    async with orch:
        result = await orch.delegate("attacker", "escape")
    lines = result.text.splitlines()
    assert len(lines) == 8
    for line in lines:
        name, is_error, content = line.split("|", 2)
        assert is_error == "True", line
        assert "top secret" not in content
    assert not (tmp_path / "planted.txt").exists()
    assert (tmp_path / "secret.txt").read_text() == "top secret\n"


async def test_searches_from_a_child_do_not_read_earlier_runs_records(
    spawned: SpawnRecorder, tmp_path: Path
) -> None:
    work = tmp_path / "work"
    (work / "src").mkdir(parents=True)
    (work / "src" / "notes.jsonl").write_text('{"plan": "ZEBRA-42 is the codename"}\n')
    # What an earlier run left behind: a transcript and a kept worktree.
    earlier = work / ".agentcell" / "runs" / "20261201-000000-beef"
    earlier.mkdir(parents=True)
    (earlier / "a1.jsonl").write_text('{"prompt": "ZEBRA-42 private instructions"}\n')
    (work / ".agentcell" / "worktrees" / "a1").mkdir(parents=True)
    (work / ".agentcell" / "worktrees" / "a1" / "copy.jsonl").write_text("ZEBRA-42\n")
    model = FunctionModel(child_models.search_for_prompt, name="function:searcher")
    orch = orchestrator(
        work,
        [agent("searcher", ["glob", "grep"], model="function:searcher")],
        {"function:searcher": model},
        record=False,
    )
    async with orch:
        result = await orch.delegate("searcher", "ZEBRA-42")
    assert result.status is RunStatus.COMPLETED, result.error
    grep_all, glob_all, grep_records = result.text.splitlines()[:3]
    assert grep_all == 'grep|src/notes.jsonl:1:{"plan": "ZEBRA-42 is the codename"}'
    assert glob_all == "glob|src/notes.jsonl"
    # Asked for by path, the records are readable: skipping is about searches passing by.
    assert grep_records.startswith("grep|.agentcell/runs/20261201-000000-beef/a1.jsonl:1:")
    assert "glob|.agentcell/runs/20261201-000000-beef/a1.jsonl" in result.text
    assert ".agentcell/worktrees/a1/copy.jsonl" in result.text


async def test_a_flooding_child_is_captured_and_capped(
    spawned: SpawnRecorder, tmp_path: Path
) -> None:
    model = FunctionModel(child_models.call_tool_named_in_prompt, name="function:flooder")
    orch = orchestrator(
        tmp_path,
        [agent("flooder", ["flood"], model="function:flooder")],
        {"function:flooder": model},
        tools=[child_models.flood],
        run_dir=tmp_path / "run",
    )
    async with orch:
        result = await asyncio.wait_for(orch.delegate("flooder", "flood"), 60)
    assert result.status is RunStatus.COMPLETED
    assert result.text == "after flood: flooded"
    log = tmp_path / "run" / f"{result.agent_id}.stderr.log"
    size = log.stat().st_size
    assert 1 << 20 <= size < (1 << 20) + 4096  # 50 MB printed, 1 MiB kept
    assert "output capped" in log.read_text()[-200:]


@pytest.mark.parametrize(
    ("reply", "needle"),
    [
        (Reply(hang=True), "within the 0.5 s timeout"),
        (Reply(text="abc", drop_after=1), "connection to http://127.0.0.1"),
        (
            Reply(raw=b"this is not an event stream", content_type="text/event-stream"),
            "did not send an event stream",
        ),
    ],
    ids=["hangs", "resets", "garbage"],
)
async def test_a_bad_model_server_is_a_clear_error_never_a_hang(
    spawned: SpawnRecorder,
    tmp_path: Path,
    model_server: ModelServer,
    monkeypatch: pytest.MonkeyPatch,
    reply: Reply,
    needle: str,
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", model_server.openai_base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    model_server.responder = lambda body, api: reply
    settings = Settings(
        model="openai:test",
        approval="allow",
        max_workers=2,
        warm_spares=0,
        model_options={"openai": {"timeout": 0.5, "max_retries": 0}},
    )
    orch = orchestrator(tmp_path, [], {}, settings=settings, record=False)
    async with orch:
        main = await asyncio.wait_for(orch.run("hello"), 60)
        sub = await asyncio.wait_for(orch.delegate("Explore", "hello"), 60)
    for outcome in (main.main, sub):
        assert outcome.status is RunStatus.ERROR
        assert needle in outcome.error, outcome.error


async def test_cancel_reaches_a_daemon_that_left_the_session(
    spawned: SpawnRecorder, tmp_path: Path
) -> None:
    from agentcell.orchestrator import AgentActivity
    from agentcell.orchestrator.delegation._runner import DelegationRequest, RunHandle
    from agentcell.protocol import ToolFinished, ToolStarted
    from delegation_util import gate

    async with gate() as door:
        model = FunctionModel(child_models.escape_then_wait, name="function:escaper")
        orch = orchestrator(
            tmp_path,
            [agent("escaper", ["bash", "wait_at_gate"], model="function:escaper")],
            {"function:escaper": model},
            tools=[door.tool()],
            record=False,
        )
        async with orch:
            handle = RunHandle()
            daemon: list[int] = []

            def watch(event: object) -> None:
                if isinstance(event, AgentActivity) and isinstance(event.event, ToolFinished):
                    daemon.append(int(event.event.preview.split()[0]))
                if (
                    isinstance(event, AgentActivity)
                    and isinstance(event.event, ToolStarted)
                    and event.event.name == "wait_at_gate"
                ):
                    handle.cancel()

            orch.bus.subscribe(watch)
            result = await asyncio.wait_for(
                orch.runner.run(
                    DelegationRequest("escaper", "go"), orch._direct.scope(), handle=handle
                ),
                60,
            )
    assert result.status is RunStatus.CANCELLED
    (pid,) = daemon
    from agentcell.worker.child import _proc

    assert not _proc.is_alive(pid), "a daemon that called setsid outlived the cancelled sub-agent"
