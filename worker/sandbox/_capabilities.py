"""No capability for a sub-agent, whatever user runs agentcell.

Landlock and seccomp wall paths and a few calls; a root process keeps every capability
besides (``reboot``, the clock, the hostname, the kernel log, raw sockets on the host's
interfaces, module loading). So once a sub-agent has made its namespaces, mounts and
cgroup — the set-up that needs them — it drops every capability set for good:

- the bounding set, one capability at a time (``PR_CAPBSET_DROP``): nothing it executes
  can gain one back from a file's capabilities (``no_new_privs`` forbids that too);
- the ambient set (``PR_CAP_AMBIENT_CLEAR_ALL``);
- the securebits, set and locked: ``NOROOT`` (uid 0 gains no capability on ``execve``),
  ``NO_SETUID_FIXUP``, ``NO_CAP_AMBIENT_RAISE``, ``KEEP_CAPS`` off and locked;
- the permitted, effective and inheritable sets (``capset`` to zero), last, since the
  steps before need ``CAP_SETPCAP``.

The sub-agent does this inside a user namespace of its own where the kernel allows one
(``_mountns.prepare``): there it holds ``CAP_SETPCAP`` to drop the bounding set even when
it is not root, and, root or not, no capability over anything of the machine's (the
initial namespace's) to begin with. Processes that enter another user namespace later
(bash's commands, for their network namespace) get a full set inside it, and drop it
again in their preexec (``drop_in_child``) before they run anything.

What a walled sub-agent executes before its set-up ends (its MCP servers and their
warden) gains nothing either: it calls ``lock`` first (``_sandbox.before_servers``).
"""

from __future__ import annotations

import ctypes
import os

_PR_CAPBSET_READ = 23
_PR_CAPBSET_DROP = 24
_PR_GET_SECUREBITS = 27
_PR_SET_SECUREBITS = 28
_PR_CAP_AMBIENT = 47
_PR_CAP_AMBIENT_CLEAR_ALL = 4

_SECBIT_NOROOT = 1 << 0
_SECBIT_NOROOT_LOCKED = 1 << 1
_SECBIT_NO_SETUID_FIXUP = 1 << 2
_SECBIT_NO_SETUID_FIXUP_LOCKED = 1 << 3
_SECBIT_KEEP_CAPS_LOCKED = 1 << 5
_SECBIT_NO_CAP_AMBIENT_RAISE = 1 << 6
_SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED = 1 << 7
#: Every bit this module sets (KEEP_CAPS itself stays off, and locked off).
LOCKED_SECUREBITS = (
    _SECBIT_NOROOT
    | _SECBIT_NOROOT_LOCKED
    | _SECBIT_NO_SETUID_FIXUP
    | _SECBIT_NO_SETUID_FIXUP_LOCKED
    | _SECBIT_KEEP_CAPS_LOCKED
    | _SECBIT_NO_CAP_AMBIENT_RAISE
    | _SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED
)
_CAPABILITY_VERSION_3 = 0x20080522
_CAP_SETPCAP = 8
#: Capabilities are numbered below 64 (two 32-bit words in ``capset``'s version 3).
_MOST_CAPABILITIES = 64


class CapabilityError(OSError):
    pass


