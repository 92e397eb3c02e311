"""MCP servers the parent starts once and shares (``mcp_host/_shared.py``): a real stdio
server (tests/support/mcp_server.py) used by real children through the local model
server. The walls of its host are probed in test_walls_privilege (root and nobody)."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import sys
from pathlib import Path
from typing import Any

import attack_tools
import psutil
import pytest
from agentcell.orchestrator import AgentDefinition, Orchestrator, Settings
from agentcell.orchestrator.journal._file import read_journal
from agentcell.orchestrator.journal._place import journal_dir
from agentcell.protocol import RunStatus
from conftest import SpawnRecorder
from git_util import git, git_repo
from mcp_http import serve_mcp_http
from model_servers import Call, ModelServer, Reply
from places import SUPPORT

SERVER = str(SUPPORT / "mcp_server.py")
SEP = "\n=====\n"


def server(starts: Path, *args: str, **fields: Any) -> dict[str, Any]:
    return {"command": sys.executable, "args": [SERVER, "--starts", str(starts), *args], **fields}


def _outputs(body: dict[str, Any]) -> list[str]:
    return [m["content"] for m in body["messages"] if m["role"] == "tool"]


def script(calls: list[tuple[str, dict[str, Any]]]) -> Any:
    """Every agent (main or sub) makes ``calls`` in order, then answers with the outputs."""

    def respond(body: dict[str, Any], api: str) -> Reply:
        outputs = _outputs(body)
        if len(outputs) < len(calls):
            return Reply(tool_calls=[Call(*calls[len(outputs)])])
        return Reply(text=SEP.join(outputs))

    return respond


def orchestrator(
    work: Path,
    agents: list[AgentDefinition],
    run_dir: Path | None = None,
    tools: list[Any] | None = None,
    **settings: Any,
) -> Orchestrator:
    """Records (and journals) into ``run_dir`` when one is given."""
    return Orchestrator(
        settings=Settings(
            model="openai:m", approval="allow", warm_spares=0, **{"max_workers": 3, **settings}
        ),
        workdir=work,
        agents=agents,
        tools=tools or [],
        load_agent_files=False,
        record=run_dir is not None,
        run_dir=run_dir,
    )


def _starts(path: Path) -> list[int]:
    return [int(line) for line in path.read_text().split()] if path.exists() else []


async def test_one_server_serves_the_main_agent_and_sub_agents_side_by_side(
    spawned: SpawnRecorder, tmp_path: Path, openai_served: ModelServer
) -> None:
    starts = tmp_path / "starts"
    openai_served.responder = script([("mcp__local__whoami", {})])
    helper = AgentDefinition(
        name="helper", description="h", tools=["mcp__local__whoami"], mcp_servers=["local"]
    )
    orch = orchestrator(tmp_path, [helper], mcp_servers={"local": server(starts)})
    async with orch:
        results = await asyncio.wait_for(
            asyncio.gather(*(orch.delegate("helper", "go") for _ in range(3))), 60
        )
        main = await asyncio.wait_for(orch.run("go"), 60)
        (pid,) = _starts(starts)  # started once, for all four agents
        # Its host (the warden, the launcher it became) is the parent's child: no
        # sub-agent holds the server's process.
        assert psutil.Process(pid).parent().ppid() == os.getpid()
    assert [r.status for r in results] == [RunStatus.COMPLETED] * 3, results
    assert {r.text for r in results} == {str(pid)} and main.final_text == str(pid)
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


@pytest.mark.parametrize("attack", ["forge", "steal"])
async def test_a_call_frame_outside_the_grant_or_unsigned_reaches_no_server(
    spawned: SpawnRecorder,
    tmp_path: Path,
    openai_served: ModelServer,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    attack: str,
) -> None:
    """A compromised child, signed with its own key, names a shared server its
    definition does not name and a tool its grant denies: both refused, journaled; a
    thief's frames for a granted tool, unsigned or wrongly signed: dropped."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    tool = attack_tools.forge_mcp if attack == "forge" else attack_tools.steal_mcp
    granted = ["mcp__local__echo"] if attack == "forge" else ["mcp__local__*"]
    openai_served.responder = script([(tool.name, {})])
    work, secret, local = tmp_path / "work", tmp_path / "secret", tmp_path / "local"
    work.mkdir()
    hostile = AgentDefinition(
        name="hostile", description="h", tools=[tool.name, *granted], mcp_servers=["local"]
    )
    servers = {"local": server(local), "secret": server(secret)}
    orch = orchestrator(
        work, [hostile], tmp_path / "run", tools=[tool], mcp_servers=servers, main_mcp_servers=[]
    )
    caplog.set_level(logging.WARNING, "agentcell")
    async with orch:
        result = await asyncio.wait_for(orch.delegate("hostile", "go"), 60)
        await asyncio.sleep(0)
    assert result.status is RunStatus.COMPLETED, result
    offered = [t["function"]["name"] for t in openai_served.requests[0].body["tools"]]
    assert [name for name in offered if name.startswith("mcp__")] == granted[:1] or (
        attack == "steal" and "mcp__local__write_here" in offered
    )
    assert not secret.exists()  # the server it does not name never even started
    assert not (work / attack_tools.MCP_FORGED_FILE).exists()  # the denied tool never ran
    refused = [r for r in caplog.records if "refused a sub-agent's MCP call" in r.message]
    records = read_journal(journal_dir(tmp_path / "run") / "journal").records
    journaled = [r for r in records if r.get("what") == "refused"]
    if attack == "forge":
        assert len(refused) == 2 and len(journaled) == 2, (refused, journaled)
        assert {r["tool"] for r in journaled} == {"mcp__secret__whoami", "mcp__local__write_here"}
    else:
        assert refused == [] and journaled == []  # dropped before the relay


