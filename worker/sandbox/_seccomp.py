"""The second wall: a seccomp filter for what Landlock does not cover (ctypes, no binding).

Landlock walls files, TCP ports, signals and abstract sockets. It does not see the
kernel keyring, ``ptrace`` and ``process_vm_*`` between processes its scopes allow,
``io_uring`` (which can open files and sockets out of the view of other checks), ``bpf``,
``perf_event_open``, ``userfaultfd``, the terminal ioctls that push input (``TIOCSTI``,
``TIOCLINUX``), nor the path a UNIX socket connects to. This filter refuses those system
calls with ``EPERM`` (never a kill: a tool fails with a readable message), on every thread
of the sub-agent process (``SECCOMP_FILTER_FLAG_TSYNC``) and, since a filter is inherited
and cannot be removed, in everything it starts. Bash's commands get a second, stacked
filter that also refuses ``socket(AF_UNIX, ...)`` (``socketpair`` stays: it reaches no
one else), unless the run has ``network: true``.

The program is classic BPF built here by hand rather than through libseccomp: it is a
dozen comparisons, it has no run-time dependency (libseccomp's own binding comes with
distributions or third-party wheels, ``pyseccomp`` has not been released since 2021, and
both need libseccomp installed), and it is built once before the fork, so what runs
between fork and exec is one system call on ready bytes. Its shape:

1. the architecture (``seccomp_data.arch``) must be this process's own — a 64-bit
   process can still make i386 (``int 0x80``) or x32 system calls, whose numbers differ:
   every call of another ABI, and on x86_64 every x32 number (bit 30 set), is refused;
2. a refused system call number returns ``EPERM``;
3. ``ioctl`` and ``socket`` compare their argument's low 32 bits (the kernel reads ``cmd``
   and ``family`` as 32-bit ints, so higher bits must not hide a match);
4. everything else is allowed.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import os
import platform
import struct
import sys
from typing import Any

#: What the filter refuses, in the words ``agentcell sandbox`` prints.
REFUSED_CALLS = (
    "add_key",
    "request_key",
    "keyctl",
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "bpf",
    "perf_event_open",
    "userfaultfd",
    # What no sub-agent needs, and a root one could otherwise do to the whole machine
    # (capabilities are dropped too: ``_capabilities``; this holds where that could not).
    "reboot",
    "kexec_load",
    "kexec_file_load",
    "init_module",
    "finit_module",
    "delete_module",
    "swapon",
    "swapoff",
    "settimeofday",
    "clock_settime",
    "clock_adjtime",
    "adjtimex",
    "syslog",
    "iopl",
    "ioperm",
    "acct",
    "sethostname",
    "setdomainname",
    "mount",
    "umount2",
    "pivot_root",
    "open_tree",
    "move_mount",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "mount_setattr",
)
#: Calls ``REFUSED_CALLS`` names that an architecture does not have (nothing to refuse).
_ABSENT = {"aarch64": ("iopl", "ioperm")}
REFUSED_IOCTLS = {"TIOCSTI": 0x5412, "TIOCLINUX": 0x541C}  # the same on both architectures
AF_UNIX = 1
AF_NETLINK = 16
AF_PACKET = 17
SOCK_RAW = 3
_SOCK_TYPE_MASK = 0xF  # the type, without SOCK_NONBLOCK and SOCK_CLOEXEC
#: The sockets the filter refuses, in the words ``agentcell sandbox`` prints.
REFUSED_SOCKETS = ("socket(AF_PACKET)", "socket(SOCK_RAW)")

# Per architecture: the audit arch value the kernel puts in seccomp_data, and the system
# call numbers (arch/x86/entry/syscalls/syscall_64.tbl; include/uapi/asm-generic/unistd.h).
_ARCHES: dict[str, dict[str, int]] = {
    "x86_64": {
        "AUDIT_ARCH": 0xC000003E,
        "seccomp": 317,
        "ioctl": 16,
        "socket": 41,
        "add_key": 248,
        "request_key": 249,
        "keyctl": 250,
        "ptrace": 101,
        "process_vm_readv": 310,
        "process_vm_writev": 311,
        "io_uring_setup": 425,
        "io_uring_enter": 426,
        "io_uring_register": 427,
        "bpf": 321,
        "perf_event_open": 298,
        "userfaultfd": 323,
        "reboot": 169,
        "kexec_load": 246,
        "kexec_file_load": 320,
        "init_module": 175,
        "finit_module": 313,
        "delete_module": 176,
        "swapon": 167,
        "swapoff": 168,
        "settimeofday": 164,
        "clock_settime": 227,
        "clock_adjtime": 305,
        "adjtimex": 159,
        "syslog": 103,
        "iopl": 172,
        "ioperm": 173,
        "acct": 163,
        "sethostname": 170,
        "setdomainname": 171,
        "mount": 165,
        "umount2": 166,
        "pivot_root": 155,
        "open_tree": 428,
        "move_mount": 429,
        "fsopen": 430,
        "fsconfig": 431,
        "fsmount": 432,
        "fspick": 433,
        "mount_setattr": 442,
    },
    "aarch64": {
        "AUDIT_ARCH": 0xC00000B7,
        "seccomp": 277,
        "ioctl": 29,
        "socket": 198,
        "add_key": 217,
        "request_key": 218,
        "keyctl": 219,
        "ptrace": 117,
        "process_vm_readv": 270,
        "process_vm_writev": 271,
        "io_uring_setup": 425,
        "io_uring_enter": 426,
        "io_uring_register": 427,
        "bpf": 280,
        "perf_event_open": 241,
        "userfaultfd": 282,
        "reboot": 142,
        "kexec_load": 104,
        "kexec_file_load": 294,
        "init_module": 105,
        "finit_module": 273,
        "delete_module": 106,
        "swapon": 224,
        "swapoff": 225,
        "settimeofday": 170,
        "clock_settime": 112,
        "clock_adjtime": 266,
        "adjtimex": 171,
        "syslog": 116,
        "acct": 89,
        "sethostname": 161,
        "setdomainname": 162,
        "mount": 40,
        "umount2": 39,
        "pivot_root": 41,
        "open_tree": 428,
        "move_mount": 429,
        "fsopen": 430,
        "fsconfig": 431,
        "fsmount": 432,
        "fspick": 433,
        "mount_setattr": 442,
    },
}
_X32_SYSCALL_BIT = 0x40000000

# Classic BPF (include/uapi/linux/filter.h, bpf_common.h) and seccomp (linux/seccomp.h).
_LD_W_ABS = 0x20  # BPF_LD | BPF_W | BPF_ABS
_JEQ_K = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
_JGE_K = 0x35  # BPF_JMP | BPF_JGE | BPF_K
_RET_K = 0x06  # BPF_RET | BPF_K
_AND_K = 0x54  # BPF_ALU | BPF_AND | BPF_K
_RET_ALLOW = 0x7FFF0000
_RET_ERRNO = 0x00050000
_OFFSET_NR = 0  # struct seccomp_data: int nr; u32 arch; u64 ip; u64 args[6]
_OFFSET_ARCH = 4
_OFFSET_ARG0_LOW = 16  # little-endian: an argument's low half comes first
_OFFSET_ARG1_LOW = 24
_SET_MODE_FILTER = 1
_GET_ACTION_AVAIL = 2
_FLAG_TSYNC = 1
_PR_SET_NO_NEW_PRIVS = 38
_PR_GET_SECCOMP = 21


class SeccompError(OSError):
    pass


def arch() -> str | None:
    """This process's system-call ABI, if the filter knows it (None: it does not)."""
    machine = platform.machine()
    if platform.system() != "Linux" or machine not in _ARCHES or sys.maxsize < 2**32:
        return None  # a 32-bit Python on a 64-bit kernel makes calls of another ABI
    if sys.byteorder != "little":
        return None
    return machine