class _Header(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _Data(ctypes.Structure):
    _fields_ = [
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    ]


class Dropper:
    """Everything ``drop`` needs, made before any fork: a preexec (``drop_in_child``)
    then only makes system calls on ready arguments."""

    def __init__(self) -> None:
        self._libc = ctypes.CDLL(None, use_errno=True)
        self._prctl = self._libc.prctl
        self._capset = self._libc.capset
        self._header = _Header(_CAPABILITY_VERSION_3, 0)
        self._zero = (_Data * 2)()
        self._last = last_capability()

    def lock(self) -> str:
        """Make sure nothing this process executes from now on gains a capability: the
        securebits locked (NOROOT: not even uid 0), the bounding and ambient sets empty.
        Its own permitted and effective sets stay, for the set-up still to come (``drop``
        ends them). Returns what could not be done ("" when all was): a process of a
        normal user outside any user namespace holds no capability, but cannot empty its
        bounding set or lock its securebits either (both need ``CAP_SETPCAP``);
        ``no_new_privs`` keeps that bounding set from ever giving one back."""
        prctl = self._prctl
        kept = ""
        if prctl(_PR_GET_SECUREBITS, 0, 0, 0, 0) == LOCKED_SECUREBITS and not self._bounded():
            pass  # locked before (by ``lock``, or inherited from a process that was)
        elif self._has_setpcap():
            if prctl(_PR_SET_SECUREBITS, LOCKED_SECUREBITS, 0, 0, 0) != 0:
                self._fail("prctl(PR_SET_SECUREBITS)")
            for number in range(self._last + 1):
                if prctl(_PR_CAPBSET_DROP, number, 0, 0, 0) != 0:
                    self._fail(f"prctl(PR_CAPBSET_DROP, {number})")
        else:
            kept = "bounding set and securebits kept (no user namespace; no_new_privs holds)"
        if prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0:
            self._fail("prctl(PR_CAP_AMBIENT_CLEAR_ALL)")
        return kept

    def drop(self) -> str:
        """``lock``, then the permitted, effective and inheritable sets emptied: every
        capability of this thread gone for good. Raises if a step fails; returns what
        ``lock`` could not do."""
        kept = self.lock()
        if self._capset(ctypes.byref(self._header), self._zero) != 0:
            self._fail("capset")
        return kept

    def _bounded(self) -> bool:
        """Whether the bounding set still holds a capability."""
        return any(
            self._prctl(_PR_CAPBSET_READ, number, 0, 0, 0) == 1 for number in range(self._last + 1)
        )

    def _has_setpcap(self) -> bool:
        data = (_Data * 2)()
        if self._libc.capget(ctypes.byref(self._header), data) != 0:
            self._fail("capget")
        return bool(data[0].effective & (1 << _CAP_SETPCAP))

    def drop_in_child(self) -> None:
        """``drop`` for a ``preexec_fn``: a failure ends the child (exit 126), so the
        command never runs holding a capability."""
        try:
            self.drop()
        except CapabilityError:
            os._exit(126)

    def _fail(self, what: str) -> None:
        code = ctypes.get_errno()
        raise CapabilityError(code, f"{what}: {os.strerror(code)}")


def last_capability() -> int:
    """The highest capability number this kernel knows."""
    try:
        with open("/proc/sys/kernel/cap_last_cap", "rb") as file:
            return int(file.read())
    except (OSError, ValueError):
        return _MOST_CAPABILITIES - 1


def held(status: str | None = None) -> dict[str, int]:
    """The capability sets and securebits of this process (or of the ``/proc/PID/status``
    text given), as numbers: ``CapInh``, ``CapPrm``, ``CapEff``, ``CapBnd``, ``CapAmb``."""
    if status is None:
        with open("/proc/self/status") as file:
            status = file.read()
    sets = {}
    for line in status.splitlines():
        name, _, value = line.partition(":")
        if name.startswith("Cap"):
            sets[name] = int(value.strip(), 16)
    return sets


def holds_none(status: str | None = None) -> bool:
    """Whether every capability set is empty."""
    return not any(held(status).values())


_dropper: Dropper | None = None


def dropper() -> Dropper:
    """One ``Dropper`` per process (made on first use, inherited by forks)."""
    global _dropper
    if _dropper is None:
        _dropper = Dropper()
    return _dropper


def drop() -> str:
    return dropper().drop()


def lock() -> str:
    return dropper().lock()


def probe() -> str:
    """What a sub-agent holds here, tried in a throwaway child as a sub-agent does it (a
    user namespace of its own where the kernel allows one, then ``drop``): one line."""
    from agentcell.worker.sandbox import _mountns  # only here: _mountns is a sibling of the walls

    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(read_end)
            inside = _mountns._enter_user_namespace()
            kept = drop()  # raises if a step fails: all gone, or what could not go said
            where = "in a user namespace of its own" if inside else "no user namespace"
            line = f"none ({where})" if not kept else f"none effective ({kept})"
            os.write(write_end, line.encode())
        except Exception as exc:  # reported, never raised: this is a report
            os.write(write_end, f"not dropped here: {exc}".encode())
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        text = pipe.read().decode()
    os.waitpid(pid, 0)
    return text or "not dropped here: the probe ended without an answer"
