"""No capability for a sub-agent, whatever user runs agentcell (docs/security.md, "No
capability"): attacked from a real sub-agent's bash, from its MCP server and from the MCP
server the parent shares with it, as root and as user nobody, with and without
``network: true``.

Every privileged call is probed in a way that cannot take effect (``privilege_probe``):
EPERM without the capability, another error with it. The unit tests below show each
layer alone — the capability drop without the filter, the filter with every capability
— so that switching either off turns a test red.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nobody_runtime
import privilege_probe
import pytest
from agentcell.protocol import RunStatus
from agentcell.worker import probe_sandbox
from agentcell.worker.sandbox import _capabilities, _seccomp
from agents import agent
from forked import in_child
from model_servers import ModelServer
from places import SUPPORT
from sandbox_util import bash_script, orchestrator, served
from terminal_util import Screen

__all__ = ["served"]  # the fixture, shared with test_sandbox

CAPS = probe_sandbox()
pytestmark = pytest.mark.skipif(
    not CAPS["seccomp_refuses"], reason=f"no seccomp here: {CAPS['seccomp']}"
)
TESTS = SUPPORT  # the helpers
NONE = "0000000000000000"
PRIVILEGED_CALLS = ("reboot", "sethostname", "swapoff", "init_module", "adjtimex", "syslog")
REFUSED_SOCKETS = ("packet", "packet_dgram", "raw_icmp")


def _as_root(workdir: Path, mode: str) -> subprocess.Popen[str]:
    if os.geteuid() != 0:
        pytest.skip("needs root")
    env = {**os.environ, "PYTHONPATH": str(TESTS)}
    script = str(TESTS / "privilege_driver.py")
    return _start([sys.executable, script, str(workdir), mode], env)


def _as_nobody(mode: str) -> subprocess.Popen[str]:
    if (why := nobody_runtime.unavailable()) is not None:
        pytest.skip(why)
    runtime = nobody_runtime.runtime()
    script = str(runtime.folder / "tests" / "privilege_driver.py")
    env = {**runtime.env, "HOME": str(runtime.home())}
    return _start(runtime.command(script, str(runtime.home()), mode), env)


def _start(command: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        command, env=env, cwd="/", stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip


@contextlib.contextmanager
def _finished(driver: subprocess.Popen[str]) -> Iterator[dict[str, Any]]:
    """The driver's report; its whole process group ended, whatever happens."""
    try:
        out, err = driver.communicate(timeout=180)
        assert driver.returncode == 0, err[-4000:]
        yield json.loads(out)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(driver.pid, signal.SIGKILL)
        driver.wait()


def _assert_holds_nothing(probe: dict[str, Any], *, user: int, where: str) -> None:
    assert probe["uid"] == user, where
    # In a user namespace of its own, the same uid mapped alone (the machine's: 0 0 2^32-1).
    assert probe["uid_map"] == [str(user), str(user), "1"], (where, probe["uid_map"])
    assert probe["caps"] == dict.fromkeys(probe["caps"], NONE), (where, probe["caps"])
    assert set(probe["caps"]) >= {"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"}
    assert probe["parent_caps"] == dict.fromkeys(probe["parent_caps"], NONE), where
    assert probe["securebits"] == _capabilities.LOCKED_SECUREBITS, where
    assert probe["seccomp"] == "2", where
    for name in PRIVILEGED_CALLS:
        assert probe["calls"][name] == "EPERM", (where, name, probe["calls"])
    for name in REFUSED_SOCKETS:
        assert probe["sockets"][name] == "EPERM", (where, name, probe["sockets"])
    assert probe["sockets"]["netlink"] == "ok", where  # getifaddrs, ip: still work
    assert probe["sockets"]["icmp_dgram"] != "EPERM", where  # ping: its group decides
    assert probe["hostname"] == socket.gethostname(), where