class _Program:
    """A BPF program under construction: instructions, with jumps to named labels."""

    def __init__(self) -> None:
        self.code: list[tuple[int, int | str, int | str, int]] = []
        self.labels: dict[str, int] = {}

    def load(self, offset: int) -> None:
        self.code.append((_LD_W_ABS, 0, 0, offset))

    def jump_if(self, op: int, value: int, then: int | str, otherwise: int | str = 0) -> None:
        self.code.append((op, then, otherwise, value))

    def and_(self, value: int) -> None:
        self.code.append((_AND_K, 0, 0, value))

    def ret(self, value: int) -> None:
        self.code.append((_RET_K, 0, 0, value))

    def label(self, name: str) -> None:
        self.labels[name] = len(self.code)

    def assemble(self) -> bytes:
        out = bytearray()
        for index, (op, then, otherwise, value) in enumerate(self.code):
            out += struct.pack(
                "=HBBI", op, self._offset(index, then), self._offset(index, otherwise), value
            )
        return bytes(out)

    def _offset(self, index: int, target: int | str) -> int:
        if isinstance(target, int):
            return target
        offset = self.labels[target] - index - 1
        assert 0 <= offset < 256, "a BPF jump reaches at most 255 instructions ahead"
        return offset


@functools.cache  # built once in the fork server (``warm``); its children reuse the bytes
def build(machine: str, *, refuse_unix_sockets: bool) -> bytes:
    """The filter program for ``machine`` (see the module's docstring for its shape)."""
    numbers = _ARCHES[machine]
    program = _Program()
    program.load(_OFFSET_ARCH)
    program.jump_if(_JEQ_K, numbers["AUDIT_ARCH"], 0, "refuse")
    program.load(_OFFSET_NR)
    if machine == "x86_64":
        program.jump_if(_JGE_K, _X32_SYSCALL_BIT, "refuse")
    for name in refused_calls(machine):
        program.jump_if(_JEQ_K, numbers[name], "refuse")
    program.jump_if(_JEQ_K, numbers["ioctl"], "ioctl")
    program.jump_if(_JEQ_K, numbers["socket"], "socket")
    program.ret(_RET_ALLOW)
    program.label("ioctl")
    program.load(_OFFSET_ARG1_LOW)
    for request in REFUSED_IOCTLS.values():
        program.jump_if(_JEQ_K, request, "refuse")
    program.ret(_RET_ALLOW)
    # socket(family, type, protocol): no packet socket of any type (it reads every frame
    # on an interface: another process's model request on lo, say), and no SOCK_RAW in a
    # family but netlink, where it is the ordinary type (getifaddrs, ip); bash without
    # network: no UNIX socket either. ICMP datagram sockets stay (ping).
    program.label("socket")
    program.load(_OFFSET_ARG0_LOW)
    program.jump_if(_JEQ_K, AF_PACKET, "refuse")
    if refuse_unix_sockets:
        program.jump_if(_JEQ_K, AF_UNIX, "refuse")
    program.jump_if(_JEQ_K, AF_NETLINK, "allow")
    program.load(_OFFSET_ARG1_LOW)
    program.and_(_SOCK_TYPE_MASK)
    program.jump_if(_JEQ_K, SOCK_RAW, "refuse")
    program.label("allow")
    program.ret(_RET_ALLOW)
    program.label("refuse")
    program.ret(_RET_ERRNO | errno.EPERM)
    return program.assemble()


