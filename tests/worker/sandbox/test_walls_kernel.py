"""The walls Landlock does not give, attacked from a real sub-agent's bash: the user's
terminal, the kernel keyring, pathname UNIX sockets and the system calls the seccomp
filter refuses (docs/security.md, "The terminal and the second wall").

Every run uses the default ``workspace`` sandbox, a real model client talking to a local
model server, and commands a hostile model would send.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import json
import os
import platform
import pty
import re
import select
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import nobody_runtime
import pytest
import thread_attack_tools
from agentcell.orchestrator import Orchestrator, Settings
from agentcell.orchestrator.cli._sandbox_cmd import describe
from agentcell.protocol import RunStatus
from agentcell.worker import probe_sandbox
from agentcell.worker.sandbox import _seccomp
from agents import agent
from conftest import SpawnRecorder
from model_servers import Call, ModelServer, Reply
from places import SUPPORT
from sandbox_util import SEP, bash_script, orchestrator, served

__all__ = ["served"]  # the fixture, shared with test_sandbox

CAPS = probe_sandbox()
pytestmark = [
    pytest.mark.skipif(
        not CAPS["landlock_scopes"], reason="needs Landlock ABI 6 (this project's CI has 7)"
    ),
    pytest.mark.skipif(not CAPS["seccomp_refuses"], reason=f"no seccomp here: {CAPS['seccomp']}"),
]
SCRIPT = SUPPORT / "walls_kernel_script.py"
MCP_SERVER = SUPPORT / "walls_kernel_mcp.py"

# -- the kernel keyring ----------------------------------------------------------------

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_NR = {
    "x86_64": {"add_key": 248, "keyctl": 250},
    "aarch64": {"add_key": 217, "keyctl": 219},
}.get(platform.machine(), {})
_KEY_SPEC_USER_KEYRING = -4
_KEYCTL_SETPERM, _KEYCTL_READ, _KEYCTL_INVALIDATE = 5, 11, 21
# Possessor: everything; the user (any process of this uid): view, read, search.
_KEY_PERM = 0x3F000000 | 0x000B0000


@pytest.fixture
def user_key() -> Iterator[tuple[int, bytes]]:
    """A key in this user's keyring that any process of the user may read (removed after)."""
    if not _NR:
        pytest.skip(f"no keyring system call numbers for {platform.machine()}")
    secret = f"keyring-secret-{uuid.uuid4().hex}".encode()
    description = f"agentcell-test-{uuid.uuid4().hex}".encode()
    key = _libc.syscall(
        _NR["add_key"],
        b"user",
        description,
        secret,
        ctypes.c_size_t(len(secret)),
        ctypes.c_long(_KEY_SPEC_USER_KEYRING),
    )
    if key < 0:
        pytest.skip(f"no kernel keyring here: {os.strerror(ctypes.get_errno())}")
    try:
        assert _libc.syscall(_NR["keyctl"], _KEYCTL_SETPERM, ctypes.c_long(key), _KEY_PERM) == 0
        yield key, secret
    finally:
        _libc.syscall(_NR["keyctl"], _KEYCTL_INVALIDATE, ctypes.c_long(key))


