"""Linux Landlock through its three system calls (ctypes; no binding needed).

A process builds a ruleset (which rights it *handles*, and which paths and TCP ports
keep which of them), then restricts itself: from then on it and everything it starts
can only use the handled rights where a rule grants them. Domains stack: a process
that is already restricted can restrict itself further, never loosen. The rights and
struct layouts are the kernel's uapi (``include/uapi/linux/landlock.h``); which of
them this kernel knows is its ABI version, asked with ``LANDLOCK_CREATE_RULESET_VERSION``.
"""

from __future__ import annotations

import ctypes
import os
import platform
import stat
from collections.abc import Iterable

# x86_64 and aarch64 share the generic syscall numbers for Landlock.
_SYS_CREATE_RULESET = 444
_SYS_ADD_RULE = 445
_SYS_RESTRICT_SELF = 446
_CREATE_RULESET_VERSION = 1 << 0
_RULE_PATH_BENEATH = 1
_RULE_NET_PORT = 2
_PR_SET_NO_NEW_PRIVS = 38

# File-system rights, by the ABI version that introduced them.
EXECUTE = 1 << 0
WRITE_FILE = 1 << 1
READ_FILE = 1 << 2
READ_DIR = 1 << 3
REMOVE_DIR = 1 << 4
REMOVE_FILE = 1 << 5
MAKE_CHAR = 1 << 6
MAKE_DIR = 1 << 7
MAKE_REG = 1 << 8
MAKE_SOCK = 1 << 9
MAKE_FIFO = 1 << 10
MAKE_BLOCK = 1 << 11
MAKE_SYM = 1 << 12
REFER = 1 << 13  # ABI 2: link/rename across directories
TRUNCATE = 1 << 14  # ABI 3
IOCTL_DEV = 1 << 15  # ABI 5

# Network rights (ABI 4) and scopes (ABI 6).
NET_BIND_TCP = 1 << 0
NET_CONNECT_TCP = 1 << 1
SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0
SCOPE_SIGNAL = 1 << 1

FS_V1 = (1 << 13) - 1
#: Rights that make sense on a regular file (a rule on a file may grant only these).
FILE_RIGHTS = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV
READ = EXECUTE | READ_FILE | READ_DIR


def fs_rights(abi: int) -> int:
    """Every file-system right this ABI knows."""
    rights = FS_V1
    if abi >= 2:
        rights |= REFER
    if abi >= 3:
        rights |= TRUNCATE
    if abi >= 5:
        rights |= IOCTL_DEV
    return rights


def net_rights(abi: int) -> int:
    return NET_BIND_TCP | NET_CONNECT_TCP if abi >= 4 else 0


def scopes(abi: int) -> int:
    return SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL if abi >= 6 else 0


class _RulesetAttr(ctypes.Structure):
    _fields_ = [
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    ]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1  # __attribute__((packed)) in the uapi header: 12 bytes
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


class _NetPortAttr(ctypes.Structure):
    _fields_ = [("allowed_access", ctypes.c_uint64), ("port", ctypes.c_uint64)]


_libc = ctypes.CDLL(None, use_errno=True)
_syscall = _libc.syscall
_syscall.restype = ctypes.c_long


class LandlockError(OSError):
    pass


def _check(result: int, what: str) -> int:
    if result < 0:
        code = ctypes.get_errno()
        raise LandlockError(code, f"{what}: {os.strerror(code)}")
    return result


def abi_version() -> int:
    """The kernel's Landlock ABI (0: not available, or not on this architecture)."""
    if platform.system() != "Linux" or platform.machine() not in ("x86_64", "aarch64"):
        return 0
    result = _syscall(_SYS_CREATE_RULESET, None, ctypes.c_size_t(0), _CREATE_RULESET_VERSION)
    if result < 0:
        return 0  # ENOSYS: not built in; EOPNOTSUPP: built in but disabled at boot
    return int(result)


class Ruleset:
    """One ruleset: add path and port rules, then ``restrict_self`` (or keep it for later)."""

    def __init__(self, *, fs: int, net: int = 0, scoped: int = 0) -> None:
        self.fs = fs
        attr = _RulesetAttr(fs, net, scoped)
        self.fd = _check(
            _syscall(
                _SYS_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(ctypes.sizeof(attr)), 0
            ),
            "landlock_create_ruleset",
        )

    def allow_path(self, path: str, rights: int) -> bool:
        """Grant ``rights`` beneath ``path`` (False if the path does not exist)."""
        try:
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except OSError:
            return False
        try:
            if not os.path.isdir(path):
                rights &= FILE_RIGHTS
            attr = _PathBeneathAttr(rights & self.fs, fd)
            _check(
                _syscall(_SYS_ADD_RULE, self.fd, _RULE_PATH_BENEATH, ctypes.byref(attr), 0),
                f"landlock_add_rule({path})",
            )
        finally:
            os.close(fd)
        return True

    def allow_fd(self, fd: int, rights: int, what: str = "", *, is_dir: bool | None = None) -> None:
        """Grant ``rights`` beneath what ``fd`` (an ``O_PATH`` descriptor of a checked
        folder or file) refers to: the rule is on that object, whatever its path is now.
        ``is_dir``: what it is, when the caller knows (no ``fstat``)."""
        if is_dir is None:
            is_dir = stat.S_ISDIR(os.fstat(fd).st_mode)
        if not is_dir:
            rights &= FILE_RIGHTS
        attr = _PathBeneathAttr(rights & self.fs, fd)
        _check(
            _syscall(_SYS_ADD_RULE, self.fd, _RULE_PATH_BENEATH, ctypes.byref(attr), 0),
            f"landlock_add_rule({what or fd})",
        )

    def allow_paths(self, paths: Iterable[str], rights: int) -> None:
        for path in paths:
            self.allow_path(path, rights)

    def allow_port(self, port: int, rights: int = NET_CONNECT_TCP) -> None:
        attr = _NetPortAttr(rights, port)
        _check(
            _syscall(_SYS_ADD_RULE, self.fd, _RULE_NET_PORT, ctypes.byref(attr), 0),
            f"landlock_add_rule(port {port})",
        )

    def restrict_self(self) -> None:
        """Enforce the ruleset on this thread's process from now on (no way back)."""
        set_no_new_privs()
        _check(_syscall(_SYS_RESTRICT_SELF, self.fd, 0), "landlock_restrict_self")

    def restrict_self_in_child(self) -> None:
        """``restrict_self`` for a ``preexec_fn``: no allocation, no exception on failure
        (the exec then fails with the errno, which is the closed default we want)."""
        if _libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 or (
            _syscall(_SYS_RESTRICT_SELF, self.fd, 0) != 0
        ):
            os._exit(126)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def set_no_new_privs() -> None:
    """No setuid/file-capability gains for this process and what it executes."""
    if _libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        code = ctypes.get_errno()
        raise LandlockError(code, f"prctl(PR_SET_NO_NEW_PRIVS): {os.strerror(code)}")
