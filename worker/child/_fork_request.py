"""A leaner start request for the multiprocess fork server: what a child needs, no more.

``Process.start()`` under forkserver sends the new child multiprocess's preparation data
and the pickled ``Process`` object; the child unpickles both (dill), re-applies the
parent's settings and runs ``Process._bootstrap``. Measured from agentcell's warmed fork
server (``bench/start_cost.py``), that costs ~1.6 ms of CPU per child over a bare
``os.fork()`` of the same template, and ~0.5 ms in the parent's starting thread.

agentcell's pool sends this request instead: a marker byte, a length, and one stdlib
pickle of (target, extra arguments, the few settings that matter: name, sys.path, the
working directory). The fork server's per-child function is replaced (by the boot
module, in the fork server only) with one that serves both this request and
multiprocess's own (whose pickle stream always starts with the PROTO opcode ``0x80``,
never with the marker), so ``Process.start()`` keeps working as before.
"""

from __future__ import annotations

import errno
import os
import pickle
import signal
import socket
import struct
import sys
import threading
from collections.abc import Callable
from typing import Any

#: First byte of our request; a pickle stream from multiprocess starts with b"\x80".
MARKER = b"A"
_LENGTH = struct.Struct(">I")
_PICKLE, _DILL = b"p", b"d"


def encode_request(target: Callable[..., None], args: tuple[Any, ...], name: str) -> bytes:
    """The bytes the parent writes to the fork server's data pipe for one child.

    The child's pipe end travels as the first of the file descriptors passed with the
    request, and is given to ``target`` as its first argument, before ``args``."""
    # The settings come first, on their own: the target's module may be importable only
    # from the parent's sys.path.
    settings = {"name": name, "sys_path": list(sys.path), "dir": os.getcwd()}
    head = pickle.dumps(settings, protocol=pickle.HIGHEST_PROTOCOL)
    message = (target, args)
    try:
        body, kind = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL), _PICKLE
    except (pickle.PicklingError, TypeError, AttributeError):
        import dill  # closures and lambdas: by value, as multiprocess would

        body, kind = dill.dumps(message), _DILL
    return MARKER + kind + _LENGTH.pack(len(head)) + _LENGTH.pack(len(body)) + head + body


def serve_one(child_r: int, fds: list[int], unused_fds: list[int], handlers: Any) -> int:
    """In a child just forked by the fork server: serve our request, or multiprocess's.

    The same first steps as ``multiprocess.forkserver._serve_one`` (signals back, unused
    descriptors closed, the fork server's and resource tracker's descriptors recorded),
    then the request is read. Returns the exit code (our targets leave by ``os._exit``).
    """
    from multiprocess import forkserver, process, resource_tracker, spawn, util
    from multiprocess.connection import Connection

    signal.set_wakeup_fd(-1)
    for sig, val in handlers.items():
        signal.signal(sig, val)
    for fd in unused_fds:
        os.close(fd)
    (
        forkserver._forkserver._forkserver_alive_fd,
        resource_tracker._resource_tracker._fd,
        *forkserver._forkserver._inherited_fds,
    ) = fds
    parent_sentinel = os.dup(child_r)
    source = os.fdopen(child_r, "rb", closefd=True)
    if source.peek(1)[:1] != MARKER:
        # multiprocess's own request: what spawn._main does, on the stream we peeked at.
        with source:
            current = process.current_process()
            current._inheriting = True
            try:
                spawn.prepare(spawn.reduction.pickle.load(source))
                started = spawn.reduction.pickle.load(source)
            finally:
                del current._inheriting
        return int(started._bootstrap(parent_sentinel))
    os.close(parent_sentinel)
    with source:
        sizes = source.read(2 + 2 * _LENGTH.size)
        (head_size,) = _LENGTH.unpack_from(sizes, 2)
        (body_size,) = _LENGTH.unpack_from(sizes, 2 + _LENGTH.size)
        settings = pickle.loads(source.read(head_size))  # noqa: S301 - from our own parent
        body = source.read(body_size)
    process.current_process().name = settings["name"]
    sys.path = settings["sys_path"]
    os.chdir(settings["dir"])
    if sizes[1:2] == _DILL:
        import dill

        target, args = dill.loads(body)  # noqa: S301 - from our own parent
    else:
        target, args = pickle.loads(body)  # noqa: S301 - from our own parent
    util._close_stdin()
    threading.main_thread()._set_native_id()  # type: ignore[attr-defined]
    util._run_after_forkers()
    conn = Connection(forkserver._forkserver._inherited_fds[0])
    target(conn, *args)
    return 0


_PEERCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid


def guard_fork_requests() -> None:
    """In the fork server: take fork requests from the orchestrator that started it only.

    Its listening socket is a path any process of the same user can connect to — a
    sub-agent's own code included (under ``network: true`` its bash even sees the path in
    /proc/net/unix). A request from it would be forked outside every sandbox and run what
    it pickled, and a malformed one would end the fork server's loop and every sibling
    with it. So each connection's peer (``SO_PEERCRED``, set by the kernel at
    ``connect``) must be this server's parent; anything else is dropped as an aborted
    connection, which multiprocess's loop skips, before a byte of it is read.
    """
    from multiprocess import reduction

    original = reduction.recvfds
    if getattr(original, "_agentcell_guard", False):
        return
    owner = os.getppid()

    def recvfds_from_owner(sock: socket.socket, size: int) -> list[int]:
        raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEERCRED.size)
        pid, _uid, _gid = _PEERCRED.unpack(raw)
        if pid != owner:
            raise ConnectionAbortedError(
                errno.ECONNABORTED, f"fork request from process {pid}, not the orchestrator"
            )
        fds: list[int] = original(sock, size)
        return fds

    recvfds_from_owner._agentcell_guard = True  # type: ignore[attr-defined]
    reduction.recvfds = recvfds_from_owner