# Run by bash's python3. argv: key id, stream socket path, datagram socket path.
_KERNEL_ATTACK = r"""
import ctypes, errno, os, platform, socket, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
NR = {
    "x86_64": dict(keyctl=250, request_key=249, ptrace=101, process_vm_readv=310, bpf=321,
                   io_uring_setup=425, perf_event_open=298, userfaultfd=323),
    "aarch64": dict(keyctl=219, request_key=218, ptrace=117, process_vm_readv=270, bpf=280,
                    io_uring_setup=425, perf_event_open=241, userfaultfd=282),
}[platform.machine()]
L = ctypes.c_long

def call(name, *args):
    ctypes.set_errno(0)
    result = libc.syscall(NR[name], *args)
    code = ctypes.get_errno()
    print(name, "ok" if result >= 0 else errno.errorcode.get(code, code))
    return result

key, stream_path, dgram_path = int(sys.argv[1]), sys.argv[2], sys.argv[3]
buf = ctypes.create_string_buffer(256)
if call("keyctl", 11, L(key), buf, L(256)) > 0:  # KEYCTL_READ
    print("KEY", buf.value.decode())
call("request_key", b"user", b"anything", None, L(0))

# ptrace a child of its own (Landlock's scope allows that much), read its own memory.
child = os.fork()
if child == 0:
    os.read(os.pipe()[0], 1)
    os._exit(0)
call("ptrace", L(16), L(child), None, None)  # PTRACE_ATTACH
os.kill(child, 9)
os.waitpid(child, 0)
class Iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]
source, target = ctypes.create_string_buffer(b"memory", 8), ctypes.create_string_buffer(8)
local, remote = Iovec(ctypes.addressof(target), 8), Iovec(ctypes.addressof(source), 8)
me = L(os.getpid())
call("process_vm_readv", me, ctypes.byref(local), L(1), ctypes.byref(remote), L(1), L(0))
attr = ctypes.create_string_buffer(128)
ctypes.memmove(attr, (ctypes.c_uint32 * 4)(2, 4, 4, 1), 16)  # an array map, 1 entry
call("bpf", L(0), attr, L(128))  # BPF_MAP_CREATE
call("io_uring_setup", L(1), ctypes.create_string_buffer(120))
perf = ctypes.create_string_buffer(128)
ctypes.memmove(perf, (ctypes.c_uint32 * 2)(1, 128), 8)  # PERF_TYPE_SOFTWARE, size
call("perf_event_open", perf, L(0), L(-1), L(-1), L(0))
call("userfaultfd", L(0o2000000))  # O_CLOEXEC

a, b = socket.socketpair()  # talks to no one else: still allowed
a.send(b"x")
print("socketpair", b.recv(1).decode())
for label, kind, path in (
    ("unix-stream", socket.SOCK_STREAM, stream_path),
    ("unix-dgram", socket.SOCK_DGRAM, dgram_path),
):
    try:
        s = socket.socket(socket.AF_UNIX, kind)
        s.connect(path)
        s.send(b"LEAKED")
        print(label, "SENT")
    except OSError as exc:
        print(label, errno.errorcode.get(exc.errno, exc.errno))
"""


@contextlib.contextmanager
def unix_servers(folder: Path) -> Iterator[tuple[socket.socket, socket.socket]]:
    """Another local service's sockets: a stream listener and a datagram socket."""
    stream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dgram = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        stream.bind(str(folder / "service.sock"))
        stream.listen(8)
        stream.setblocking(False)
        dgram.bind(str(folder / "service.dgram"))
        dgram.setblocking(False)
        yield stream, dgram
    finally:
        stream.close()
        dgram.close()


def assert_nothing_arrived(stream: socket.socket, dgram: socket.socket) -> None:
    # The run is over: a connection made would wait in the backlog, a datagram in the queue.
    with pytest.raises(BlockingIOError):
        stream.accept()[0].close()
    with pytest.raises(BlockingIOError):
        dgram.recv(100)


async def _attack(work: Path, served: ModelServer, key: int, sockets: Path, **settings: object):
    (work / "attack.py").write_text(_KERNEL_ATTACK)
    command = f"python3 attack.py {key} {sockets / 'service.sock'} {sockets / 'service.dgram'}"
    served.responder = bash_script([command])
    orch = orchestrator(work, agent("worker", ["bash"]), **settings)
    async with orch:
        result = await asyncio.wait_for(orch.delegate("worker", "go"), 60)
    assert result.status is RunStatus.COMPLETED, result
    return result, dict(line.split(" ", 1) for line in result.text.split(SEP)[0].splitlines())


_REFUSED = (
    "keyctl",
    "request_key",
    "ptrace",
    "process_vm_readv",
    "bpf",
    "io_uring_setup",
    "perf_event_open",
    "userfaultfd",
)


async def test_bash_can_reach_no_keyring_no_unix_socket_and_no_refused_system_call(
    spawned: SpawnRecorder, tmp_path: Path, served: ModelServer, user_key: tuple[int, bytes]
) -> None:
    key, secret = user_key
    # The key is really readable by another process of this user, outside the walls.
    probe = f"import ctypes; print(ctypes.CDLL(None).syscall({_NR['keyctl']}, 11, {key}, 0, 0))"
    control = await asyncio.to_thread(subprocess.check_output, [sys.executable, "-c", probe])
    assert int(control) == len(secret)
    work, sockets = tmp_path / "work", tmp_path / "service"
    work.mkdir()
    sockets.mkdir()
    with unix_servers(sockets) as (stream, dgram):
        result, seen = await _attack(work, served, key, sockets)
        assert_nothing_arrived(stream, dgram)
    assert secret.decode() not in result.text and "KEY" not in seen, result.text
    for name in _REFUSED:
        assert seen[name] == "EPERM", (name, result.text)
    assert seen["socketpair"] == "x"
    assert seen["unix-stream"] == "EPERM" and seen["unix-dgram"] == "EPERM", result.text
    assert "seccomp, bash no unix sockets" in result.sandbox, result.sandbox


