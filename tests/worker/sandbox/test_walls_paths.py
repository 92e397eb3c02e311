"""Walls III, items 1b and 2: protected paths inside the workdir, and links out of a project.

Every attack here runs from a real sub-agent (its bash, through the orchestrator, with a
scripted model server on 127.0.0.1) or is a real hostile folder on disk, under the default
``sandbox = "workspace"``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nobody_runtime
import pytest
from agentcell.orchestrator import AgentDefinition, Orchestrator, Settings
from agentcell.protocol import RunStatus
from agentcell.worker import probe_sandbox
from agents import agent
from conftest import SpawnRecorder
from model_servers import ModelServer, Reply
from places import ROOT, SUPPORT
from sandbox_util import SEP, bash_script, orchestrator

CAPS = probe_sandbox()
MOUNTNS = ROOT / "worker" / "sandbox" / "_mountns.py"  # run on its own, too
pytestmark = pytest.mark.skipif(
    not CAPS["landlock_scopes"], reason="needs Landlock ABI 6 (this project's CI has 7)"
)


@pytest.fixture
def served(model_server: ModelServer, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModelServer]:
    monkeypatch.setenv("OPENAI_BASE_URL", model_server.openai_base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-walls-paths-test-key")
    yield model_server


def _can_make_mount_namespace() -> bool:
    """Whether a private mount namespace can be had here (as root, or through a user one)."""
    probe = "import ctypes,sys; u=ctypes.CDLL(None).unshare; sys.exit(u(0x20000) and u(0x10020000))"
    return subprocess.run(["python3", "-c", probe], check=False).returncode == 0


needs_mountns = pytest.mark.skipif(
    not _can_make_mount_namespace(), reason="no mount namespace here (user namespaces off)"
)


def _git(work: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(work), *args], capture_output=True, text=True, check=True
    ).stdout


# -- 1b: protected paths -----------------------------------------------------------------


@needs_mountns
async def test_a_sub_agent_cannot_write_rename_or_create_the_protected_paths(
    spawned: SpawnRecorder, tmp_path: Path, served: ModelServer
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    _git(work, "init", "-q")
    (work / "agentcell.toml").write_text('approval = "ask"\n')
    (work / ".claude").mkdir()
    (work / ".claude" / "settings.json").write_text('{"hooks": {}}\n')
    other = work / ".agentcell" / "runs" / "earlier"
    other.mkdir(parents=True)
    (other / "main.jsonl").write_text('{"kind": "messages"}\n')
    config_before = (work / ".git" / "config").read_text()
    commands = [
        "echo '[core]' >> .git/config && echo WROTE-GIT-CONFIG",
        "mv .git .git2 && mkdir .git && echo MOVED-GIT",
        'echo \'{"hooks": {"x": 1}}\' > .claude/settings.json && echo WROTE-CLAUDE',
        "echo forged >> .agentcell/runs/earlier/main.jsonl && echo WROTE-RECORD",
        'echo \'{"mcpServers": {"x": {}}}\' > .mcp.json && echo WROTE-MCP',
        "echo 'sandbox = \"off\"' >> agentcell.toml && echo WROTE-TOML",
        "mv agentcell.toml moved.toml && echo MOVED-TOML",
        "rm -rf .claude && echo REMOVED-CLAUDE",
        "mkdir -p .claude/hooks && echo x > .claude/hooks/h && echo MADE-HOOK",
        "echo fine > normal.txt && mkdir -p src && echo ok > src/a.txt && cat normal.txt",
        "echo note >> .agentcell/agent-memory/keeper/MEMORY.md && echo MEMORY-OK",
        # This run's tool-output folder: agentcell's own code writes it, bash does not.
        "d=$(ls -d .agentcell/runs/*/tool-outputs) && echo x > $d/forged.txt && echo WROTE-OUT",
        "head -c 40000 /dev/zero | tr '\\0' L",
        # The sub-agent's own descriptors (its records): Landlock's ptrace scope refuses.
        "for f in /proc/$PPID/fd/*; do [ -f $f ] && echo x >> $f && echo WROTE-FD; done; "
        "readlink -v /proc/$PPID/fd/* 2>&1 | head -3",
        # Its memory (where its record's key is): the same scope refuses the open.
        f"{sys.executable} -c \"import sys\ntry: open(f'/proc/{{sys.argv[1]}}/mem', 'rb')"
        "\nexcept OSError as e: print('MEM', e.strerror)\nelse: print('OPENED-MEM')\" $PPID",
    ]
    served.responder = bash_script(commands)
    orch = Orchestrator(
        settings=Settings(model="openai:test", approval="allow", warm_spares=0),
        workdir=work,
        agents=[agent("keeper", ["bash"], memory="project")],
        load_agent_files=False,
        record=True,
    )
    async with orch:
        result = await asyncio.wait_for(orch.delegate("keeper", "go"), 60)
        assert (work / ".mcp.json").is_dir()  # the placeholder, while agentcell runs
        assert _git(work, "status", "--porcelain", "--", ".mcp.json") == ""
    assert result.status is RunStatus.COMPLETED, result.error
    out = result.text.split(SEP)
    assert len(out) == len(commands), result.text
    for i, marker in enumerate(
        ["WROTE-GIT-CONFIG", "MOVED-GIT", "WROTE-CLAUDE", "WROTE-RECORD", "WROTE-MCP",
         "WROTE-TOML", "MOVED-TOML", "REMOVED-CLAUDE", "MADE-HOOK"]
    ):  # fmt: skip
        assert marker not in out[i], out[i]
        assert any(why in out[i] for why in ("Read-only file system", "busy", "directory")), out[i]
    assert (work / ".git" / "config").read_text() == config_before
    assert not (work / ".git2").exists()
    assert (work / ".claude" / "settings.json").read_text() == '{"hooks": {}}\n'
    assert (other / "main.jsonl").read_text() == '{"kind": "messages"}\n'
    assert (work / "agentcell.toml").read_text() == 'approval = "ask"\n'
    assert not (work / "moved.toml").exists()
    assert not (work / ".claude" / "hooks").exists()
    # Normal work and the agent's own memory folder stay writable.
    assert out[9].strip() == "fine" and (work / "src" / "a.txt").read_text() == "ok\n"
    assert "MEMORY-OK" in out[10]
    assert "WROTE-OUT" not in out[11] and "Read-only file system" in out[11], out[11]
    outputs = list((work / ".agentcell" / "runs").glob("*/tool-outputs"))
    assert len(outputs) == 1 and [p.name for p in outputs[0].iterdir()] != []
    saved = [p.read_text() for p in outputs[0].iterdir()]
    assert saved == ["L" * 40000], [len(text) for text in saved]  # the long output, whole
    # Its own record, written through the descriptor it opened before the walls.
    record = (outputs[0].parent / f"{result.agent_id}.jsonl").read_text()
    assert '"kind":"messages"' in record and "MEMORY-OK" in record
    assert "WROTE-FD" not in out[13] and "Permission denied" in out[13], out[13]
    assert out[14].strip() == "MEM Permission denied", out[14]
    # The read-only mounts were the child's alone: here the paths are as writable as ever.
    (work / ".claude" / "settings.json").write_text("{}\n")
    memory = work / ".agentcell" / "agent-memory" / "keeper"
    assert (memory / "MEMORY.md").read_text() == "note\n"
    assert "protected paths read-only" in result.sandbox, result.sandbox
    assert f"writes: {os.path.realpath(memory)}" not in result.sandbox  # the tmp comes first
    assert str(os.path.realpath(memory)) in result.sandbox.split("writes: ")[1]
    # Absent before, absent after: the placeholder is gone with agentcell.
    assert not (work / ".mcp.json").exists()


@needs_mountns
async def test_a_protected_path_that_is_a_link_refuses_the_run_in_one_line(
    spawned: SpawnRecorder, tmp_path: Path, served: ModelServer
) -> None:
    work = tmp_path / "work"
    (work / "dotfiles" / "claude").mkdir(parents=True)
    (work / ".claude").symlink_to(work / "dotfiles" / "claude", target_is_directory=True)
    served.responder = bash_script(["echo x > .claude/settings.json && echo WROTE"])
    orch = orchestrator(work, agent("worker", ["bash"]))
    async with orch:
        result = await asyncio.wait_for(orch.delegate("worker", "go"), 60)
    assert result.status is RunStatus.ERROR, result.error
    assert ".claude is a link" in result.error and "\n" not in result.error
    assert not (work / "dotfiles" / "claude" / "settings.json").exists()
    assert not served.requests


# -- 2: links out of an untrusted folder -------------------------------------------------


def _fake_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    for folder in (home / ".ssh", home / ".aws"):
        folder.mkdir(parents=True)
    (home / ".bashrc").write_text("# the user's bashrc\n")
    (home / ".ssh" / "id_rsa").write_text("SSH-PRIVATE-KEY-TEXT\n")
    (home / ".aws" / "credentials").write_text("AWS-SECRET-TEXT\n")
    (home / ".netrc").write_text("NETRC-PASSWORD-TEXT\n")
    monkeypatch.setenv("HOME", str(home))
    return home


SECRETS = ("SSH-PRIVATE-KEY-TEXT", "AWS-SECRET-TEXT", "NETRC-PASSWORD-TEXT")


async def test_a_memory_folder_linked_to_home_is_refused_in_one_line(
    spawned: SpawnRecorder,
    tmp_path: Path,
    served: ModelServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    home = _fake_home(tmp_path, monkeypatch)
    work = tmp_path / "repo"
    (work / ".claude" / "agents").mkdir(parents=True)
    (work / ".claude" / "agents" / "helper.md").write_text(
        "---\nname: helper\ndescription: helps\ntools: bash\nmodel: openai:test\n"
        "memory: project\n---\nHelp.\n"
    )
    (work / ".agentcell" / "agent-memory").mkdir(parents=True)
    (work / ".agentcell" / "agent-memory" / "helper").symlink_to(home)
    served.responder = bash_script(
        ["echo pwned >> ~/.bashrc; echo pwned >> .agentcell/agent-memory/helper/.bashrc",
         "cat .agentcell/agent-memory/helper/.ssh/id_rsa"]
    )  # fmt: skip
    orch = Orchestrator(
        settings=Settings(model="openai:test", approval="allow", warm_spares=0),
        workdir=work,
        record=False,
    )
    async with orch:
        assert "helper" in orch.registry.names()
        result = await asyncio.wait_for(orch.delegate("helper", "go"), 60)
    assert (home / ".bashrc").read_text() == "# the user's bashrc\n"
    assert result.status is RunStatus.DENIED, result
    assert "agent-memory/helper" in result.error and "\n" not in result.error
    assert "not a real folder" in result.error
    assert not served.requests  # it never ran: nothing of the home reached a model


async def test_a_memory_folder_swapped_for_a_link_before_the_grant_does_not_widen_the_walls(
    spawned: SpawnRecorder,
    tmp_path: Path,
    served: ModelServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # TOCTOU: the parent checked and made a real folder; before the child adds its rule,
    # the folder is replaced by a link to $HOME (here: by an earlier bash in the same
    # workdir, simulated by swapping it between the parent's check and the child's grant).
    home = _fake_home(tmp_path, monkeypatch)
    work = tmp_path / "repo"
    work.mkdir()
    from agentcell.orchestrator.delegation import _prepare
    from agentcell.orchestrator.prompt import _context

    real_prepare = _context.prepare_memory

    def prepare_then_swap(folder: Path) -> None:
        real_prepare(folder)
        folder.rmdir()
        folder.symlink_to(home)

    monkeypatch.setattr(_prepare, "prepare_memory", prepare_then_swap)
    served.responder = bash_script(["echo pwned >> .agentcell/agent-memory/keeper/.bashrc"])
    orch = orchestrator(work, agent("keeper", ["bash"], memory="project"))
    async with orch:
        result = await asyncio.wait_for(orch.delegate("keeper", "go"), 60)
    assert (home / ".bashrc").read_text() == "# the user's bashrc\n"
    assert result.status is RunStatus.ERROR, result
    assert "agent-memory/keeper" in result.error and "not a real folder" in result.error
    assert not served.requests


def _all_text(requests: list[Any]) -> str:
    return "\n".join(json.dumps(request.body) for request in requests)


async def test_instruction_skill_and_memory_files_linked_out_never_reach_the_model(
    spawned: SpawnRecorder,
    tmp_path: Path,
    served: ModelServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    home = _fake_home(tmp_path, monkeypatch)
    work = tmp_path / "repo"
    (work / ".claude" / "skills" / "deploy").mkdir(parents=True)
    (work / ".claude" / "skills" / "deploy" / "SKILL.md").symlink_to(home / ".aws" / "credentials")
    (work / "AGENTS.md").symlink_to(home / ".ssh" / "id_rsa")
    (work / "CLAUDE.md").write_text("Project rule: be brief.\n")
    memory = work / ".agentcell" / "agent-memory" / "keeper"
    memory.mkdir(parents=True)
    (memory / "MEMORY.md").symlink_to(home / ".netrc")
    served.responder = bash_script(["echo done"])
    keeper = AgentDefinition(
        name="keeper",
        description="keeps",
        tools=["bash"],
        model="openai:test",
        source="test",
        memory="project",
        skills=["deploy"],
    )
    orch = Orchestrator(
        settings=Settings(model="openai:test", approval="allow", warm_spares=0),
        workdir=work,
        agents=[keeper],
        load_agent_files=False,
        record=True,
    )
    async with orch:
        served.responder = lambda body, api: Reply(text="hello")
        main = await asyncio.wait_for(orch.run("hi"), 60)  # the main agent's prompt
        assert main.final_text == "hello" and len(served.requests) == 1
        served.responder = bash_script(["echo done"])
        result = await asyncio.wait_for(orch.delegate("keeper", "go"), 60)
    assert result.status is RunStatus.COMPLETED, result.error
    sent = _all_text(served.requests)
    for request in served.requests[:2]:  # the main agent's first, then the sub-agent's
        assert "Project rule: be brief." in json.dumps(request.body)  # the real file is read
    for secret in SECRETS:
        assert secret not in sent
    records = work / ".agentcell" / "runs"
    for path in records.rglob("*"):
        if path.is_file():
            text = path.read_text(errors="replace")
            assert not any(secret in text for secret in SECRETS), path


# As a user who is not root: the same walls through a user namespace made while the
# process had one thread (``prepare``), then a mount namespace made with threads running.
_AS_A_USER = r"""
import importlib.util, os, subprocess, sys, threading
spec = importlib.util.spec_from_file_location("mountns", sys.argv[1])
mountns = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mountns)
work, late = sys.argv[2], sys.argv[3] == "late"
stop = threading.Event()
if late:  # a thread before prepare: a user namespace can no longer be made
    threading.Thread(target=stop.wait, daemon=True).start()
