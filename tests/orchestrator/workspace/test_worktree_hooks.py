"""A worktree agent's hooks run in the project folder, as a Claude Code session's do:
a hook that logs into ``logs/`` (a popular hooks collection's shape) writes the project's
log, never a file of the agent's branch; one that logs into its input's ``cwd`` (the
agent's worktree) writes there, and that is left out of the agent's commit unless the
agent wrote the file again after it. An agent that wrote nothing keeps no branch, and its
result says so (issue 44, item 5). Real sub-agents, a real hook script, a real repository;
the cases of ``workspace/_hook_writes.py`` one by one are in ``test_hook_writes.py``."""

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

# What such a collection's post_tool_use.py does: append the input to logs/<event>.json,
# in the folder it starts in or in the folder its input names.
LOG_HOOK = """\
import json, os, sys
payload = json.load(sys.stdin)
for folder in ("logs", os.path.join(payload["cwd"], "logs2")):
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "post_tool_use.json"), "a") as log:
        log.write(json.dumps(payload) + "\\n")
"""

READ = Call("read_file", {"path": "README.md"})


def _script(steps: list[Call]) -> Any:
    def respond(body: dict[str, Any], api: str) -> Reply:
        done = sum(1 for m in body["messages"] if m["role"] == "tool")
        return Reply(tool_calls=[steps[done]]) if done < len(steps) else Reply(text="done")

    return respond


async def _run(repo: Path, served: ModelServer, steps: list[Call]) -> Any:
    served.responder = _script(steps)
    script = repo.parent / "log_hook.py"  # outside the project, as ~/.claude/hooks/ is
    script.write_text(LOG_HOOK)
    hook = {"type": "command", "command": f"{sys.executable} {script}"}
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


async def test_a_hooks_log_is_never_the_agents_and_an_agent_that_wrote_nothing_keeps_no_branch(
    spawned: SpawnRecorder, tmp_path: Path, openai_served: ModelServer
) -> None:
    repo = git_repo(tmp_path / "repo")
    quiet = await _run(repo, openai_served, [READ])
    assert quiet.status is RunStatus.COMPLETED, quiet
    assert quiet.worktree is None and len(branches(repo)) == 1  # no agent branch
    assert "no changes by the agent" in quiet.render()
    logged = [
        json.loads(line) for line in (repo / "logs" / "post_tool_use.json").read_text().splitlines()
    ]
    assert [entry["tool_name"] for entry in logged] == ["Read"]
    assert logged[0]["cwd"] != str(repo)  # the agent's own folder: its worktree
    made = Call("write_file", {"path": "made.txt", "content": "made\n"})
    busy = await _run(repo, openai_served, [READ, made])
    assert busy.branch, busy
    committed = git(repo, "show", "--name-only", "--format=", busy.branch).split()
    assert committed == ["made.txt"]  # the agent's file alone, not the hooks' logs
    assert "logs2/post_tool_use.json: a hook wrote them" in busy.render()
    kept = Path(busy.worktree) / "logs2" / "post_tool_use.json"
    assert len(kept.read_text().splitlines()) == 2  # left there, uncommitted


async def test_a_file_the_agent_writes_over_a_hooks_log_is_committed(
    spawned: SpawnRecorder, tmp_path: Path, openai_served: ModelServer
) -> None:
    repo = git_repo(tmp_path / "repo")
    mine = Call("write_file", {"path": "logs2/post_tool_use.json", "content": "mine\n"})
    run = await _run(repo, openai_served, [READ, mine])  # the hook logged there after READ
    assert run.branch, run
    committed = git(repo, "show", "--name-only", "--format=", run.branch).split()
    assert committed == ["logs2/post_tool_use.json"]
    shown = git(repo, "show", f"{run.branch}:logs2/post_tool_use.json").splitlines()
    assert shown[0] == "mine"  # the agent's write (the hook appended after it: it stays)