@pytest.mark.parametrize("mode", ["walled", "network"])
@pytest.mark.parametrize("user", ["root", "nobody"])
def test_a_sub_agent_its_bash_its_mcp_server_and_warden_hold_no_capability(
    tmp_path: Path, user: str, mode: str
) -> None:
    driver = _as_root(tmp_path, mode) if user == "root" else _as_nobody(mode)
    with _finished(driver) as report:
        assert report["status"] == "completed", report
        assert "no capabilities" in report["sandbox"], report["sandbox"]
        assert not report["warnings"], report["warnings"]
        uid = 0 if user == "root" else nobody_runtime.NOBODY
        bash, mcp = json.loads(report["bash"]), json.loads(report["mcp"])
        _assert_holds_nothing(bash, user=uid, where="bash")
        _assert_holds_nothing(mcp, user=uid, where="mcp server (its parent: the warden)")
        # The server the parent holds and shares: its walled host gave it the same walls,
        # a private temp folder and, where cgroups can be written, a process cap.
        shared = json.loads(report["shared"])
        _assert_holds_nothing(shared, user=uid, where="shared mcp server (host: the warden)")
        assert Path(shared["tmpdir"]).name.startswith("agentcell-mcp-host-"), shared["tmpdir"]
        assert shared["pid"] not in (mcp["pid"], bash["pid"])
        if user == "root":
            assert "/agentcell/mcp-" in shared["cgroup"], shared["cgroup"]
        # A file of its own user with mode 000: root reads it with CAP_DAC_OVERRIDE.
        assert bash["locked_file"] == "EACCES", bash


# -- each layer alone, as root (as a normal user there is no capability to lose) -------------


def _in_child(*steps: Any, locked_file: str = "") -> dict[str, Any]:
    """``privilege_probe`` in a forked child of this (root) process, after ``steps``."""

    def probe() -> dict[str, Any]:
        for step in steps:
            step()
        return privilege_probe.probe(locked_file)

    answer = in_child(probe)
    assert "value" in answer, answer
    result: dict[str, Any] = answer["value"]
    return result


@pytest.fixture
def locked_file(tmp_path: Path) -> str:
    locked = tmp_path / "locked"
    locked.write_text("only a capability reads this\n")
    locked.chmod(0)
    return str(locked)


needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root: a normal user has none")


@needs_root
def test_the_drop_alone_takes_every_capability_root_had(locked_file: str) -> None:
    before = _in_child(locked_file=locked_file)
    assert before["caps"]["CapEff"] != NONE and before["locked_file"] == "ok"
    assert before["calls"]["reboot"] == "EINVAL"  # the capability held: the magic failed
    assert before["sockets"]["packet"] == "ok"
    after = _in_child(_capabilities.drop, locked_file=locked_file)
    assert after["caps"] == dict.fromkeys(after["caps"], NONE)
    assert after["securebits"] == _capabilities.LOCKED_SECUREBITS
    assert after["seccomp"] == "0"  # no filter: the capabilities alone refuse
    assert after["locked_file"] == "EACCES"
    # (init_module is left out: a kernel without modules says ENOSYS before it checks.)
    for name in ("reboot", "sethostname", "swapoff", "adjtimex"):
        assert after["calls"][name] == "EPERM", (name, after["calls"])
    assert after["sockets"]["packet"] == "EPERM" and after["sockets"]["raw_icmp"] == "EPERM"


@needs_root
def test_what_root_executes_after_lock_gains_no_capability(tmp_path: Path) -> None:
    # lock (before the MCP servers start) keeps the process's own sets for its set-up and
    # leaves nothing for what it executes: root's python comes up with none.
    script = f"import sys; sys.path.insert(0, {str(TESTS)!r}); import privilege_probe, json; "
    script += "print(json.dumps(privilege_probe.probe()))"

    def run_python() -> None:
        own = _capabilities.held()
        assert own["CapEff"] != 0 and own["CapBnd"] == 0, own
        os.execv(sys.executable, [sys.executable, "-c", script])

    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.dup2(write_end, 1)
            _capabilities.lock()
            run_python()
        finally:
            os._exit(1)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        probe = json.loads(pipe.read())
    os.waitpid(pid, 0)
    assert probe["caps"] == dict.fromkeys(probe["caps"], NONE), probe["caps"]
    assert probe["securebits"] == _capabilities.LOCKED_SECUREBITS
    assert probe["calls"]["reboot"] == "EPERM"


@needs_root
def test_the_filter_alone_refuses_what_every_capability_would_allow() -> None:
    ready = _seccomp.prepared()
    assert ready.process is not None and ready.bash is not None
    for layer in (ready.process, ready.bash):
        probe = _in_child(layer.install)
        assert probe["caps"]["CapEff"] != NONE  # every capability still held
        for name in PRIVILEGED_CALLS:
            assert probe["calls"][name] == "EPERM", (name, probe["calls"])
        for name in REFUSED_SOCKETS:
            assert probe["sockets"][name] == "EPERM", (name, probe["sockets"])
        assert probe["sockets"]["netlink"] == "ok"
        assert probe["sockets"]["icmp_dgram"] != "EPERM"
    assert probe["hostname"] == socket.gethostname()


# -- a workdir of another user: root gets what its mode bits give -------------------------------