async def test_a_worktree_agents_server_is_its_own_and_writes_in_its_worktree(
    spawned: SpawnRecorder, tmp_path: Path, openai_served: ModelServer
) -> None:
    repo = git_repo(tmp_path / "repo")
    starts = tmp_path / "starts"
    openai_served.responder = script([("mcp__local__write_here", {"name": "s.txt", "text": "x"})])
    isolated = AgentDefinition(
        name="isolated",
        description="i",
        tools=["mcp__local__write_here"],
        mcp_servers=["local"],
        isolation="worktree",
    )
    orch = orchestrator(repo, [isolated], mcp_servers={"local": server(starts)}, sandbox="off")
    async with orch:
        result = await asyncio.wait_for(orch.delegate("isolated", "go"), 60)
    assert result.status is RunStatus.COMPLETED, result
    assert result.text == f"wrote {Path(result.worktree).resolve() / 's.txt'}"
    assert not (repo / "s.txt").exists()
    assert git(repo, "show", f"{result.branch}:s.txt") == "x"


async def test_a_server_that_crashes_is_started_again_once_then_named_with_its_log(
    spawned: SpawnRecorder, tmp_path: Path, openai_served: ModelServer
) -> None:
    starts = tmp_path / "starts"
    calls = [("mcp__local__whoami", {}), ("mcp__local__crash", {})] * 2
    openai_served.responder = script([*calls, ("mcp__local__whoami", {})])
    helper = AgentDefinition(
        name="helper", description="h", tools=["mcp__local__*"], mcp_servers=["local"]
    )
    orch = orchestrator(
        tmp_path / "work", [helper], tmp_path / "run", mcp_servers={"local": server(starts)}
    )
    (tmp_path / "work").mkdir()
    async with orch:
        first = await asyncio.wait_for(orch.delegate("helper", "go"), 60)
        after = await asyncio.wait_for(orch.delegate("helper", "go"), 60)
    pid, again = _starts(starts)  # one restart, no more
    whoami, crashed, whoami_again, crashed_again, gone = first.text.split(SEP)
    assert (whoami, whoami_again) == (str(pid), str(again))
    assert "stopped during this call" in crashed and "started again" in crashed
    log = tmp_path / "work" / ".agentcell" / "mcp-logs" / "local.log"
    for said in (crashed_again, gone, after.text.split(SEP)[0]):
        assert "'local' stopped twice" in said and f"its log: {log}" in said, said
    # The server's own words only: the walled host's launcher put Python's warning about
    # a module run with -m at the head of every shared server's log.
    assert log.read_text() == "crash: exiting on purpose\n" * 2


