"""A child-side handler that enters the sandbox and says what it entered it with.

It checks what its spare made before the Start (``_sandbox.prepare``), adds a marker
rule to that ruleset (a folder no sandbox grants), enters the sandbox, and reports what
the walls then let it do. The marker readable means the spare's ruleset is the one the
process was restricted with; unreadable, that a new one was made.
"""

from __future__ import annotations

import errno
import json
import os
import socket
from pathlib import Path

from agentcell.protocol import RunResult, RunStatus, Start
from agentcell.worker.child._main import ChildLink
from agentcell.worker.sandbox import _apply as _sandbox
from agentcell.worker.sandbox import _landlock
from agentcell.worker.sandbox import _spare as _sandbox_spare


def _is_ruleset(fd: int) -> bool:
    try:
        return os.readlink(f"/proc/self/fd/{fd}") == "anon_inode:landlock-ruleset"
    except OSError:
        return False


def _can_read(path: str) -> bool:
    try:
        Path(path).read_bytes()
    except OSError:
        return False
    return True


def _can_write(path: str) -> bool:
    try:
        with open(path, "w") as f:
            f.write("x")
    except OSError:
        return False
    return True


def _tcp(port: int) -> str:
    with socket.socket() as sock:
        try:
            sock.connect(("127.0.0.1", port))
        except OSError as exc:
            return "walled" if exc.errno == errno.EACCES else f"errno {exc.errno}"
    return "connected"


async def run(start: Start, link: ChildLink) -> RunResult:
    args = start.args
    spare = _sandbox_spare._spare
    made = spare is not None and spare.pid == os.getpid()
    tmp_before, identity, ruleset_fd = "", (0, 0), -1
    if made and spare is not None:
        tmp_before = str(spare.tmpdir or "")
        identity = spare.tmp_identity
        if spare.ruleset is not None:
            ruleset_fd = spare.ruleset.fd
            spare.ruleset.allow_path(args["marker"], _landlock.READ)
    if args.get("plant") and tmp_before:  # another process of the user, meanwhile
        Path(tmp_before, "planted").write_text("x")
    box = _sandbox.apply(
        "read-only",
        workdir=args["workdir"],
        access=_sandbox.Access(model_ports=args["model_ports"]),
        cap_processes=False,
    )
    assert box.tmpdir is not None
    now = os.lstat(box.tmpdir)
    report = {
        "made_before_start": made,
        "tmp_before": tmp_before,
        "tmp": box.tmpdir,
        "tmp_same": (now.st_dev, now.st_ino) == identity,
        "tmp_entries": sorted(os.listdir(box.tmpdir)),
        "ruleset_left_open": ruleset_fd >= 0 and _is_ruleset(ruleset_fd),
        "marker": _can_read(os.path.join(args["marker"], "file")),
        "secret": _can_read(args["secret"]),
        "etc": _can_read("/etc/hostname") or _can_read("/etc/os-release"),
        "workdir": _can_read(os.path.join(args["workdir"], "file")),
        "devnull": _can_write("/dev/null"),
        "tcp": _tcp(int(args["port"])),
    }
    return RunResult(status=RunStatus.COMPLETED, text=json.dumps(report))