@needs_root
async def test_root_over_another_users_workdir_gets_its_mode_bits_and_is_told(
    tmp_path: Path, served: ModelServer
) -> None:
    work = tmp_path / "theirs"
    work.mkdir()
    (work / "notes.txt").write_text("theirs\n")
    for path in (work, work / "notes.txt"):
        os.chown(path, nobody_runtime.NOBODY, nobody_runtime.NOBODY)
    work.chmod(0o755)
    served.responder = bash_script(["cat notes.txt; echo mine > mine.txt; echo rc=$?"])
    async with orchestrator(work, agent("worker", ["bash"])) as orch:
        result = await asyncio.wait_for(orch.delegate("worker", "go"), 60)
    assert result.status is RunStatus.COMPLETED, result
    assert "theirs" in result.text and "rc=1" in result.text, result.text  # r-x, no w
    assert "Permission denied" in result.text
    assert not (work / "mine.txt").exists()
    (note,) = [w for w in result.warnings if "owned by uid" in w]
    assert f"{work} is owned by uid {nobody_runtime.NOBODY}, not by uid 0" in note
    assert note.endswith("(r-x)"), note


# -- what agentcell sandbox says ----------------------------------------------------------


def _sandbox_command(cwd: Path, *args: str) -> str:
    agentcell = str(Path(sys.executable).with_name("agentcell"))
    run = subprocess.run(
        [agentcell, "sandbox", *args], cwd=cwd, capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, run.stderr
    return run.stdout


def test_agentcell_sandbox_lists_no_capability_the_refusals_and_no_model_connection(
    tmp_path: Path,
) -> None:
    text = _sandbox_command(tmp_path)
    assert "  capabilities:       none (in a user namespace of its own)" in text.splitlines()
    workspace = text.split("sandbox = 'workspace'")[1].split("sandbox = 'read-only'")[0]
    assert "capabilities: none (in a user namespace of its own), whatever user" in workspace
    assert "no model connection at all" in workspace
    assert "model endpoint's port" not in workspace.replace("reaches the model endpoint's", "")
    for name in ("reboot", "sethostname", "syslog", "mount", "socket(AF_PACKET)"):
        assert name in workspace, name
    assert "ICMP datagram sockets stay, so ping works" in workspace
    assert "MISSING" not in workspace
    assert "workdir:" not in text  # the folder is the running user's own
    report = json.loads(_sandbox_command(tmp_path, "--json"))
    assert report["machine"]["capabilities"].startswith("none")
    assert report["workdir_owner"] == ""


@needs_root
def test_agentcell_sandbox_says_when_the_workdir_is_another_users(tmp_path: Path) -> None:
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o750)
    theirs.chmod(0o750)
    os.chown(theirs, nobody_runtime.NOBODY, nobody_runtime.NOBODY)
    (line,) = [x for x in _sandbox_command(theirs).splitlines() if x.startswith("  workdir:")]
    assert line.endswith(
        f"the workdir {theirs} is owned by uid {nobody_runtime.NOBODY}, not by uid 0 that "
        "runs agentcell: sub-agents hold no capability, so they get what its mode bits "
        "give other users (---)"
    ), line


@needs_root
def test_agentcell_sandbox_on_a_terminal_and_through_head_shows_a_hostile_folder_inert(
    tmp_path: Path,
) -> None:
    # A folder of another user, named to clear the screen and paint a line.
    theirs = tmp_path / "x\x1b[2J\x1b[31mpainted\r"
    theirs.mkdir()
    os.chown(theirs, nobody_runtime.NOBODY, nobody_runtime.NOBODY)
    term = Screen(["sandbox"], theirs, {**os.environ, "HOME": str(tmp_path)}, cols=400)
    try:
        screen = term.expect("sandbox = 'required'")
        assert term.close() == 0
    finally:
        term.kill()
    lines = screen.splitlines()
    assert lines[0] == "This machine:"  # nothing cleared the screen
    (line,) = [x for x in lines if x.startswith("  workdir:")]
    assert "x\\e[2J\\e[31mpainted\\r is owned by uid 65534" in line, line
    assert not any(cell.fg == "red" for row in term.screen.buffer.values() for cell in row.values())
    # | head -3: the reader leaves early; the command ends quietly.
    agentcell = str(Path(sys.executable).with_name("agentcell"))
    shell = f"{shlex.quote(agentcell)} sandbox | head -3"
    done = subprocess.run(
        ["sh", "-c", shell], cwd=theirs, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0 and done.stdout.splitlines()[0] == "This machine:"
    assert "Traceback" not in done.stderr and "Broken pipe" not in done.stderr, done.stderr