async def test_network_true_relaxes_unix_sockets_and_nothing_else(
    spawned: SpawnRecorder, tmp_path: Path, served: ModelServer, user_key: tuple[int, bytes]
) -> None:
    key, secret = user_key
    work, sockets = tmp_path / "work", tmp_path / "service"
    work.mkdir()
    sockets.mkdir()
    with unix_servers(sockets) as (stream, dgram):
        result, seen = await _attack(work, served, key, sockets, network=True)
        stream.accept()[0].close()  # the run asked for the network: it connected
        assert dgram.recv(100) == b"LEAKED"
    assert seen["unix-stream"] == "SENT" and seen["unix-dgram"] == "SENT", result.text
    # The sub-agent process's own filter is inherited by bash: the rest stays refused.
    assert secret.decode() not in result.text
    for name in _REFUSED:
        assert seen[name] == "EPERM", (name, result.text)
    assert "bash network, seccomp" in result.sandbox, result.sandbox
    assert "unix sockets" not in result.sandbox


# -- the user's terminal -------------------------------------------------------------------

# Run by bash's python3: find the terminal an ancestor runs on, open it every way there
# is, write a clipboard escape (OSC 52) to whatever opened, push input with TIOCSTI.
_TTY_ATTACK = r"""
import base64, errno, fcntl, os, stat, termios
def name(exc):
    return errno.errorcode.get(exc.errno, str(exc.errno))
ttys, pid = {}, os.getpid()
while pid > 1:
    try:
        fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    except OSError:
        break
    if int(fields[4]):
        ttys.setdefault(int(fields[4]), pid)
    pid = int(fields[1])
print("ttys", len(ttys))
opened = []
def try_open(path):
    try:
        opened.append(os.open(path, os.O_RDWR | os.O_NOCTTY))
        print("OPENED", path)
    except OSError as exc:
        print("open", path, name(exc))
try_open("/dev/tty")
for tty_nr, owner in ttys.items():
    major, minor = (tty_nr >> 8) & 0xFFF, (tty_nr & 0xFF) | ((tty_nr >> 12) & 0xFFF00)
    if 136 <= major < 144:
        try_open(f"/dev/pts/{minor + (major - 136) * 256}")
    try_open(f"/proc/{owner}/fd/0")
    try:  # as root: a device node of the same numbers, made where it may write
        os.mknod(f"node{minor}", 0o600 | stat.S_IFCHR, os.makedev(major, minor))
        try_open(f"node{minor}")
    except OSError as exc:
        print("mknod", name(exc))
osc = chr(27) + "]52;c;" + base64.b64encode(b"agentcell-pwned").decode() + chr(7)
for fd in opened:
    os.write(fd, osc.encode())
for fd in [0, 1, 2, *opened]:
    for request, label in ((termios.TIOCSTI, "tiocsti"), (0x541C, "tioclinux")):
        try:
            fcntl.ioctl(fd, request, b"\x02")
            print(label, fd, "ok")
        except OSError as exc:
            print(label, fd, name(exc))
"""


class _Terminal:
    """The test's own pseudo-terminal, with the orchestrator script as its session leader."""

    def __init__(self, work: Path, out: Path, env: dict[str, str]) -> None:
        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # the orchestrator, on the terminal under test
            os.chdir(work)
            os.execve(sys.executable, [sys.executable, str(SCRIPT), str(work), str(out)], env)
        self.output = bytearray()
        self.code: int | None = None

    def pump(self, timeout: float) -> None:
        """Read what reached the terminal (its master side) for up to ``timeout``."""
        ready, _, _ = select.select([self.fd], [], [], timeout)
        if ready:
            with contextlib.suppress(OSError):
                self.output += os.read(self.fd, 65536)

    def exited(self) -> bool:
        pid, status = os.waitpid(self.pid, os.WNOHANG)
        if pid:
            self.code = os.waitstatus_to_exitcode(status)
        return self.code is not None

    def close(self) -> None:
        if self.code is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
        os.close(self.fd)


