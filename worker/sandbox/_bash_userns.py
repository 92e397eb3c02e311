"""The user namespaces a sub-agent and bash's commands enter, made before the sub-agent
drops its capabilities (``_capabilities``).

bash's commands run in a network namespace of their own (no network, or under a
``network:`` list the one with the relay to the parent's proxy). Making or joining a
network namespace needs ``CAP_SYS_ADMIN`` over the user namespace that owns it, and the
sub-agent holds no capability once its set-up is done. A process whose effective uid owns
a user namespace made just below its own holds every capability in it, whatever its own
sets say: so bash's preexec joins such a namespace (``setns``), makes or joins its network
namespace inside it, drops the capabilities it got there, and only then runs the command —
still as the same uid (mapped onto itself), with no capability over anything outside.

Making a user namespace takes a short-lived child (a process cannot leave the one it
makes) that maps the uid and gid onto themselves and sends its namespaces' descriptors
over a socket pair: a fork of a sub-agent costs some milliseconds of CPU. So the fork
server makes, once (``warm``), a pair: an outer namespace every sub-agent it forks joins
(``_mountns.prepare``) and an inner one, made below it, that their bash commands join;
the descriptors are inherited. Only a run with a ``network:`` list makes its own (the
relay's network namespace is its own), and a process not forked from a warmed fork server
(a Ray node's child) makes both itself.
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
    made = _made_by_child(("net",) if net else ("user",), net=net)
    if isinstance(made, str):
        return made
    return (made[0], made[1]) if net else (made[0], -1)


#: What ``warm`` made in the fork server: (outer, inner) descriptors, or why not.
_shared: tuple[int, int] | str | None = None


def warm() -> None:
    """In the fork server, once: the outer and inner namespaces its children share."""
    global _shared
    if _shared is None:
        made = _made_by_child(("user", "user"), net=False)
        _shared = made if isinstance(made, str) else (made[0], made[1])


def shared() -> tuple[int, int] | None:
    """The fork server's (outer, inner) pair, inherited; None where there is none."""
    return _shared if isinstance(_shared, tuple) else None


def _made_by_child(steps: tuple[str, ...], *, net: bool) -> list[int] | str:
    """A child makes a namespace per step ("user": a user namespace below the last,
    mapped; "net": a user and a network namespace together) and sends a descriptor of
    each user namespace (and of the network one) back."""
    uid, gid = os.geteuid(), os.getegid()
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    wanted = len(steps) + (1 if net else 0)
    pid = os.fork()
    if pid == 0:  # one thread here: system calls only, then _exit
        code = 1
        try:
            ours.close()
            fds = []
            for step in steps:
                flags = _CLONE_NEWUSER | (_CLONE_NEWNET if step == "net" else 0)
                if _libc.unshare(flags) != 0 or not _map_self(uid, gid):
                    os._exit(1)
                # Its own namespaces, sent over: opening them from the parent would need
                # the right to ptrace it, which a non-dumpable sub-agent's child withholds.
                fds.append(os.open("/proc/self/ns/user", os.O_RDONLY))
            if net:
                fds.append(os.open("/proc/self/ns/net", os.O_RDONLY))
            socket.send_fds(theirs, [b"1"], fds)
            code = 0
        finally:
            os._exit(code)
    theirs.close()
    try:
        with ours:
            _, fds, _, _ = socket.recv_fds(ours, 1, wanted)
    except OSError as exc:
        return f"no user namespace could be made for it ({exc.strerror})"
    finally:
        os.waitpid(pid, 0)
    if len(fds) != wanted:
        for fd in fds:
            os.close(fd)
        return "no user namespace could be made for it (unshare or its uid map refused)"
    for fd in fds:
        os.set_inheritable(fd, False)
    return fds


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
