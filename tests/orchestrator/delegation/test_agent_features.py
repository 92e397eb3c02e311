"""Claude Code's agent keys through real children, a real model client and the local
model server: lifecycle hooks, continuing a sub-agent, persistent memory.

Each run uses the default sandbox (``workspace``): a hook runs in the parent, outside it,
and a memory folder is the one place outside the workdir the agent may write.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from agentcell.orchestrator import Orchestrator, Settings
from agentcell.protocol import RunStatus
from agents import agent
from conftest import SpawnRecorder
from model_servers import Call, ModelServer, Reply

HOOK_SCRIPT = """\
import json, sys
event = json.load(sys.stdin)
with open(sys.argv[1], "a") as log:
    log.write(json.dumps(event) + "\\n")
if event["hook_event_name"] == "PostToolUse":
    print(json.dumps({"additionalContext": "POST-CONTEXT from the hook"}))
elif event["hook_event_name"] == "SubagentStart":
    print(json.dumps({"additionalContext": "START-CONTEXT from the hook"}))
elif "forbidden" in event.get("tool_input", {}).get("command", ""):
    print("no forbidden commands here: use an allowed one", file=sys.stderr)
    sys.exit(2)
"""


@pytest.fixture
def served(model_server: ModelServer, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModelServer]:
    monkeypatch.setenv("OPENAI_BASE_URL", model_server.openai_base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-features-test-key")
    yield model_server


def tool_outputs(body: dict[str, Any]) -> list[str]:
    return [m["content"] for m in body["messages"] if m["role"] == "tool"]


def system_of(body: dict[str, Any]) -> str:
    return next((m["content"] for m in body["messages"] if m["role"] == "system"), "")


def bash_then_report(commands: list[str]) -> Any:
    """A responder: run ``commands`` in bash one by one, then answer with every output."""

    def respond(body: dict[str, Any], api: str) -> Reply:
        outputs = tool_outputs(body)
        if len(outputs) < len(commands):
            return Reply(tool_calls=[Call("bash", {"command": commands[len(outputs)]})])
        return Reply(text="\n=====\n".join(outputs))

    return respond


async def test_a_pre_tool_use_hook_blocks_one_bash_command_and_lets_another_through(
    spawned: SpawnRecorder, tmp_path: Path, served: ModelServer
) -> None:
    work, hook_dir = tmp_path / "work", tmp_path / "hooks"
    work.mkdir()
    hook_dir.mkdir()
    script, log = hook_dir / "guard.py", hook_dir / "calls.jsonl"  # outside the workdir
    script.write_text(HOOK_SCRIPT)
    served.responder = bash_then_report(
        ["echo allowed > ok.txt && echo ALLOWED-RAN", "echo forbidden > blocked.txt"]
    )
    command = f"{sys.executable} {script} {log}"
    hooks = {
        event: [{"matcher": matcher, "command": command}]
        for event, matcher in (
            ("PreToolUse", "Bash"),
            ("PostToolUse", "bash"),
            ("SubagentStart", "worker"),
            ("SubagentStop", ""),
        )
    }
    orch = Orchestrator(
        settings=Settings(
            model="openai:test", approval="allow", max_workers=2, warm_spares=0, hooks=hooks
        ),
        workdir=work,
        agents=[agent("worker", ["bash", "read_file"])],
        load_agent_files=False,
        record=False,
    )
    async with orch:
        result = await asyncio.wait_for(orch.delegate("worker", "go"), 60)
    assert result.status is RunStatus.COMPLETED, result
    allowed, blocked = result.text.split("\n=====\n")
    assert "ALLOWED-RAN" in allowed and "POST-CONTEXT from the hook" in allowed
    # The hook's stderr is what the model is told; the command never ran.
    assert "no forbidden commands here: use an allowed one" in blocked
    assert (work / "ok.txt").read_text() == "allowed\n"
    assert not (work / "blocked.txt").exists()
    # It ran in the parent (it wrote outside the sub-agent's walls), once per bash call,
    # with Claude Code's field names.
    everything = [json.loads(line) for line in log.read_text().splitlines()]
    assert [e["hook_event_name"] for e in everything] == [
        "SubagentStart",
        "PreToolUse",
        "PostToolUse",
        "PreToolUse",  # blocked: no PostToolUse for it
        "SubagentStop",
    ]
    assert everything[-1]["last_assistant_message"] == result.text
    assert "START-CONTEXT from the hook" in system_of(served.requests[0].body)
    events = [e for e in everything if e["hook_event_name"] == "PreToolUse"]
    assert [e["tool_input"]["command"] for e in events] == [
        "echo allowed > ok.txt && echo ALLOWED-RAN",
        "echo forbidden > blocked.txt",
    ]
    for event in events:
        assert event["hook_event_name"] == "PreToolUse"
        assert event["tool_name"] == "Bash"  # Claude Code's name (issue 22)
        assert event["agent_type"] == "worker"
        assert event["agent_id"] == result.agent_id
        assert event["cwd"] == str(work.resolve())
        assert event["session_id"]


def main_then_continue(server_log: list[str]) -> Any:
    """A responder for the main agent and its worker.

    Main: start a worker, then continue it by the agent_id its result names (and try an id
    that does not exist), then finish. Worker: answer whatever it is asked, echoing the
    conversation it was given.
    """

    def respond(body: dict[str, Any], api: str) -> Reply:
        if system_of(body).startswith("You are worker."):
            users = [m["content"] for m in body["messages"] if m["role"] == "user"]
            server_log.append(json.dumps(body["messages"]))
            if len(users) == 1:
                return Reply(text="noted: the word is PELICAN")
            return Reply(text=f"you said, in order: {' | '.join(users)}")
        outputs = tool_outputs(body)
        if not outputs:
            return Reply(
                tool_calls=[
                    Call(
                        "task",
                        {"subagent_type": "worker", "prompt": "remember the word PELICAN"},
                    )
                ]
            )
        if len(outputs) == 1:
            ident = re.search(r"^agent_id: (\S+)$", outputs[0], re.MULTILINE)
            assert ident is not None, outputs[0]
            return Reply(
                tool_calls=[
                    Call(
                        "task",
                        {
                            "subagent_type": "worker",
                            "prompt": "which word was it?",
                            "resume": ident.group(1),
                        },
                    ),
                    Call(
                        "task",
                        {"subagent_type": "worker", "prompt": "hello", "resume": "a99"},
                    ),
                ]
            )
        return Reply(text="FINAL\n" + "\n#####\n".join(outputs))

    return respond


async def test_a_continued_sub_agent_gets_its_earlier_session_and_unknown_ids_are_refused(
    spawned: SpawnRecorder, tmp_path: Path, served: ModelServer
) -> None:
    worker_requests: list[str] = []
    served.responder = main_then_continue(worker_requests)
    orch = Orchestrator(
        settings=Settings(model="openai:test", approval="allow", max_workers=2, warm_spares=0),
        workdir=tmp_path,
        agents=[agent("worker", ["read_file"])],
        load_agent_files=False,
        run_dir=tmp_path / "runs",
    )
    async with orch:
        report = await asyncio.wait_for(orch.run("go"), 60)
    assert report.status is RunStatus.COMPLETED, report
    first, continued, unknown = report.final_text.removeprefix("FINAL\n").split("\n#####\n")
    assert first.splitlines()[-1] == f"agent_id: {report.subagents[0].agent_id}"
    # The continuation's request carried the earlier session, then the new message.
    assert len(worker_requests) == 2
    messages = json.loads(worker_requests[1])
    assert [(m["role"], m.get("content")) for m in messages[1:]] == [
        ("user", "remember the word PELICAN"),
        ("assistant", "noted: the word is PELICAN"),
        ("user", "which word was it?"),
    ]
    assert "you said, in order: remember the word PELICAN | which word was it?" in continued
    # Its own id, and the same definition (tools and narrowing).
    resumed = next(r for r in report.subagents if r.text.startswith("you said"))
    assert resumed.agent_type == "worker" and resumed.agent_id != report.subagents[0].agent_id
    assert "no sub-agent 'a99' was started in this session" in unknown
    assert "[error] worker" in unknown


async def test_memory_written_in_one_run_is_in_the_next_runs_prompt(
    spawned: SpawnRecorder, tmp_path: Path, served: ModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir()
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    keeper = agent("keeper", ["bash", "write_file"], memory="user")
    folder = home / ".agentcell" / "agent-memory" / "keeper"
    seen: list[str] = []

    def respond(body: dict[str, Any], api: str) -> Reply:
        system = system_of(body)
        seen.append(system)
        where = re.search(r"persistent memory folder: (\S+)", system)
        assert where is not None, system
        calls = [
            Call(
                "bash",
                {
                    "command": f"echo 'favourite fruit: KIWI' >> {where.group(1)}/MEMORY.md"
                    " && echo WROTE"
                },
            ),
            # the folder is a hole, not the home
            Call("bash", {"command": f"echo escape > {home}/outside.txt"}),
            # the file tools reach it too, and nothing else outside the workdir
            Call("write_file", {"path": f"{where.group(1)}/notes.md", "content": "seen\n"}),
            Call("write_file", {"path": f"{home}/outside.md", "content": "no\n"}),
        ]
        outputs = tool_outputs(body)
        if "favourite fruit" in system or len(outputs) == len(calls):
            return Reply(text="\n=====\n".join(outputs) or "remembered")
        return Reply(tool_calls=[calls[len(outputs)]])

    served.responder = respond
    results = []
    for _ in range(2):
        orch = Orchestrator(
            settings=Settings(model="openai:test", approval="allow", max_workers=2, warm_spares=0),
            workdir=work,
            agents=[keeper],
            load_agent_files=False,
            record=False,
        )
        async with orch:
            result = await asyncio.wait_for(orch.delegate("keeper", "note my fruit"), 60)
        assert result.status is RunStatus.COMPLETED, result
        results.append(result)
    wrote, escaped, noted, refused = results[0].text.split("\n=====\n")
    assert wrote.strip() == "WROTE"
    assert "Permission denied" in escaped
    assert (folder / "notes.md").read_text() == "seen\n", noted
    assert "outside the working directory" in refused and not (home / "outside.md").exists()
    first_system, second_system = seen[0], seen[-1]
    assert f"persistent memory folder: {folder}" in first_system
    assert "favourite fruit: KIWI" not in first_system
    assert "Contents of MEMORY.md:\nfavourite fruit: KIWI" in second_system
    assert (folder / "MEMORY.md").read_text() == "favourite fruit: KIWI\n"
    assert not (home / "outside.txt").exists()


def test_only_the_agent_that_started_a_sub_agent_may_continue_it(tmp_path: Path) -> None:
    from agentcell.orchestrator.definitions._registry import AgentRegistry
    from agentcell.orchestrator.delegation._request import DelegationRequest
    from agentcell.orchestrator.delegation._resume import RecordedAgents
    from agentcell.orchestrator.records._key import key_for
    from agentcell.protocol import UserMessage
    from agentcell.worker import Transcript

    transcript = Transcript(tmp_path / "a2.jsonl", "a2", key=key_for(tmp_path, "a2"))
    transcript.messages([UserMessage(content="hi")])  # signed, as the child signs it
    transcript.close()
    recorded = RecordedAgents()
    recorded.started("a2", "Explore", str(tmp_path), owner="a1")  # a1's own child
    recorded.ended("a2")
    registry = AgentRegistry.builtin()
    ask = DelegationRequest(agent_type="Explore", prompt="go on", resume="a2")
    with pytest.raises(LookupError, match="a2 was started by another agent"):
        recorded.continuation(ask, registry, owner="")  # the main agent
    with pytest.raises(LookupError, match="a2 was started by another agent"):
        recorded.continuation(ask, registry, owner="a3")  # a sibling
    request, session = recorded.continuation(ask, registry, owner="a1")
    assert (request.agent_type, request.resume) == ("Explore", "")
    assert [m.content for m in session] == ["hi"]  # type: ignore[union-attr]


def test_memory_folders_by_scope_and_a_local_one_is_git_ignored(tmp_path: Path) -> None:
    import subprocess

    from agentcell.orchestrator.prompt._context import (
        MEMORY_MAX_LINES,
        memory_dir,
        memory_prompt,
        prepare_memory,
    )

    work, home = tmp_path / "work", tmp_path / "home"
    subprocess.run(["git", "init", "-q", str(work)], check=True)
    folders = {
        scope: memory_dir(agent("keeper", [], memory=scope), work, home)
        for scope in ("user", "project", "local")
    }
    assert folders == {
        "user": home / ".agentcell" / "agent-memory" / "keeper",
        "project": work / ".agentcell" / "agent-memory" / "keeper",
        "local": work / ".agentcell" / "agent-memory-local" / "keeper",
    }
    assert memory_dir(agent("plain", []), work, home) is None
    for folder in folders.values():
        assert folder is not None
        prepare_memory(folder)
        (folder / "MEMORY.md").write_text("".join(f"line {i}\n" for i in range(500)))
    status = subprocess.run(
        ["git", "-C", str(work), "status", "--porcelain", "--untracked-files=all"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "agent-memory/keeper/MEMORY.md" in status and "agent-memory-local" not in status
    local = folders["local"]
    assert local is not None
    prompt = memory_prompt(local)
    assert f"line {MEMORY_MAX_LINES - 1}\n" in prompt and f"line {MEMORY_MAX_LINES}\n" not in prompt
    assert "MEMORY.md is cut here" in prompt and "MEMORY_MAX_LINES" in prompt