def _stdio_of(pid: int) -> list[str]:
    return [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in (0, 1, 2)]


def test_a_sub_agent_cannot_reach_the_terminal_it_was_started_from(
    tmp_path: Path, model_server: ModelServer
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "tty_attack.py").write_text(_TTY_ATTACK)
    model_server.responder = bash_script(
        [
            # Hold the sub-agent here while the test looks at its descriptors.
            "echo $PPID > child.pid && until [ -e go ]; do sleep 0.05; done && echo released",
            "python3 tty_attack.py",
        ],
        timeout_s=60,
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "AGENTCELL_"))}
    env.update(
        OPENAI_BASE_URL=model_server.openai_base_url,
        OPENAI_API_KEY="sk-walls-kernel-test",
        AGENTCELL_BLOCK_REAL_MODELS="1",
        TERM="xterm",
    )
    out = tmp_path / "result.json"
    terminal = _Terminal(work, out, env)
    stdio: list[str] | None = None
    deadline = time.monotonic() + 120  # a safety net only: every wait is on a condition
    try:
        while not terminal.exited():
            assert time.monotonic() < deadline, terminal.output.decode(errors="replace")
            terminal.pump(0.1)
            if stdio is None and (work / "child.pid").exists():
                text = (work / "child.pid").read_text().strip()
                if text:
                    stdio = _stdio_of(int(text))
                    (work / "go").touch()
        terminal.pump(0)
    finally:
        terminal.close()
    assert terminal.code == 0, terminal.output.decode(errors="replace")
    report = json.loads(out.read_text())
    assert report["status"] == "completed", report
    # Without a run folder the child's output goes nowhere; never to the terminal.
    assert stdio is not None
    assert not [path for path in stdio if path.startswith(("/dev/pts", "/dev/tty"))], stdio
    lines = report["text"].split(SEP)[1].splitlines()
    assert lines[0] != "ttys 0", lines  # the attack found the terminal it was after
    assert not [line for line in lines if line.startswith("OPENED")], lines
    # No device node can be made where it may write (root could otherwise make one).
    made = [line for line in lines if line.startswith(("mknod", "open node"))]
    assert made == ["mknod EACCES" if os.geteuid() == 0 else "mknod EPERM"], lines
    ioctls = [line for line in lines if line.startswith(("tiocsti", "tioclinux"))]
    assert len(ioctls) == 6 and all(line.endswith(" EPERM") for line in ioctls), lines
    assert b"52;c;" not in terminal.output and b"agentcell-pwned" not in terminal.output


def test_agentcell_sandbox_reports_the_filter_and_what_it_refuses() -> None:
    report = describe(CAPS)
    enforced = "\n".join(report["modes"]["workspace"]["enforced"])
    assert "seccomp" in enforced and "keyctl" in enforced and "TIOCSTI" in enforced
    assert "socket(AF_UNIX)" in enforced
    assert CAPS["seccomp"] == "filter"
    assert {"keyctl", "ptrace", "io_uring_setup", "ioctl TIOCSTI"} <= set(CAPS["seccomp_refuses"])
    assert "socket(AF_UNIX)" not in CAPS["seccomp_refuses"]
    assert "socket(AF_UNIX)" in CAPS["seccomp_bash_refuses"]
    assert not [line for line in report["modes"]["workspace"]["missing"] if "seccomp" in line]


async def test_an_mcp_server_started_before_the_walls_runs_under_the_filter(
    spawned: SpawnRecorder, tmp_path: Path, served: ModelServer
) -> None:
    server = {"command": sys.executable, "args": [str(MCP_SERVER)]}
    served.responder = lambda body, api: (
        Reply(text=[m for m in body["messages"] if m["role"] == "tool"][0]["content"])
        if any(m["role"] == "tool" for m in body["messages"])
        else Reply(tool_calls=[Call("mcp__walls__walls", {})])
    )
    worker = agent("worker", ["mcp__walls__*"], mcp_servers=[{"walls": server}])
    async with orchestrator(tmp_path, worker) as orch:
        result = await asyncio.wait_for(orch.delegate("worker", "go"), 60)
    assert result.status is RunStatus.COMPLETED, result
    assert result.text == "seccomp 2 tiocsti EPERM", result.text