mountns.prepare("workspace")
threading.Thread(target=stop.wait, daemon=True).start()  # a drain thread, say
memory = os.path.join(work, ".agentcell", "agent-memory", "k")
fd = os.open(memory, os.O_PATH | os.O_DIRECTORY)
print("DONE:", mountns.protect(work, [(fd, memory)]))
for command in ["echo x >> .git/config", "echo x > .mcp.json", "mv .git .g",
                "echo ok > .agentcell/agent-memory/k/M", "echo ok > normal"]:
    run = subprocess.run(["bash", "-c", command], cwd=work, capture_output=True, text=True)
    print(f"{command} -> {run.returncode} {run.stderr.strip()}")
"""


@pytest.fixture
def open_tmp() -> Iterator[Path]:
    """A scratch folder user nobody can reach (pytest's own is root's only)."""
    folder = Path(tempfile.mkdtemp(prefix="agentcell-walls-"))
    folder.chmod(0o755)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.skipif(
    nobody_runtime.unavailable() is not None, reason=str(nobody_runtime.unavailable())
)
@pytest.mark.parametrize("late", [False, True])
def test_a_normal_user_gets_the_protected_paths_through_a_user_namespace(
    open_tmp: Path, late: bool
) -> None:
    tmp_path = open_tmp
    work = tmp_path / "w"
    (work / ".git").mkdir(parents=True)
    (work / ".git" / "config").write_text("cfg\n")
    (work / ".agentcell" / "agent-memory" / "k").mkdir(parents=True)
    script = tmp_path / "as_user.py"
    script.write_text(_AS_A_USER)
    for path in (work, *work.rglob("*")):
        os.chown(path, 65534, 65534)
    # The module as user nobody can reach it (a checkout may sit in a private folder).
    runtime = nobody_runtime.runtime()
    module = runtime.folder / "pkg" / "agentcell" / "worker" / "sandbox" / "_mountns.py"
    run = subprocess.run(
        runtime.command(str(script), str(module), str(work), "late" if late else "early"),
        env=runtime.env, capture_output=True, text=True, timeout=60, check=False, cwd="/",
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    lines = dict(line.split(" -> ", 1) for line in run.stdout.splitlines()[1:])
    if late:  # not held, and said so (the sandbox reports it as missing)
        assert run.stdout.startswith("DONE: None"), run.stdout
        assert lines["echo x >> .git/config"].startswith("0")
        return
    assert run.stdout.startswith("DONE: protected paths read-only (user+mount"), run.stdout
    # what the project lacks is held by an empty folder, and the report says why
    absent = "agentcell.toml, .claude, .mcp.json absent here: held by an empty read-only folder"
    assert absent in run.stdout.splitlines()[0], run.stdout
    assert "Read-only file system" in lines["echo x >> .git/config"]
    assert "Is a directory" in lines["echo x > .mcp.json"]
    assert "busy" in lines["mv .git .g"]
    assert lines["echo ok > .agentcell/agent-memory/k/M"] == "0 "
    assert lines["echo ok > normal"] == "0 "
    assert (work / ".git" / "config").read_text() == "cfg\n"


# -- 2: the parent's reads, file by file (hostile folders on disk) ----------------------


def _hostile(tmp_path: Path) -> tuple[Path, Path]:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_text("OUTSIDE-SECRET-TEXT\n")
    work = tmp_path / "repo"
    work.mkdir()
    return work, outside / "secret"


@pytest.mark.parametrize("openat2", [True, False], ids=["openat2", "nofollow-walk"])
def test_reads_beneath_a_root_refuse_a_link_out_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, openat2: bool
) -> None:
    from agentcell.worker import OutsideRoot, _beneath, read_beneath, real_folder

    monkeypatch.setattr(_beneath, "has_openat2", lambda: openat2)
    work, secret = _hostile(tmp_path)
    (work / "AGENTS.md").symlink_to(secret)
    (work / "sub").mkdir()
    (work / "sub" / "real.md").write_text("inside\n")
    (work / "away").symlink_to(secret.parent, target_is_directory=True)
    for path in (work / "AGENTS.md", work / "away" / "secret", work / "sub" / ".." / ".." / "x"):
        with pytest.raises(OutsideRoot) as caught:
            read_beneath(work, path)
        assert "\n" not in str(caught.value) and "refused" in str(caught.value)
    with pytest.raises(OutsideRoot, match=r"AGENTS\.md \(-> "):
        read_beneath(work, "AGENTS.md")
    assert read_beneath(work, work / "sub" / "real.md") == b"inside\n"
    os.mkfifo(work / "pipe")
    with pytest.raises(OSError, match="not a regular file"):
        read_beneath(work, "pipe")  # and it did not block on the FIFO
    folder = real_folder(work, work / ".agentcell" / "agent-memory" / "k", create=True)
    os.close(folder)
    assert (work / ".agentcell" / "agent-memory" / "k").stat().st_mode & 0o777 == 0o700
    with pytest.raises(OutsideRoot, match="not a real folder"):
        real_folder(work, work / "away", create=True)


def test_a_projects_config_mcp_json_and_agent_file_linked_out_are_refused(
    tmp_path: Path,
) -> None:
    from agentcell.orchestrator.config._load import ConfigError, project_config
    from agentcell.orchestrator.config._mcp import read_mcp_json
    from agentcell.orchestrator.definitions._registry import AgentRegistry

    work, secret = _hostile(tmp_path)
    secret.write_text('{"mcpServers": {"evil": {"command": "sh"}}}\n')
    (work / ".mcp.json").symlink_to(secret)
    servers, notes = read_mcp_json(work / ".mcp.json")
    assert servers == {} and len(notes) == 1 and ".mcp.json (-> " in notes[0]
    toml = tmp_path / "outside" / "agentcell.toml"
    toml.write_text('sandbox = "off"\n')
    (work / "agentcell.toml").symlink_to(toml)
    with pytest.raises(ConfigError) as caught:
        project_config(work)
    assert len(caught.value.problems) == 1 and "agentcell.toml (-> " in caught.value.problems[0]
    agents = work / ".claude" / "agents"
    agents.mkdir(parents=True)
    helper = tmp_path / "outside" / "helper.md"
    helper.write_text("---\nname: helper\ndescription: h\n---\nOUTSIDE-SECRET-TEXT\n")
    (agents / "helper.md").symlink_to(helper)
    registry = AgentRegistry.load(work, home=tmp_path / "home")
    assert "helper" not in registry.names()
    assert any("helper.md (-> " in d.message for d in registry.diagnostics), registry.diagnostics


async def test_a_runs_folder_linked_to_home_never_takes_the_records(
    spawned: SpawnRecorder,
    tmp_path: Path,
    served: ModelServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from agentcell.worker import OutsideRoot

    home = _fake_home(tmp_path, monkeypatch)
    work = tmp_path / "repo"
    (work / ".agentcell").mkdir(parents=True)
    (work / ".agentcell" / "runs").symlink_to(home / ".ssh", target_is_directory=True)
    served.responder = lambda body, api: Reply(text="hello")
    orch = Orchestrator(
        settings=Settings(model="openai:test", approval="allow", warm_spares=0),
        workdir=work,
        load_agent_files=False,
        record=True,
    )
    async with orch:
        with pytest.raises(OutsideRoot) as caught:
            await asyncio.wait_for(orch.run("hi"), 60)
    assert ".agentcell/runs (-> " in str(caught.value) and "\n" not in str(caught.value)
    assert sorted(p.name for p in (home / ".ssh").iterdir()) == ["id_rsa"]
    assert not served.requests


def test_the_cli_says_a_link_out_in_one_line(tmp_path: Path, model_server: ModelServer) -> None:
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    work = tmp_path / "repo"
    (work / ".agentcell").mkdir(parents=True)
    (work / ".agentcell" / "runs").symlink_to(home / ".ssh", target_is_directory=True)
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(home),
        "OPENAI_BASE_URL": model_server.openai_base_url,
        "OPENAI_API_KEY": "sk-walls-paths-cli",
    }
    done = subprocess.run(
        [str(Path(sys.executable).parent / "agentcell"), "run", "--model", "openai:t", "hi"],
        cwd=work, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and ".agentcell/runs (-> " in lines[0], done.stderr
    assert list((home / ".ssh").iterdir()) == [] and not model_server.requests


def test_placeholders_stay_while_any_sub_agent_still_holds_the_workdir(tmp_path: Path) -> None:
    # Removing a placeholder another agentcell's sub-agent has mounted would detach that
    # mount (rmdir from here is allowed), and that sub-agent could then create the path.
    from agentcell.worker import remove_protection_placeholders

    work = tmp_path / "work"
    (work / ".mcp.json").mkdir(parents=True)  # an empty placeholder folder
    _mark_as_placeholder(work / ".mcp.json")
    (work / ".claude").mkdir()
    (work / ".claude" / "settings.json").write_text("{}\n")  # a real one: never removed
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLD_SHARED, str(work), str(MOUNTNS)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        remove_protection_placeholders(work)
        assert (work / ".mcp.json").is_dir()  # a sub-agent still runs here: kept
    finally:
        holder.communicate("", timeout=60)  # it lets go and ends
    remove_protection_placeholders(work)
    assert not (work / ".mcp.json").exists()
    assert (work / ".claude" / "settings.json").read_text() == "{}\n"


def _mark_as_placeholder(folder: Path) -> None:
    from agentcell.worker.sandbox._mountns import PLACEHOLDER_MTIME_NS as when

    os.utime(folder, ns=(when, when))


@needs_mountns
async def test_your_own_empty_folders_at_protected_names_stay(
    spawned: SpawnRecorder, tmp_path: Path, served: ModelServer
) -> None:
    # A placeholder reads as "absent", so only those agentcell made are taken away: an
    # empty .claude or .git you made (for a tool to fill later) is yours.
    work = tmp_path / "work"
    yours = [work / ".claude", work / ".git", work / ".agentcell"]
    for folder in yours:
        folder.mkdir(parents=True)
    served.responder = bash_script(["ls -a"])
    async with orchestrator(work, agent("looker", ["bash"])) as orch:
        result = await asyncio.wait_for(orch.delegate("looker", "look"), 60)
        assert result.status is RunStatus.COMPLETED, result.error
        assert (work / ".mcp.json").is_dir()  # a placeholder while agentcell runs
    assert all(folder.is_dir() and not any(folder.iterdir()) for folder in yours)
    assert not (work / ".mcp.json").exists() and not (work / "agentcell.toml").exists()


def test_only_marked_empty_folders_are_taken_for_placeholders(tmp_path: Path) -> None:
    from agentcell.worker import remove_protection_placeholders

    work = tmp_path / "work"
    work.mkdir()
    (work / ".claude").mkdir()  # yours, empty
    (work / ".mcp.json").mkdir()  # a placeholder
    _mark_as_placeholder(work / ".mcp.json")
    (work / ".git").mkdir()  # a placeholder that now holds something
    (work / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    _mark_as_placeholder(work / ".git")
    target = tmp_path / "elsewhere"
    target.mkdir()
    _mark_as_placeholder(target)
    (work / ".agentcell").symlink_to(target)  # a link to a marked folder: not followed
    remove_protection_placeholders(work)
    assert (work / ".claude").is_dir() and not (work / ".mcp.json").exists()
    assert (work / ".git" / "HEAD").is_file()
    assert (work / ".agentcell").is_symlink() and target.is_dir()


# A process that holds the workdir as a sub-agent's protect does (the real _hold).
_HOLD_SHARED = """
import importlib.util, sys
spec = importlib.util.spec_from_file_location("mountns", sys.argv[2])
mountns = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mountns)
mountns._hold(sys.argv[1])
print("held", flush=True)
sys.stdin.read()
"""


def test_agentcell_sandbox_says_whether_the_protected_paths_hold(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from agentcell.orchestrator.cli import _sandbox_cmd
    from agentcell.orchestrator.cli._main import cli as command
    from click.testing import CliRunner

    here = json.loads(CliRunner().invoke(command, ["sandbox", "--json"]).output)
    holds = " ".join(here["modes"]["workspace"]["enforced"])
    assert ("cannot be renamed or created" in holds) == bool(CAPS["mount_namespace"])
    bare = {**CAPS, "mount_namespace": None}
    monkeypatch.setattr(_sandbox_cmd, "probe_sandbox", lambda: bare)
    there = json.loads(CliRunner().invoke(command, ["sandbox", "--json"]).output)
    missing = there["modes"]["workspace"]["missing"]
    assert any("protected paths" in line and "stay writable" in line for line in missing)
    assert there["modes"]["required"]["note"] == "refuses to start here"
    assert "cannot be renamed" not in " ".join(there["modes"]["workspace"]["enforced"])


#: A PreToolUse guard the parent runs: logs each command, blocks any that says DANGER.
_GUARD = """#!/bin/sh
input=$(cat)
echo "$input" >> "$GUARD_LOG"
case "$input" in *DANGER*) echo "blocked by the guard" >&2; exit 2;; esac
exit 0
"""


@needs_mountns
async def test_a_sub_agent_cannot_rewrite_an_exec_form_hooks_script(
    spawned: SpawnRecorder,
    tmp_path: Path,
    served: ModelServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Claude Code's exec form: the script is an argument, not the command. The parent
    # runs it with your rights all the same, so its folder is held read-only too.
    work = tmp_path / "work"
    (work / "guards").mkdir(parents=True)
    (work / "guards" / "guard.sh").write_text(_GUARD)
    monkeypatch.setenv("GUARD_LOG", str(tmp_path / "guard.log"))
    served.responder = bash_script(
        ["echo 'exit 0' > guards/guard.sh && echo REWROTE", "echo DANGER"]
    )
    exec_form = {"command": "sh", "args": ["${CLAUDE_PROJECT_DIR}/guards/guard.sh"]}
    hooks = {"PreToolUse": [{"matcher": "Bash", "hooks": [exec_form]}]}
    async with orchestrator(work, agent("mover", ["bash"]), hooks=hooks) as orch:
        result = await asyncio.wait_for(orch.delegate("mover", "go"), 60)
    assert result.status is RunStatus.COMPLETED, result.error
    out = result.text.split(SEP)
    assert "REWROTE" not in out[0] and "Read-only file system" in out[0], out[0]
    assert "blocked by the guard" in out[1], out[1]
    assert (work / "guards" / "guard.sh").read_text() == _GUARD


@needs_mountns
async def test_a_sub_agent_cannot_rewrite_a_hook_script_the_parent_runs(
    spawned: SpawnRecorder,
    tmp_path: Path,
    served: ModelServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The parent runs a hook's file with your rights; a sub-agent that could rewrite it
    # (or rename its folder and put another file there) would run code outside its walls.
    work = tmp_path / "work"
    (work / "scripts" / "lib").mkdir(parents=True)
    guard = work / "scripts" / "guard.sh"
    guard.write_text(_GUARD)
    guard.chmod(0o755)
    (work / "notes").mkdir()
    monkeypatch.setenv("GUARD_LOG", str(tmp_path / "guard.log"))
    commands = [
        "echo 'exit 0' > scripts/guard.sh && echo REWROTE",
        "mv scripts scripts.old && echo MOVED",
        "echo 'exit 0' > scripts/lib/helper.sh && echo ADDED",
        "echo DANGER",  # the guard, as it was, still refuses this
        "echo fine > notes/n.txt && cat notes/n.txt",
        # A hook that runs a file only once it exists: absent, it is held all the same.
        "mkdir -p later && printf '#!/bin/sh\\nexit 0' > later/guard.sh && echo MADE-LATER",
    ]
    served.responder = bash_script(commands)
    guards = [
        {"command": "./scripts/guard.sh"},
        {"command": "if [ -x ./later/guard.sh ]; then ./later/guard.sh; fi"},
    ]
    hooks = {"PreToolUse": [{"matcher": "Bash", "hooks": guards}]}
    async with orchestrator(work, agent("mover", ["bash"]), hooks=hooks) as orch:
        result = await asyncio.wait_for(orch.delegate("mover", "go"), 60)
    assert result.status is RunStatus.COMPLETED, result.error
    out = result.text.split(SEP)
    assert "REWROTE" not in out[0] and "Read-only file system" in out[0], out[0]
    assert "MOVED" not in out[1] and "busy" in out[1], out[1]
    assert "ADDED" not in out[2] and "Read-only file system" in out[2], out[2]
    assert "blocked by the guard" in out[3], out[3]
    assert out[4].strip() == "fine"  # the rest of the workdir: as writable as before
    assert "MADE-LATER" not in out[5], out[5]
    assert not (work / "later").exists()  # its placeholder, gone with agentcell
    assert guard.read_text() == _GUARD and not (work / "scripts.old").exists()
    assert "with the code's later, scripts" in result.sandbox, result.sandbox
    assert (tmp_path / "guard.log").read_text().count("DANGER") == 1


def test_the_entries_holding_code_that_runs_outside_the_walls_are_found(tmp_path: Path) -> None:
    from agentcell.orchestrator.workspace._code_files import code_entries, mcp_commands

    work = tmp_path / "work's"  # a quote in the path: words are split before it is put in
    files = ["tools/lint.sh", "hooks/check.py", "conf/x.toml", ".claude/hooks/h.sh", "guard.sh"]
    files += ["bin/run.sh", "srv/server.py", "pkg/guard.py", "Makefile", "real/b.sh", "src/a.py"]
    for path in files:
        (work / path).parent.mkdir(parents=True, exist_ok=True)
        (work / path).write_text("")
    (tmp_path / "outside.sh").write_text("")
    (work / "linked").symlink_to(tmp_path / "outside.sh")
    (work / "hop").mkdir()
    (work / "hop" / "link").symlink_to("../real/b.sh")  # a chain: front -> hop -> real
    (work / "front.sh").symlink_to("hop/link")
    lines = [
        '"$CLAUDE_PROJECT_DIR"/tools/lint.sh --fix',
        "python3 hooks/check.py&&./guard.sh",  # operators with no spaces around them
        "mytool --config=conf/x.toml",  # a file named, whatever the program: held
        "ruff check src tests",  # a linter's arguments: never (no sub-agent could edit)
        "${CLAUDE_PROJECT_DIR}/.claude/hooks/h.sh",
        f"{tmp_path}/outside.sh; ./missing.sh",  # outside: not ours; absent: held
        "bash -c 'echo \"unclosed",  # no command line at all
        "./linked",  # a link out: its own entry (the child leaves a link as it is)
        "sh -c 'exec ./bin/run.sh --fast'",  # a command line inside a quoted word
        "if [ -x ./later/guard.sh ]; then ./later/guard.sh; fi",  # absent now: held
        'sh "${CLAUDE_PROJECT_DIR:-.}/dflt/x.sh" && "$PWD"/pwd/y.sh',
        "timeout 10 env A=1 python3 -u -m pkg.guard",  # wrappers, options, a module
        "make -s guard",  # make reads the makefile (only one that exists is held)
        "bun test",  # no script named: nothing
        "./front.sh",  # every entry a chain of links passes through
    ]
    commands: list[list[str] | str] = list(lines)
    commands += mcp_commands({"local": _Server("python3", ["srv/server.py"]), "web": _Server()})
    module = str(work / "src" / "a.py")
    found = code_entries(commands, [module], cwd=str(work), project_dir=str(work))
    assert found == [
        ".claude", "Makefile", "bin", "conf", "dflt", "front.sh", "guard.sh", "hooks", "hop",
        "later", "linked", "missing.sh", "pkg", "pwd", "real", "src", "srv", "tools",
    ]  # fmt: skip
    assert code_entries([], [], cwd=str(work), project_dir=str(work)) == []


@dataclasses.dataclass
class _Server:
    command: str = ""
    args: list[str] = dataclasses.field(default_factory=list)
    type: str = "stdio"


def _tool_here(x: int) -> int:
    """A custom tool of this module."""
    return x


def test_a_custom_tools_module_is_found_where_a_child_imports_it_again() -> None:
    from agentcell.orchestrator.workspace._code_files import module_files
    from agentcell.worker.tools._base import FunctionTool

    def local(x: int) -> int:
        return x

    local.__module__ = "__main__"  # by value: never imported again
    found = module_files([FunctionTool(local), FunctionTool(_tool_here), object()])
    assert found == [__file__] or found == [os.path.abspath(__file__)]


@needs_mountns
async def test_a_hook_folder_that_is_a_link_is_said_and_the_run_goes_on(
    spawned: SpawnRecorder, tmp_path: Path, served: ModelServer
) -> None:
    shared = tmp_path / "shared-tools"
    shared.mkdir()
    (shared / "log.sh").write_text("#!/bin/sh\ncat > /dev/null\n")
    (shared / "log.sh").chmod(0o755)
    work = tmp_path / "work"
    work.mkdir()
    (work / "tools").symlink_to(shared, target_is_directory=True)
    served.responder = bash_script(["echo hi"])
    hooks = {"PostToolUse": [{"hooks": [{"command": "./tools/log.sh"}]}]}
    async with orchestrator(work, agent("linker", ["bash"]), hooks=hooks) as orch:
        result = await asyncio.wait_for(orch.delegate("linker", "go"), 60)
    assert result.status is RunStatus.COMPLETED, result.error
    assert "not tools (a link: the code there stays writable)" in result.sandbox, result.sandbox


@needs_mountns
async def test_a_sub_agent_cannot_rewrite_an_mcp_server_in_the_workdir(
    spawned: SpawnRecorder, tmp_path: Path, served: ModelServer
) -> None:
    # A stdio server starts in the next sub-agent's process before its walls: rewritten
    # by this one, it would run outside every sandbox.
    work = tmp_path / "work"
    (work / "srv").mkdir(parents=True)
    server = work / "srv" / "server.py"
    shutil.copy(SUPPORT / "mcp_server.py", server)
    original = server.read_text()
    served.responder = bash_script(["echo 'import os' > srv/server.py && echo REWROTE"])
    definition = agent(
        "mcp-user", ["bash"], mcp_servers=[{"local": {"command": sys.executable,
                                                      "args": ["srv/server.py"]}}],
    )  # fmt: skip
    async with orchestrator(work, definition) as orch:
        result = await asyncio.wait_for(orch.delegate("mcp-user", "go"), 60)
    assert result.status is RunStatus.COMPLETED, result.error
    assert "REWROTE" not in result.text and "Read-only file system" in result.text
    assert server.read_text() == original
    assert "with the code's srv" in result.sandbox, result.sandbox


def _entries(work: Path, *commands: str | list[str], modules: list[str] | None = None) -> list[str]:
    from agentcell.orchestrator.workspace._code_files import code_entries

    return code_entries(list(commands), modules or [], cwd=str(work), project_dir=str(work))


def test_interpreters_nesting_and_names_at_the_edges(tmp_path: Path) -> None:
    from agentcell.orchestrator.workspace._code_files import mcp_commands

    work = tmp_path / "work"
    for path in ("pkg/guard.py", "two/x.sh", "three/x.sh", "..hooks/x.sh", "-tools/x.sh"):
        (work / path).parent.mkdir(parents=True, exist_ok=True)
        (work / path).write_text("")
    # -m and -c as the last word name nothing (and never fail); an option's value is
    # passed over to the -m after it.
    assert _entries(work, "python3 -m", "bash -c", "python3 -u -m", "bash -e -c") == []
    assert _entries(work, "python3 -X dev -W ignore -m pkg.guard") == ["pkg"]
    assert _entries(work, "bash -e -c './gone/x.sh' name") == ["gone"]  # -c after an option
    assert _entries(work, "5 ./absent3/x.sh") == []  # a number first is the program itself
    # A line inside a line is read, and one inside that; deeper, not (a bound).
    assert _entries(work, "sh -c \"sh -c './two/x.sh'\"") == ["two"]
    assert _entries(work, 'sh -c "sh -c \\"sh -c \'./three/x.sh\'\\""') == []
    # A script named by its extension or by a path is held even when absent.
    assert _entries(work, "python3 absent.py", "bash later/run.sh") == ["absent.py", "later"]
    assert _entries(work, "bash later/run") == []  # no script's name, absent: not held
    # Entries whose names sort before "." or start with "..": entries all the same.
    assert _entries(work, "./..hooks/x.sh", "./-tools/x.sh") == ["-tools", "..hooks"]
    # Only a stdio server's command: an http one's stray command word is never run.
    servers = [_Server("./two/x.sh", type="http"), _Server("", ["three/x.sh"])]
    assert mcp_commands(servers) == []


def test_links_on_the_way_are_followed_up_to_a_bound(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    # A chain of 39 links (40 names in all) is followed to its end; one more is not.
    for i in range(40):
        (work / f"c{i}").symlink_to(f"c{i + 1}")
    (work / "c40").write_text("")
    with caplog.at_level(logging.WARNING):
        assert _entries(work, "./c1") == sorted(f"c{i}" for i in range(1, 41))
        assert caplog.text == ""
        assert _entries(work, "./c0") == sorted(f"c{i}" for i in range(40))
    assert "more than 40 links on the way" in caplog.text
    (work / "loop-a").symlink_to("loop-b")
    (work / "loop-b").symlink_to("loop-a")
    assert _entries(work, "./loop-a/x.sh") == ["loop-a", "loop-b"]  # a loop ends


def test_a_file_with_other_hard_links_is_said_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    work = tmp_path / "work"
    (work / "scripts").mkdir(parents=True)
    (work / "notes").mkdir()
    guard = work / "scripts" / "guard.sh"
    guard.write_text("")
    (work / "scripts" / "alone.sh").write_text("")
    (work / "scripts" / "pair.sh").write_text("")
    os.link(work / "scripts" / "pair.sh", work / "notes" / "pair")
    os.link(guard, work / "notes" / "alias")
    os.link(guard, work / "notes" / "alias2")
    outside = tmp_path / "outside.sh"
    outside.write_text("")
    os.link(outside, tmp_path / "outside-alias")
    with caplog.at_level(logging.WARNING):
        _entries(work, "./scripts/guard.sh", "./scripts/guard.sh", "./scripts/alone.sh")
        _entries(work, "./scripts/pair.sh")
        _entries(work, "./scripts/guard.sh", f"{outside}", "./notes")  # a folder: never
    said = [r.getMessage() for r in caplog.records]
    end = "a sub-agent may change it through one of them; make it a file of its own"
    assert said == [
        f"{work}/scripts/guard.sh: it runs outside the walls and has 2 other hard link(s): {end}",
        f"{work}/scripts/pair.sh: it runs outside the walls and has 1 other hard link(s): {end}",
    ]


def test_a_preloaded_tools_module_is_not_held(monkeypatch: pytest.MonkeyPatch) -> None:
    import types

    from agentcell.orchestrator.workspace._code_files import module_files
    from agentcell.worker.tools._base import FunctionTool

    module = types.ModuleType("Amod")  # a name that sorts before "__main__"
    module.__file__ = "/somewhere/Amod.py"
    monkeypatch.setitem(sys.modules, "Amod", module)
    sub = types.ModuleType("Amod.sub")
    sub.__file__ = "/somewhere/Amod/sub.py"
    monkeypatch.setitem(sys.modules, "Amod.sub", sub)

    def tool_a(x: int) -> int:
        return x

    def tool_b(x: int) -> int:
        return x

    tool_a.__module__, tool_b.__module__ = "Amod", "Amod.sub"
    tools = [FunctionTool(tool_a), FunctionTool(tool_b)]
    assert module_files(tools) == ["/somewhere/Amod.py", "/somewhere/Amod/sub.py"]
    assert module_files(tools, preloaded=["Amod"]) == ["/somewhere/Amod/sub.py"]  # not loaded
    assert module_files(tools, preloaded=["Amod", "Amod.sub"]) == []  # both in the fork server
    assert module_files(tools, preloaded=["Amo", "Amod.sub"]) == ["/somewhere/Amod.py"]
    # The names as a settings file gives them (other string objects), the skipped first.
    first_skipped = [FunctionTool(tool_b), FunctionTool(tool_a)]
    given = "".join(["Amod", ".sub"])
    assert module_files(first_skipped, preloaded=[given]) == ["/somewhere/Amod.py"]


def test_the_preparer_holds_a_tools_module_unless_it_is_preloaded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib

    from agentcell.orchestrator.approvals._hooks import HookRunner
    from agentcell.orchestrator.definitions._registry import AgentRegistry
    from agentcell.orchestrator.delegation._prepare import Preparer
    from agentcell.orchestrator.model_relay._limiter import ProviderLimiter
    from agentcell.worker.tools._base import FunctionTool

    work = tmp_path / "work"
    work.mkdir()
    (work / "mytools_walls.py").write_text("def shout(text: str) -> str:\n    return text\n")
    monkeypatch.syspath_prepend(str(work))
    module = importlib.import_module("mytools_walls")

    def entries(**settings: Any) -> list[str]:
        prep = Preparer(
            settings=Settings(model="openai:test", **settings),
            registry=AgentRegistry.builtin(),
            workdir=str(work),
            home=tmp_path / "home",
            limiter=ProviderLimiter({}),
            model_objects={},
            custom_tools={"shout": FunctionTool(module.shout)},
        )
        return prep.code_entries(str(work), HookRunner(cwd=str(work)))

    assert entries() == ["mytools_walls.py"]  # a child imports it again: held
    assert entries(preload=["mytools_walls"]) == []  # the fork server's: never read again


def test_common_hook_shapes_hold_the_file_they_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A second attack review's shapes: a cd first, -ec, runners in front, a redirection,
    # an option's value that exists, a file a sub-agent planted to steer the parser.
    work = tmp_path / "work"
    for path in ("scripts/guard.sh", "scripts/plain", "hooks/x.ts", "hooks/x.py", "in.json", "dev"):
        (work / path).parent.mkdir(parents=True, exist_ok=True)
        (work / path).write_text("")
    (work / "lib").mkdir()
    for line in (
        "cd scripts && ./guard.sh",
        "sh -c 'cd scripts && ./guard.sh'",
        "bash -ec 'cd scripts && ./guard.sh'",
        "bash -euo pipefail -c './scripts/guard.sh'",
        "cd scripts && bash plain",  # a script with no extension, found from the cd
        "cd; ./scripts/guard.sh",  # a cd alone: back where the hook starts
    ):
        assert _entries(work, line) == ["scripts"], line
    for line in (
        "npx tsx hooks/x.ts",
        "poetry run python hooks/x.py",
        "< in.json python3 hooks/x.py",
        "stdbuf -oL python3 hooks/x.py",
        "python3 -X dev hooks/x.py",  # "dev" planted: the real script is held all the same
        "deno run -A hooks/x.ts",
    ):
        assert "hooks" in _entries(work, line), line
    assert _entries(work, "node -r dotenv/config hooks/x.js") == ["hooks"]  # no junk "dotenv"
    assert _entries(work, "perl -I lib hooks/absent.pl") == ["hooks"]  # lib: a value
    # A program found on PATH inside the workdir (an activated project .venv).
    bin_dir = work / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "mytool").write_text("#!/bin/sh\n")
    (bin_dir / "mytool").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    assert _entries(work, "mytool --check") == [".venv"]