async def test_a_hook_on_a_shared_tool_sees_the_agent_and_can_block_the_call(
    spawned: SpawnRecorder, tmp_path: Path, openai_served: ModelServer
) -> None:
    starts, payloads = tmp_path / "starts", tmp_path / "payloads.jsonl"
    block = (
        "import json, sys; payload = json.load(sys.stdin); "
        f"open({str(payloads)!r}, 'a').write(json.dumps(payload) + '\\n'); "
        "print('no writes here', file=sys.stderr); sys.exit(2)"
    )
    hook = {"type": "command", "command": f"{sys.executable} -c {json.dumps(block)}"}
    hooks = {"PreToolUse": [{"matcher": "mcp__local__write_here", "hooks": [hook]}]}
    openai_served.responder = script([("mcp__local__write_here", {"name": "h.txt", "text": "x"})])
    helper = AgentDefinition(
        name="helper", description="h", tools=["mcp__local__*"], mcp_servers=["local"]
    )
    orch = orchestrator(tmp_path, [helper], mcp_servers={"local": server(starts)}, hooks=hooks)
    async with orch:
        result = await asyncio.wait_for(orch.delegate("helper", "go"), 60)
    assert "no writes here" in result.text and not (tmp_path / "h.txt").exists()
    (payload,) = [json.loads(line) for line in payloads.read_text().splitlines()]
    assert payload["tool_name"] == "mcp__local__write_here"
    assert (payload["agent_id"], payload["agent_type"]) == (result.agent_id, "helper")
    assert payload["tool_input"] == {"name": "h.txt", "text": "x"}


def _by_prompt(calls: dict[str, list[tuple[str, dict[str, Any]]]]) -> Any:
    """``script``, with the calls its task names (the sub-agent's prompt, a key of ``calls``)."""

    def respond(body: dict[str, Any], api: str) -> Reply:
        prompt = next(m["content"] for m in body["messages"] if m["role"] == "user")
        task = next(key for key in calls if key in str(prompt))
        return script(calls[task])(body, api)

    return respond


async def _until(happened: Any, what: str) -> None:
    """Until ``happened()`` (polled: a file another process writes), at most 30 s."""
    for _ in range(1500):
        if happened():
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"not within 30 s: {what}")