def _seccomp_mode(pid: int, tid: str) -> str:
    status = Path(f"/proc/{pid}/task/{tid}/status").read_text()
    return next(line.split(":")[1].strip() for line in status.splitlines() if "Seccomp:" in line)


async def test_every_thread_of_the_sub_agent_is_under_the_filter(
    spawned: SpawnRecorder, tmp_path: Path, served: ModelServer
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    hold = "echo $PPID > child.pid && until [ -e go ]; do sleep 0.05; done && echo released"
    served.responder = bash_script([hold], timeout_s=60)
    orch = Orchestrator(
        settings=Settings(model="openai:test", approval="allow", max_workers=1, warm_spares=0),
        workdir=work,
        agents=[agent("worker", ["bash"])],
        load_agent_files=False,
        record=True,  # a run folder: the child's output-drain thread
    )
    marker = work / "child.pid"
    async with orch:
        run = asyncio.create_task(orch.delegate("worker", "go"))
        while not (marker.exists() and marker.read_text().strip()):
            assert not run.done(), run.result()
            await asyncio.sleep(0.05)  # polls a condition (the file), no timing assumed
        pid = int(marker.read_text())
        modes = {tid: _seccomp_mode(pid, tid) for tid in os.listdir(f"/proc/{pid}/task")}
        (work / "go").touch()
        result = await asyncio.wait_for(run, 60)
    assert result.status is RunStatus.COMPLETED, result
    assert len(modes) >= 2, modes  # the drain thread too
    assert set(modes.values()) == {"2"}, modes  # SECCOMP_MODE_FILTER on every one


async def test_code_in_the_sub_agent_cannot_read_past_landlock_through_its_drain_thread(
    spawned: SpawnRecorder, tmp_path: Path, served: ModelServer
) -> None:
    # Landlock covers the thread that restricts itself and the threads it starts later,
    # not those already running: the output-drain thread must start behind the walls.
    # The tool (run in the child) hijacks os.read, which that thread calls, and has it
    # open a file outside them.
    work, secret = thread_attack_tools.workdir_and_outside_secret(tmp_path)
    served.add(Reply(tool_calls=[Call("drain_read", {"path": str(secret)})]), "done")
    # A run folder: the child captures its output through the drain thread.
    definition = agent("worker", ["drain_read"])
    orch = thread_attack_tools.one_worker(
        work, definition, thread_attack_tools.drain_read, record=True
    )
    async with orch:
        result = await asyncio.wait_for(orch.delegate("worker", "go"), 60)
    assert result.status is RunStatus.COMPLETED, result
    tool_output = next(
        m["content"] for m in served.requests[-1].body["messages"] if m["role"] == "tool"
    )
    assert json.loads(tool_output) == {"refused": "Permission denied"}, tool_output


def test_where_seccomp_is_missing_it_is_said_and_required_refuses(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from agentcell.worker.sandbox import _apply as _sandbox

    bare = {**CAPS, "seccomp": "not available: no seccomp", "seccomp_refuses": []}
    bare["seccomp_bash_refuses"] = []
    report = describe(bare)
    assert not [line for line in report["modes"]["workspace"]["enforced"] if "seccomp" in line]
    assert [line for line in report["modes"]["workspace"]["missing"] if "seccomp" in line]
    assert report["modes"]["required"]["note"] == "refuses to start here"
    # The child side: nothing installed, and the result's sandbox field says so.
    monkeypatch.setattr(_seccomp, "unavailable", lambda: "the kernel has no seccomp")
    box = _sandbox.Sandbox("workspace")
    _sandbox._install_seccomp(box, bash_unix_sockets=False)
    assert not box.seccomp and box.bash_preexec() is None
    assert box.report().endswith("missing: seccomp filter (the kernel has no seccomp)")


_THREADS_SCRIPT = """
import asyncio, ctypes, sys, threading
from agentcell.worker.sandbox import _one_thread

def native_thread(microseconds):
    # A thread Python never knew (a library's, or one whose Python side has ended):
    # it sleeps, then ends by itself.
    libc = ctypes.CDLL(None)
    tid = ctypes.c_ulong()
    sleep = ctypes.cast(libc.usleep, ctypes.c_void_p)
    assert libc.pthread_create(ctypes.byref(tid), None, sleep, ctypes.c_void_p(microseconds)) == 0

async def main(case):
    loop = asyncio.get_running_loop()
    gate = threading.Event()
    if case == "executor":
        await loop.run_in_executor(None, lambda: None)  # a pool thread, idle now
    elif case == "native-ending":
        native_thread(300_000)
    elif case == "native-staying":
        _one_thread.THREAD_EXIT_WAIT_S = 0.3
        native_thread(60_000_000)
    else:  # a thread Python runs is refused at once, never waited for
        _one_thread.THREAD_EXIT_WAIT_S = 600
        threading.Thread(target=gate.wait, name="lingering", daemon=True).start()
    try:
        _one_thread.before_the_walls()
    except OSError as exc:
        print("refused:", exc)
        gate.set()
        return
    names = await loop.run_in_executor(None, lambda: threading.current_thread().name)
    print("ok", len(threading.enumerate()), names)

asyncio.run(main(sys.argv[1]))
"""


_THREAD_REFUSED = "refused: [Errno 16] 1 other thread(s) already run in this process"


@pytest.mark.parametrize(
    ("user", "case", "said"),
    [
        ("this user", "executor", "ok 2 asyncio-walled_0"),  # the old pool ended; a new one
        ("this user", "other", _THREAD_REFUSED),
        # Waited for until it has left (OpenTelemetry's detectors' pool, joined but still
        # listed a moment, refused a sub-agent at random on a loaded machine).
        ("this user", "native-ending", "ok 2 asyncio_0"),
        ("this user", "native-staying", _THREAD_REFUSED),
        # A normal user's sub-agent counts its threads the same way.
        ("nobody", "other", _THREAD_REFUSED),
        ("nobody", "native-ending", "ok 2 asyncio_0"),
    ],
)
def test_before_the_walls_the_executor_is_replaced_and_any_other_thread_refuses(
    user: str, case: str, said: str
) -> None:
    command, env = [sys.executable, "-c", _THREADS_SCRIPT, case], None
    if user == "nobody":
        if (why := nobody_runtime.unavailable()) is not None:
            pytest.skip(why)
        runtime = nobody_runtime.runtime()
        command, env = runtime.command("-c", _THREADS_SCRIPT, case), runtime.env
    out = subprocess.run(
        command, env=env, cwd="/", capture_output=True, text=True, timeout=60, check=True
    ).stdout
    assert out.startswith(said), out
    if case == "other":
        assert "(lingering)" in out and "must start it later" in out, out
    if case == "native-staying":  # named as the kernel names it
        assert re.search(r"\(\S+ \(thread \d+\)\)", out), out


_EXECUTOR_LOOP = """
import asyncio
from agentcell.worker.sandbox import _one_thread

async def main():
    loop, refused = asyncio.get_running_loop(), 0
    for _ in range(2000):
        await loop.run_in_executor(None, lambda: None)  # a pool thread, idle now
        try:
            _one_thread.before_the_walls()
        except OSError:
            refused += 1
    return refused

print(asyncio.run(main()))
"""


def test_an_executor_just_ended_never_counts_as_a_thread_left() -> None:
    # Before 3.13 a joined thread may still be listed by the kernel a moment: the check
    # waits for it to go, else a quarter of such runs were refused on 3.11 (in CI's
    # smoke run on that Python).
    out = subprocess.run(
        [sys.executable, "-c", _EXECUTOR_LOOP], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "0", out.stdout


async def test_a_tool_whose_module_imports_numpy_runs_behind_the_walls(
    spawned: SpawnRecorder, tmp_path: Path, served: ModelServer
) -> None:
    # numpy's OpenBLAS starts native threads at import unless told to use one: the child
    # sets that before the tool's module is imported, so the walls go up on one thread.
    pytest.importorskip("numpy")
    import numpy_tools

    served.add(Reply(tool_calls=[Call("np_mean", {"values": [1, 2, 6]})]), "done")
    orch = thread_attack_tools.one_worker(
        tmp_path, agent("worker", ["np_mean"]), numpy_tools.np_mean
    )
    async with orch:
        result = await asyncio.wait_for(orch.delegate("worker", "go"), 60)
    assert result.status is RunStatus.COMPLETED, result.error
    assert result.sandbox.startswith("workspace"), result.sandbox
    tool_output = next(
        m["content"] for m in served.requests[-1].body["messages"] if m["role"] == "tool"
    )
    assert tool_output == "3.0"
