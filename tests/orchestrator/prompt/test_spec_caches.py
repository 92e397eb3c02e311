"""The parent's caches of what every sub-agent of a run shares: the instruction files'
prompt section and the child environment (orchestrator/prompt/_instruction_cache.py,
_environment_cache.py).

What is kept must still follow the files and the environment: an AGENTS.md a sub-agent
edits reaches the next one, and one it swaps for a link out of the project is refused
(both from real sub-agents' bash); a key set mid-run reaches the next child. And the
point of it: a delegation's lookups cost a few ``lstat`` calls instead of ~29.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from agentcell.orchestrator import AgentDefinition, Settings
from agentcell.orchestrator.approvals._hooks import HookRunner
from agentcell.orchestrator.backends._environment_cache import EnvironmentCache
from agentcell.orchestrator.definitions._registry import AgentRegistry
from agentcell.orchestrator.delegation._prepare import Preparer
from agentcell.orchestrator.delegation._request import DelegationRequest, Scope
from agentcell.orchestrator.model_relay._limiter import ProviderLimiter
from agentcell.orchestrator.prompt._context import instructions_prompt
from agentcell.orchestrator.prompt._instruction_cache import InstructionCache
from agentcell.protocol import RunStatus
from agentcell.worker import probe_sandbox
from agents import agent
from conftest import SpawnRecorder
from model_servers import ModelServer
from sandbox_util import bash_script, orchestrator

# -- counting file-system calls ---------------------------------------------------------

_COUNTED = ("stat", "lstat", "open", "scandir", "listdir", "access")


@pytest.fixture
def fs_calls(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Every ``os.stat`` / ``lstat`` / ``open`` / ... this process makes, counted."""
    counts = dict.fromkeys(_COUNTED, 0)

    def counting(name: str, real: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            counts[name] += 1
            return real(*args, **kwargs)

        return call

    for name in _COUNTED:
        monkeypatch.setattr(os, name, counting(name, getattr(os, name)))
    return counts


def _preparer(work: Path, home: Path) -> Preparer:
    settings = Settings()
    return Preparer(
        settings=settings,
        registry=AgentRegistry.builtin(),
        workdir=str(work),
        home=home,
        limiter=ProviderLimiter(settings.limits),
        model_objects={},
        custom_tools={},
    )


def _prepare_one(prep: Preparer, n: int) -> str:
    """What the runner does to prepare sub-agent ``n`` (its spec, then the rest)."""
    definition = AgentDefinition(name="worker", model="inherit", tools=["read_file"])
    scope = Scope("main", ["read_file"], "openai:test")
    request = DelegationRequest("worker", "go")
    prepared = prep.spec(definition, request, scope, f"a{n}", False, run_dir="")
    hooks = HookRunner.from_table({}, "config", cwd=prep.workdir, session_id="s")
    prep.complete(prepared.spec, definition, request, hooks, None)
    return prepared.spec.system_prompt


@pytest.fixture
def project(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    work, home = tmp_path / "work", tmp_path / "home"
    (work / ".claude").mkdir(parents=True)
    (home / ".claude").mkdir(parents=True)
    (work / "AGENTS.md").write_text("PROJECT-RULE: be brief.\n")
    (home / ".claude" / "CLAUDE.md").write_text("USER-RULE: be kind.\n")
    yield work, home


def test_a_delegation_stats_only_the_searched_folders_and_the_found_files(
    project: tuple[Path, Path], fs_calls: dict[str, int]
) -> None:
    work, home = project
    prep = _preparer(work, home)
    first = _prepare_one(prep, 0)
    assert "PROJECT-RULE" in first and "USER-RULE" in first
    looked_up = dict(fs_calls)
    for n in range(1, 11):
        assert _prepare_one(prep, n) == first
    per_agent = {name: (fs_calls[name] - looked_up[name]) / 10 for name in _COUNTED}
    # Four searched folders (~/.agentcell, ~/.claude, the project, its .claude) and the
    # two files found: one lstat each, and nothing opened or read again.
    assert per_agent == {**dict.fromkeys(_COUNTED, 0), "lstat": 6}, per_agent
    assert prep.instructions.lookups == 1
    # What a lookup without the cache costs, for comparison (and the same answer).
    before = sum(fs_calls.values())
    assert instructions_prompt(work, home) in first
    assert sum(fs_calls.values()) - before >= 20


def test_an_instruction_file_changed_added_or_removed_is_seen_at_the_next_use(
    project: tuple[Path, Path],
) -> None:
    work, home = project
    cache = InstructionCache()
    assert "PROJECT-RULE" in cache.prompt(work, home)
    (work / "AGENTS.md").write_text("EDITED-RULE, same file, edited in place\n")
    assert "EDITED-RULE" in cache.prompt(work, home)
    (work / ".claude" / "CLAUDE.md").write_text("ADDED-RULE\n")
    assert "ADDED-RULE" in cache.prompt(work, home)
    (home / ".claude" / "CLAUDE.md").unlink()
    text = cache.prompt(work, home)
    assert "USER-RULE" not in text and "EDITED-RULE" in text
    # An edit that keeps the size and is given back its old times: the inode or ctime
    # still tells (a rename-based save makes a new inode; a write moves the ctime).
    agents = work / "AGENTS.md"
    seen = agents.stat()
    again = "EDITED-RULE, same file, edited AGAIN!!!\n"
    assert len(again) == seen.st_size
    with open(agents, "r+") as file:  # in place: the same inode
        file.write(again)
    os.utime(agents, ns=(seen.st_atime_ns, seen.st_mtime_ns))
    assert "AGAIN" in cache.prompt(work, home)
    assert cache.prompt(work, home) == instructions_prompt(work, home)
    assert cache.lookups == 5


def test_a_kept_file_swapped_for_a_link_out_of_the_project_is_refused(
    project: tuple[Path, Path], tmp_path: Path
) -> None:
    work, home = project
    secret = tmp_path / "outside-secret"
    secret.write_text("SECRET-OUTSIDE-THE-PROJECT\n")
    cache = InstructionCache()
    assert "PROJECT-RULE" in cache.prompt(work, home)
    folder_times = os.stat(work)
    (work / "AGENTS.md").unlink()
    (work / "AGENTS.md").symlink_to(secret)
    # The attacker puts the folder's times back: the file's own mark still differs.
    os.utime(work, ns=(folder_times.st_atime_ns, folder_times.st_mtime_ns))
    text = cache.prompt(work, home)
    assert "SECRET-OUTSIDE" not in text and "PROJECT-RULE" not in text
    assert text == instructions_prompt(work, home)


def test_a_link_inside_the_project_is_followed_and_its_target_edits_are_seen(
    project: tuple[Path, Path],
) -> None:
    work, home = project
    (work / "docs").mkdir()
    (work / "docs" / "rules.md").write_text("LINKED-RULE\n")
    (work / "AGENTS.md").unlink()
    (work / "AGENTS.md").symlink_to("docs/rules.md")
    cache = InstructionCache()
    assert "LINKED-RULE" in cache.prompt(work, home)
    (work / "docs" / "rules.md").write_text("LINKED-RULE, edited through the link\n")
    assert "edited through the link" in cache.prompt(work, home)


# -- the child environment -------------------------------------------------------------


def test_the_environment_is_computed_once_per_model_until_it_changes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cache = EnvironmentCache()
    monkeypatch.setenv("OPENAI_API_KEY", "sk-first-key-0123456789")
    env, _bash = cache.environments("openai:gpt", bash_gets_credentials=False)
    assert env["OPENAI_API_KEY"] == "sk-first-key-0123456789"
    for _ in range(5):
        again, bash_env = cache.environments("openai:gpt", bash_gets_credentials=False)
        assert again == env and "OPENAI_API_KEY" not in bash_env
    assert cache.computed == 1
    again["MUTATED"] = "1"  # a caller's copy: what is kept does not change
    assert "MUTATED" not in cache.environments("openai:gpt", bash_gets_credentials=False)[0]
    cache.environments("openai:gpt", bash_gets_credentials=True)  # another key: computed
    assert cache.computed == 2
    monkeypatch.setenv("OPENAI_API_KEY", "sk-second-key-0123456789")  # set mid-run
    env, _bash = cache.environments("openai:gpt", bash_gets_credentials=False)
    assert env["OPENAI_API_KEY"] == "sk-second-key-0123456789"
    monkeypatch.delenv("OPENAI_API_KEY")
    env, _bash = cache.environments("openai:gpt", bash_gets_credentials=False)
    assert "OPENAI_API_KEY" not in env
    assert cache.computed == 4


# -- from real sub-agents --------------------------------------------------------------

CAPS = probe_sandbox()
needs_landlock = pytest.mark.skipif(
    not CAPS["landlock_scopes"], reason="needs Landlock ABI 6 (this project's CI has 7)"
)


@pytest.fixture
def served(model_server: ModelServer, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModelServer]:
    monkeypatch.setenv("OPENAI_BASE_URL", model_server.openai_base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-spec-caches-test-key")
    yield model_server


def _system_prompts(served: ModelServer) -> list[str]:
    """The system prompt of each first request of a run (a run's later ones repeat it)."""
    prompts = []
    for request in served.requests:
        messages = request.body["messages"]
        if sum(m["role"] == "tool" for m in messages) == 0:
            prompts.append(json.dumps(messages[0]))
    return prompts


@needs_landlock
async def test_an_agents_md_a_sub_agent_edits_reaches_the_next_sub_agent(
    spawned: SpawnRecorder, tmp_path: Path, served: ModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir()
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    (work / "AGENTS.md").write_text("RULE-ONE\n")
    editor = agent("editor", ["bash"])
    async with orchestrator(work, editor) as orch:
        served.responder = bash_script(["printf 'RULE-TWO, a longer rule\\n' > AGENTS.md"])
        first = await asyncio.wait_for(orch.delegate("editor", "edit"), 60)
        served.responder = bash_script(["echo done"])
        second = await asyncio.wait_for(orch.delegate("editor", "read"), 60)
        third = await asyncio.wait_for(orch.delegate("editor", "again"), 60)
        lookups = orch.runner.prepare.instructions.lookups
    assert [r.status for r in (first, second, third)] == [RunStatus.COMPLETED] * 3
    prompts = _system_prompts(served)
    assert len(prompts) == 3
    assert "RULE-ONE" in prompts[0] and "RULE-TWO" not in prompts[0]
    assert "RULE-TWO" in prompts[1] and "RULE-ONE" not in prompts[1]
    assert prompts[2] == prompts[1]
    assert lookups == 2  # the first, and the one after the edit: the third was kept


@needs_landlock
async def test_an_agents_md_a_sub_agent_swaps_for_a_link_out_never_reaches_the_next(
    spawned: SpawnRecorder, tmp_path: Path, served: ModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir()
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_rsa").write_text("SSH-PRIVATE-KEY-TEXT\n")
    monkeypatch.setenv("HOME", str(home))
    (work / "AGENTS.md").write_text("RULE-ONE\n")
    swap = (
        "T=$(stat -c %y .); rm AGENTS.md && ln -s "
        f'{home}/.ssh/id_rsa AGENTS.md && touch -d "$T" . && echo swapped'
    )
    attacker = agent("attacker", ["bash"])
    async with orchestrator(work, attacker) as orch:
        served.responder = bash_script([swap])
        first = await asyncio.wait_for(orch.delegate("attacker", "swap"), 60)
        served.responder = bash_script(["echo done"])
        second = await asyncio.wait_for(orch.delegate("attacker", "next"), 60)
    assert first.status is RunStatus.COMPLETED and "swapped" in first.text, first
    assert second.status is RunStatus.COMPLETED, second.error
    assert (work / "AGENTS.md").is_symlink()
    prompts = _system_prompts(served)
    assert "RULE-ONE" in prompts[0]
    assert "RULE-ONE" not in prompts[1]  # the kept text was not used
    sent = "\n".join(json.dumps(request.body) for request in served.requests)
    assert "SSH-PRIVATE-KEY-TEXT" not in sent
