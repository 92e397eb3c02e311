"""A worktree agent's hooks run in the project folder, as a Claude Code session's do:
a hook that logs into ``logs/`` (a popular hooks collection's shape) writes the project's
log, never a file of the agent's branch; an agent that wrote nothing keeps no branch,
and its result says so (issue 44, item 5)."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from agentcell.orchestrator import AgentDefinition, Orchestrator, Settings
from agentcell.protocol import RunStatus
from conftest import SpawnRecorder
from git_util import branches, git, git_repo
from model_servers import Call, ModelServer, Reply

# What such a collection's post_tool_use.py does: append the input to logs/<event>.json.
LOG_HOOK = (
    "import json, os, sys; payload = json.load(sys.stdin); os.makedirs('logs', exist_ok=True); "
    "open(os.path.join('logs', 'post_tool_use.json'), 'a').write(json.dumps(payload) + '\\n')"
)


def _script(writes: bool) -> Any:
    steps = [Call("read_file", {"path": "README.md"})]
    steps += [Call("write_file", {"path": "made.txt", "content": "made\n"})] if writes else []

    def respond(body: dict[str, Any], api: str) -> Reply:
        done = sum(1 for m in body["messages"] if m["role"] == "tool")
        return Reply(tool_calls=[steps[done]]) if done < len(steps) else Reply(text="done")

    return respond


async def _run(repo: Path, served: ModelServer, writes: bool) -> Any:
    served.responder = _script(writes)
    hook = {"type": "command", "command": f"{sys.executable} -c {json.dumps(LOG_HOOK)}"}
    isolated = AgentDefinition(
        name="isolated", description="i", tools=["read_file", "write_file"], isolation="worktree"
    )
    orch = Orchestrator(
        settings=Settings(
            model="openai:m",
            approval="allow",
            warm_spares=0,
            hooks={"PostToolUse": [{"matcher": "", "hooks": [hook]}]},
        ),
        workdir=repo,
        agents=[isolated],
        load_agent_files=False,
        record=False,
    )
    async with orch:
        return await asyncio.wait_for(orch.delegate("isolated", "go"), 60)


async def test_a_hooks_log_is_the_projects_and_an_agent_that_wrote_nothing_keeps_no_branch(
    spawned: SpawnRecorder, tmp_path: Path, openai_served: ModelServer
) -> None:
    repo = git_repo(tmp_path / "repo")
    quiet = await _run(repo, openai_served, writes=False)
    assert quiet.status is RunStatus.COMPLETED, quiet
    assert quiet.worktree is None and len(branches(repo)) == 1  # no agent branch
    assert "no changes by the agent" in quiet.render()
    logged = [
        json.loads(line) for line in (repo / "logs" / "post_tool_use.json").read_text().splitlines()
    ]
    assert [entry["tool_name"] for entry in logged] == ["Read"]
    assert logged[0]["cwd"] != str(repo)  # the agent's own folder: its worktree
    busy = await _run(repo, openai_served, writes=True)
    assert busy.branch, busy
    committed = git(repo, "show", "--name-only", "--format=", busy.branch).split()
    assert committed == ["made.txt"]  # the agent's file alone, not the hook's log
