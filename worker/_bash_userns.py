"""The user namespace bash's commands enter, made before the sub-agent drops its
capabilities (``_capabilities``).

bash's commands run in a network namespace of their own (no network, or under a
``network:`` list the one with the relay to the parent's proxy). Making or joining a
network namespace needs ``CAP_SYS_ADMIN`` over the user namespace that owns it, and the
sub-agent holds no capability once its set-up is done. So, during that set-up, a
short-lived child makes a user namespace (and, for the relay, a network namespace it
owns) and maps the sub-agent's uid and gid onto themselves there; the sub-agent keeps a
descriptor to each. A process whose effective uid owns a user namespace made below its
own holds every capability in it, whatever its own sets say: bash's preexec joins that
user namespace (``setns``), makes or joins its network namespace inside it, drops the
capabilities it got there, and only then runs the command — still as the same uid, with
no capability over anything outside.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import socket

_CLONE_NEWUSER = 0x10000000
_CLONE_NEWNET = 0x40000000

_libc = ctypes.CDLL(None, use_errno=True)


def make(*, net: bool) -> tuple[int, int] | str:
    """(a user namespace's descriptor, with ``net`` a network namespace's it owns, else
    -1), or why none could be made (one line)."""
    uid, gid = os.geteuid(), os.getegid()
    flags = _CLONE_NEWUSER | (_CLONE_NEWNET if net else 0)
    kinds = ("user", "net") if net else ("user",)
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    pid = os.fork()
    if pid == 0:  # one thread here: system calls only, then _exit
        code = 1
        try:
            ours.close()
            if _libc.unshare(flags) == 0 and _map_self(uid, gid):
                # Its own namespaces, sent over: opening them from the parent would need
                # the right to ptrace it, which a non-dumpable sub-agent's child withholds.
                fds = [os.open(f"/proc/self/ns/{kind}", os.O_RDONLY) for kind in kinds]
                socket.send_fds(theirs, [b"1"], fds)
                code = 0
        finally:
            os._exit(code)
    theirs.close()
    try:
        with ours:
            _, fds, _, _ = socket.recv_fds(ours, 1, len(kinds))
    except OSError as exc:
        fds = []
        return f"no user namespace could be made for it ({exc.strerror})"
    finally:
        os.waitpid(pid, 0)
    if len(fds) != len(kinds):
        for fd in fds:
            os.close(fd)
        return "no user namespace could be made for it (unshare or its uid map refused)"
    for fd in fds:
        os.set_inheritable(fd, False)
    return fds[0], fds[1] if net else -1


def _map_self(uid: int, gid: int) -> bool:
    """In the child, just inside its new user namespace: the same uid and gid there."""
    maps = (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1"))
    for name, text in maps:
        try:
            fd = os.open(f"/proc/self/{name}", os.O_WRONLY)
        except OSError:
            if name == "setgroups":
                continue  # kernels before 3.19 have none
            return False
        try:
            os.write(fd, text.encode())
        except OSError:
            return False
        finally:
            with contextlib.suppress(OSError):
                os.close(fd)
    return True
