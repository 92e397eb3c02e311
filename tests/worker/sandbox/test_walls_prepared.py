"""Walls prepared once in the fork server, put up in every child (issue 23, child CPU).

The fork server builds, once, what every sub-agent process installs: both seccomp
filters and the check that the kernel has them (``_seccomp.prepared``), and the list of
its held ``O_PATH`` descriptors, which the child's terminal check need not ask about. A
real sub-agent (``workspace`` sandbox, scripted model, bash) must come out with the same
walls as one that works everything out itself:
its process under the filter, bash refused keyctl, an AF_UNIX socket and TIOCSTI with
EPERM, ``/etc/shadow`` unreadable, ``/usr`` unwritable, the runtime runnable.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import prepared_walls_child
import pytest
from agentcell.protocol import RunStatus
from agentcell.worker import probe_sandbox
from agentcell.worker.sandbox import _seccomp
from conftest import SpawnRecorder
from model_servers import ModelServer
from sandbox_util import SEP, bash_script, delegate_bash_on

CAPS = probe_sandbox()
_NR = {"x86_64": (250, 41), "aarch64": (219, 198)}  # keyctl, socket
pytestmark = [
    pytest.mark.skipif(
        not CAPS["landlock_scopes"], reason="needs Landlock ABI 6 (this project's CI has 7)"
    ),
    pytest.mark.skipif(not CAPS["seccomp_refuses"], reason=f"no seccomp here: {CAPS['seccomp']}"),
    pytest.mark.skipif(_seccomp.arch() not in _NR, reason="no system call numbers for this arch"),
]

# Each call made with arguments that fail anyway: without the filter the error is another.
_PROBE = """
import ctypes, errno, fcntl, os, socket, termios
libc = ctypes.CDLL(None, use_errno=True)
def errname(result):
    return "ok" if result >= 0 else errno.errorcode[ctypes.get_errno()]
keyctl, sock = {numbers}
print("keyctl", errname(libc.syscall(keyctl, 11, -1, 0, 0)))
print("unix", errname(libc.syscall(sock, socket.AF_UNIX, socket.SOCK_STREAM, 0)))
print("tiocsti", errname(libc.ioctl(0, termios.TIOCSTI, ctypes.c_char_p(b"x"))))
"""

COMMANDS = [
    "python3 probe.py",
    "grep -H '^Seccomp_filters:' /proc/self/status /proc/$PPID/status",
    "cat /etc/shadow && echo SHADOW-READ",
    "echo x > /usr/agentcell-prepared-test && echo USR-WRITTEN",
    "echo work > inside.txt && cat inside.txt",
]


@pytest.fixture
def served(model_server: ModelServer, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModelServer]:
    monkeypatch.setenv("OPENAI_BASE_URL", model_server.openai_base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-prepared-walls-test-key")
    yield model_server


async def _run_child(tmp_path: Path, served: ModelServer, use_prepared: bool) -> dict[str, Any]:
    """One sub-agent's bash run: how its walls went up (the child's report) and outputs."""
    work = tmp_path / ("prepared" if use_prepared else "control")
    work.mkdir()
    (work / "probe.py").write_text(_PROBE.format(numbers=_NR[str(_seccomp.arch())]))
    report = tmp_path / f"report-{use_prepared}.json"
    served.responder = bash_script(COMMANDS)
    target = functools.partial(prepared_walls_child.recording_child, str(report), use_prepared)
    result = await delegate_bash_on(work, target)
    assert result.status is RunStatus.COMPLETED, result.error
    assert "seccomp, bash no unix sockets" in result.sandbox, result.sandbox
    (line,) = report.read_text().splitlines()
    return {**json.loads(line), "out": result.text.split(SEP)}


def _walls_hold(child: dict[str, Any]) -> None:
    # The sub-agent process itself: filtered (mode 2), one filter, no new privileges.
    assert child["Seccomp"] == "2" and child["NoNewPrivs"] == "1", child
    assert child["Seccomp_filters"] == "1", child
    out = child["out"]
    assert len(out) == len(COMMANDS), out
    seen = dict(line.split() for line in out[0].splitlines())
    assert seen == {"keyctl": "EPERM", "unix": "EPERM", "tiocsti": "EPERM"}, out[0]
    # bash's commands: the process filter inherited, bash's own stacked on it; the
    # sub-agent process (bash's parent) under its one filter.
    mine, parent = out[1].splitlines()
    assert mine == "/proc/self/status:Seccomp_filters:\t2", out[1]
    assert parent.endswith("/status:Seccomp_filters:\t1"), out[1]
    assert "SHADOW-READ" not in out[2] and "Permission denied" in out[2], out[2]
    assert "USR-WRITTEN" not in out[3] and "Permission denied" in out[3], out[3]
    assert out[4].strip() == "work", out[4]


async def test_walls_prepared_in_the_fork_server_hold_in_a_real_sub_agent(
    spawned: SpawnRecorder, tmp_path: Path, served: ModelServer
) -> None:
    child = await _run_child(tmp_path, served, use_prepared=True)
    _walls_hold(child)
    assert child["probed"] == 0, "the child probed seccomp again instead of the fork server"
    assert child["isatty"] <= 30, child  # the held O_PATH descriptors were not asked

    control = await _run_child(tmp_path, served, use_prepared=False)
    _walls_hold(control)
    assert control["probed"] >= 1 and control["isatty"] >= 100, control
