"""What the calling process holds, probed in ways that cannot take effect: run by a
sub-agent's bash (``python privilege_probe.py``) and by an MCP server's tool
(test_walls_privilege). Prints, or returns, one JSON object.

Each privileged call is made with an argument it fails on even when permitted — a wrong
reboot magic, a 65-byte host name, a missing swap file, an empty module, a clock tick of
0 — so it returns EPERM without the capability (or under the filter) and another error
with it; none changes the machine either way.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import platform
import socket
import sys
from typing import Any

_NR = {
    "x86_64": {"reboot": 169, "init_module": 175, "adjtimex": 159, "syslog": 103},
    "aarch64": {"reboot": 142, "init_module": 105, "adjtimex": 171, "syslog": 116},
}[platform.machine()]
_PR_GET_SECUREBITS = 27


def _errno_of(result: int) -> str:
    return "ok" if result >= 0 else errno.errorcode.get(ctypes.get_errno(), "?")


def probe(locked_file: str = "") -> dict[str, Any]:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    out: dict[str, Any] = {"pid": os.getpid(), "uid": os.geteuid()}
    with open("/proc/self/status") as status:
        fields = dict(line.split(":", 1) for line in status if ":" in line)
    out["caps"] = {k: v.strip() for k, v in fields.items() if k.startswith("Cap")}
    out["seccomp"] = fields["Seccomp"].strip()
    out["securebits"] = libc.prctl(_PR_GET_SECUREBITS, 0, 0, 0, 0)
    with open("/proc/self/uid_map") as uid_map:
        out["uid_map"] = uid_map.read().split()
    with open(f"/proc/{os.getppid()}/status") as status:
        parent = dict(line.split(":", 1) for line in status if ":" in line)
    out["parent_caps"] = {k: v.strip() for k, v in parent.items() if k.startswith("Cap")}
    with open("/proc/self/cgroup") as cgroup:
        out["cgroup"] = cgroup.read()
    out["tmpdir"] = os.environ.get("TMPDIR", "")

    def call(name: str, *args: Any) -> str:
        ctypes.set_errno(0)
        return _errno_of(libc.syscall(_NR[name], *args))

    calls = out["calls"] = {}
    # LINUX_REBOOT_MAGIC1 right, MAGIC2 wrong: EINVAL with CAP_SYS_BOOT.
    calls["reboot"] = call("reboot", ctypes.c_long(0xFEE1DEAD), ctypes.c_long(0x1234), 0, None)
    ctypes.set_errno(0)
    calls["sethostname"] = _errno_of(libc.sethostname(b"x" * 65, ctypes.c_size_t(65)))
    ctypes.set_errno(0)
    calls["swapoff"] = _errno_of(libc.swapoff(b"/nonexistent/agentcell-swap"))
    calls["init_module"] = call("init_module", None, ctypes.c_ulong(0), b"")
    timex = ctypes.create_string_buffer(256)
    ctypes.memmove(timex, ctypes.byref(ctypes.c_uint(0x4000)), 4)  # ADJ_TICK, tick 0
    calls["adjtimex"] = call("adjtimex", timex)
    calls["syslog"] = call("syslog", ctypes.c_int(10), None, ctypes.c_int(0))  # SIZE_BUFFER
    sockets = out["sockets"] = {}
    for name, family, kind, proto in (
        ("packet", socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3)),  # ETH_P_ALL
        ("packet_dgram", socket.AF_PACKET, socket.SOCK_DGRAM, socket.htons(3)),
        ("raw_icmp", socket.AF_INET, socket.SOCK_RAW | socket.SOCK_CLOEXEC, 1),
        ("icmp_dgram", socket.AF_INET, socket.SOCK_DGRAM, 1),
        ("netlink", socket.AF_NETLINK, socket.SOCK_RAW, 0),
    ):
        try:
            socket.socket(family, kind, proto).close()
            sockets[name] = "ok"
        except OSError as exc:
            sockets[name] = errno.errorcode.get(exc.errno or 0, str(exc.errno))
    if locked_file:
        try:
            open(locked_file, "rb").close()
            out["locked_file"] = "ok"
        except OSError as exc:
            out["locked_file"] = errno.errorcode.get(exc.errno or 0, str(exc.errno))
    out["hostname"] = socket.gethostname()
    return out


if __name__ == "__main__":
    print(json.dumps(probe(*sys.argv[1:2])))