def refused_calls(machine: str) -> tuple[str, ...]:
    """``REFUSED_CALLS`` that ``machine`` has."""
    absent = _ABSENT.get(machine, ())
    return tuple(name for name in REFUSED_CALLS if name not in absent)


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


_libc = ctypes.CDLL(None, use_errno=True)
_syscall = _libc.syscall
_syscall.restype = ctypes.c_long


class Filter:
    """One filter, built now (before any fork) and installed later, once per process."""

    def __init__(self, machine: str, *, refuse_unix_sockets: bool) -> None:
        self.machine = machine
        self.refuse_unix_sockets = refuse_unix_sockets
        code = build(machine, refuse_unix_sockets=refuse_unix_sockets)
        self._buffer = ctypes.create_string_buffer(code, len(code))
        self._prog = _SockFprog(len(code) // 8, ctypes.addressof(self._buffer))
        self._nr = _ARCHES[machine]["seccomp"]

    def install(self) -> None:
        """Filter every thread of this process from now on (no way back)."""
        if _libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            code = ctypes.get_errno()
            raise SeccompError(code, f"prctl(PR_SET_NO_NEW_PRIVS): {os.strerror(code)}")
        result = _syscall(self._nr, _SET_MODE_FILTER, _FLAG_TSYNC, ctypes.byref(self._prog))
        if result < 0:
            code = ctypes.get_errno()
            raise SeccompError(code, f"seccomp(SET_MODE_FILTER): {os.strerror(code)}")
        if result > 0:  # TSYNC: the id of a thread that could not be synchronised
            raise SeccompError(errno.EBUSY, f"seccomp: thread {result} could not take the filter")

    def install_in_child(self) -> None:
        """``install`` for a ``preexec_fn`` (one thread, no allocation, no exception: a
        failure ends the child, so the command never runs without its wall)."""
        if _libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 or (
            _syscall(self._nr, _SET_MODE_FILTER, 0, ctypes.byref(self._prog)) != 0
        ):
            os._exit(126)

    def launcher_arg(self) -> str:
        """``<seccomp number>:<program hex>``: for a launcher in another interpreter that
        installs this filter before it execs (MCP servers, ``_mcp.WARDEN``)."""
        return f"{self._nr}:{self._buffer.raw.hex()}"


def unavailable() -> str | None:
    """Why no filter can be installed here, in one line (None: it can)."""
    machine = arch()
    if machine is None:
        return f"seccomp filter not built for this architecture ({platform.machine()})"
    if _libc.prctl(_PR_GET_SECCOMP, 0, 0, 0, 0) < 0:
        return "the kernel has no seccomp (CONFIG_SECCOMP)"
    action = ctypes.c_uint32(_RET_ERRNO)
    if _syscall(_ARCHES[machine]["seccomp"], _GET_ACTION_AVAIL, 0, ctypes.byref(action)) != 0:
        return "the kernel has no seccomp filters returning an error (CONFIG_SECCOMP_FILTER)"
    return None


def process_filter() -> Filter | None:
    machine = arch()
    return None if machine is None else Filter(machine, refuse_unix_sockets=False)


def bash_filter() -> Filter | None:
    machine = arch()
    return None if machine is None else Filter(machine, refuse_unix_sockets=True)


class Prepared:
    """What a sub-agent process installs, worked out once in the fork server (``warm``):
    whether filters can be had here and, if so, both filters ready to load (the program,
    its buffer and ``sock_fprog``). A child then makes two system calls for its own
    filter; the kernel and the architecture do not change under a running fork server."""

    def __init__(self) -> None:
        self.reason = unavailable()
        ready = self.reason is None
        self.process = process_filter() if ready else None
        self.bash = bash_filter() if ready else None


_prepared: Prepared | None = None  # set by ``warm`` only: a fork server's, inherited


def prepared() -> Prepared:
    """The fork server's ``Prepared`` (inherited), or one made now where there is none
    (a process not forked from a warmed fork server checks the kernel each time)."""
    return _prepared if _prepared is not None else Prepared()


def warm() -> None:
    """Build both filters now (the fork server calls this: its children inherit them)."""
    global _prepared
    _prepared = Prepared()


# -- what it refuses on this machine, tried in a throwaway child -------------------------


def probe() -> dict[str, Any]:
    """Install both filters in a throwaway child and see which calls come back EPERM."""
    reason = unavailable()
    if reason is not None:
        return {"available": False, "reason": reason, "refuses": [], "bash_refuses": []}
    machine = arch()
    assert machine is not None
    filters = (Filter(machine, refuse_unix_sockets=False), bash_filter())
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the filter cannot be taken off again: try it where that does not matter
        code = 1
        try:
            os.close(read_end)
            refused = []
            for layer in filters:
                assert layer is not None
                layer.install()
                refused.append(",".join(_refused_here(machine)))
            os.write(write_end, "\n".join(refused).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        text = pipe.read().decode()
    _, status = os.waitpid(pid, 0)
    lines = text.split("\n")
    if os.waitstatus_to_exitcode(status) != 0 or len(lines) != 2:
        return {
            "available": False,
            "reason": "the filter could not be installed here",
            "refuses": [],
            "bash_refuses": [],
        }
    process, bash = ([name for name in line.split(",") if name] for line in lines)
    return {"available": True, "reason": "", "refuses": process, "bash_refuses": bash}


#: The calls ``REFUSED_CALLS`` added for a root sub-agent, probed with every argument -1:
#: each then fails on its own (a wrong reboot magic, a host name longer than 64 bytes, a
#: bad address or flag), so one the filter let through does nothing, even as root.
_PROBED_WITH_ALL_ONES = frozenset(REFUSED_CALLS[REFUSED_CALLS.index("reboot") :])


def _refused_here(machine: str) -> list[str]:
    """The calls that return EPERM in this (filtered) process. Each is made with arguments
    it would fail on anyway, so a call the filter let through does nothing."""
    numbers = _ARCHES[machine]
    refused = []
    for name in refused_calls(machine):
        args = (-1,) * 6 if name in _PROBED_WITH_ALL_ONES else (-1, 0, 0, 0, 0)
        if _fails_with_eperm(numbers[name], *args):
            refused.append(name)
    for name, request in REFUSED_IOCTLS.items():
        if _fails_with_eperm(numbers["ioctl"], -1, request, 0):
            refused.append(f"ioctl {name}")
    if machine == "x86_64" and _fails_with_eperm(_X32_SYSCALL_BIT | 39):  # x32 getpid
        refused.append("x32 system calls")
    for label, family, kind in (
        ("socket(AF_PACKET)", AF_PACKET, 2),  # SOCK_DGRAM: refused by family alone
        ("socket(SOCK_RAW)", 2, SOCK_RAW | 0x80000),  # AF_INET, SOCK_CLOEXEC: flags aside
        ("socket(AF_UNIX)", AF_UNIX, 1 | 0x80000),
    ):
        if _socket_refused(numbers["socket"], family, kind):
            refused.append(label)
    return refused


def _socket_refused(number: int, family: int, kind: int) -> bool:
    fd = _syscall(number, family, kind, 0)
    if fd >= 0:
        with contextlib.suppress(OSError):
            os.close(fd)
        return False
    return ctypes.get_errno() == errno.EPERM


def _fails_with_eperm(number: int, *args: int) -> bool:
    ctypes.set_errno(0)
    result = _syscall(number, *(ctypes.c_long(arg) for arg in args))
    return result < 0 and ctypes.get_errno() == errno.EPERM