async def test_a_sub_agent_killed_mid_call_leaves_the_server_serving_the_next_agent(
    spawned: SpawnRecorder, tmp_path: Path, openai_served: ModelServer
) -> None:
    """SIGKILLed while the shared server is in the middle of its call: the run is
    ``crashed``, said why; the call is dropped (the server is told, and never answers
    it), the server is the same process, not restarted, and answers the next agent."""
    starts, held = tmp_path / "starts", tmp_path / "held"
    openai_served.responder = _by_prompt(
        {
            "hold": [("mcp__local__hold", {"marker": str(held)})],
            "whoami": [("mcp__local__whoami", {})],
        }
    )
    helper = AgentDefinition(
        name="helper", description="h", tools=["mcp__local__*"], mcp_servers=["local"]
    )
    orch = orchestrator(
        tmp_path, [helper], mcp_servers={"local": server(starts)}, main_mcp_servers=[]
    )
    async with orch:
        holding = asyncio.create_task(orch.delegate("helper", "hold"))
        await _until(lambda: held.exists() or holding.done(), "the server holds the call")
        assert not holding.done(), holding.result()
        (pid,) = spawned.pids
        os.kill(pid, signal.SIGKILL)
        killed = await asyncio.wait_for(holding, 60)
        await _until(Path(f"{held}.cancelled").exists, "the server is told the call is off")
        Path(f"{held}.open").touch()  # a call still open would be answered now
        after = await asyncio.wait_for(orch.delegate("helper", "whoami"), 60)
        shared = orch.runner.shared_mcp.servers["local"]
        assert (shared.starts, shared.gave_up) == (1, "")
        (server_pid,) = _starts(starts)
        warden = psutil.Process(server_pid).ppid()
    assert killed.status is RunStatus.CRASHED and killed.pid == pid, killed
    assert "killed by signal SIGKILL" in (killed.error or ""), killed.error
    assert after.status is RunStatus.COMPLETED and after.text == str(server_pid), after
    # The dropped call's answer reached no model: no agent's conversation holds it.
    assert not any("held call" in json.dumps(r.body) for r in openai_served.requests)
    for gone in (server_pid, warden):
        assert not psutil.pid_exists(gone) or psutil.Process(gone).status() == "zombie"


async def test_an_http_server_is_shared_through_the_parent_within_each_agents_grant(
    spawned: SpawnRecorder,
    tmp_path: Path,
    openai_served: ModelServer,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A configured ``type = "http"`` server is shared as a stdio one is: one client, the
    parent's, serves two sub-agents at once; neither child may connect to it; a frame
    for its tool outside the grant (or for another server) is refused, never sent."""
    server_cwd, secret = tmp_path / "server-cwd", tmp_path / "secret"
    server_cwd.mkdir()
    monkeypatch.chdir(server_cwd)  # where the in-process server's write_here would write
    tool = attack_tools.forge_mcp
    openai_served.responder = script([("mcp__local__echo", {"text": "shared"}), (tool.name, {})])
    helper = AgentDefinition(
        name="helper", description="h", tools=[tool.name, "mcp__local__echo"], mcp_servers=["local"]
    )
    caplog.set_level(logging.WARNING, "agentcell")
    with serve_mcp_http() as web:
        servers = {"local": {"type": "http", "url": web.url}, "secret": server(secret)}
        orch = orchestrator(
            tmp_path, [helper], tools=[tool], mcp_servers=servers, main_mcp_servers=[]
        )
        async with orch:
            results = await asyncio.wait_for(
                asyncio.gather(*(orch.delegate("helper", "go") for _ in range(2))), 60
            )
    assert [r.status for r in results] == [RunStatus.COMPLETED] * 2, results
    assert [r.text.split(SEP)[0] for r in results] == ["echo from MCP: shared"] * 2
    offered = {
        name
        for request in openai_served.requests
        for name in (t["function"]["name"] for t in request.body["tools"])
        if name.startswith("mcp__")
    }
    assert offered == {"mcp__local__echo"}
    # One client, the parent's, discovered the server and listed its tools for both
    # agents; only the granted tool was ever sent to it.
    assert sorted(web.asked) == [
        "server/discover",
        "tools/call echo",
        "tools/call echo",
        "tools/list",
    ], web.asked
    # The children hold no connection to it: their walls open no port of their own
    # (an agent's own http server's would be: test_mcp.py's http tests).
    sandboxes = [r.sandbox for r in results]
    assert all(s.startswith("workspace") and "own tcp" not in s for s in sandboxes), sandboxes
    refused = [r for r in caplog.records if "refused a sub-agent's MCP call" in r.message]
    named = sorted(r.getMessage().rsplit(" ", 1)[1] for r in refused)  # "... not granted T"
    assert named == sorted(["mcp__local__write_here", "mcp__secret__whoami"] * 2), named
    assert not (server_cwd / attack_tools.MCP_FORGED_FILE).exists()
    assert not secret.exists()  # the server no definition names never started
