"""Runs worker/_fork_request.py's fork-server side in a throwaway process, for
tests/test_mutation_kills_fork.py: what a fork server's child does with one request, and
what the fork server's peer check accepts. It prints one JSON object.

    python fork_request_harness.py serve KIND CWD_AT_ENCODE CWD_BEFORE
    python fork_request_harness.py guard

``serve`` plays the fork server around ``serve_one``: the descriptors it passes, the
handlers it restores, a wake-up descriptor to be cleared, a request in a pipe. ``guard``
forks two generations so that the peer check sees a process below it, its owner, and one
above it (``SO_PEERCRED`` of a socket pair is the process that made it).
"""

from __future__ import annotations

import errno
import json
import os
import pickle
import signal
import socket
import sys
from typing import Any

from agentcell.worker import _fork_request

SEEN: dict[str, Any] = {}
LOADS: list[str] = []
PATH_MARK = "/agentcell-harness/path-mark"


def report(conn: Any, *args: Any) -> None:
    """The target: what the child looks like when its target runs."""
    from multiprocess import forkserver, process, resource_tracker

    server = forkserver._forkserver
    SEEN.update(
        args=list(args),
        name=process.current_process().name,
        cwd=os.getcwd(),
        path_mark=PATH_MARK in sys.path,
        conn_fd=conn.fileno(),
        alive_fd=server._forkserver_alive_fd,
        tracker_fd=resource_tracker._resource_tracker._fd,
        inherited=list(server._inherited_fds),
        wakeup_fd=signal.set_wakeup_fd(-1),
        usr1_default=signal.getsignal(signal.SIGUSR1) == signal.SIG_DFL,
    )


def _closed(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError as error:
        return error.errno == errno.EBADF
    return False


def _record_loads() -> None:
    import dill

    real_pickle, real_dill = pickle.loads, dill.loads

    def by_pickle(data: bytes, /, **kw: Any) -> Any:
        LOADS.append("pickle")
        return real_pickle(data, **kw)

    def by_dill(data: bytes, **kw: Any) -> Any:
        LOADS.append("dill")
        return real_dill(data, **kw)

    pickle.loads, dill.loads = by_pickle, by_dill  # type: ignore[assignment]


def serve(kind: str, cwd_at_encode: str, cwd_before: str) -> dict[str, Any]:
    os.chdir(cwd_at_encode)
    sys.path.append(PATH_MARK)
    mark = "made in a closure"
    target: Any = report
    if kind == "dill":
        target = lambda conn, *args: report(conn, mark, *args)  # noqa: E731 - dill only
    request = _fork_request.encode_request(target, ("first", 2), "agentcell-child-77")
    sys.path.remove(PATH_MARK)
    os.chdir(cwd_before)
    child_r, request_w = os.pipe()
    request_pipe = os.fstat(child_r).st_ino
    os.write(request_w, request)
    os.close(request_w)
    alive, tracker, conn_fd, other, unused = (os.open(os.devnull, os.O_RDONLY) for _ in range(5))
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)
    _record_loads()
    handlers = {signal.SIGUSR1: signal.SIG_DFL}
    code = _fork_request.serve_one(child_r, [alive, tracker, conn_fd, other], [unused], handlers)
    return {
        **SEEN,
        "code": code,
        "loads": LOADS,
        "fds": {"alive": alive, "tracker": tracker, "conn": conn_fd, "other": other},
        "wake_w": wake_w,
        "unused_closed": _closed(unused),
        # Its number may be taken again since (stdin's /dev/null): the pipe itself is gone.
        "request_closed": _closed(child_r) or os.fstat(child_r).st_ino != request_pipe,
    }


def _peer_check(sock: socket.socket) -> str:
    from multiprocess import reduction

    try:
        fds = reduction.recvfds(sock, 1)
    except ConnectionAbortedError as error:
        return f"refused {error.errno == errno.ECONNABORTED} {error.strerror}"
    return f"accepted {len(fds)}"


def _grandchild(below: socket.socket, owners: socket.socket, out: int) -> None:
    """Its owner (``getppid``) is the middle process; ``below`` was made by the first."""
    from multiprocess import reduction

    _fork_request.guard_fork_requests()
    guard = reduction.recvfds
    _fork_request.guard_fork_requests()  # a second call wraps nothing again
    above, above_peer = socket.socketpair()
    reduction.sendfds(above_peer, [0])  # waiting already, should the check let it in
    result = {
        "owner": os.getppid(),
        "me": os.getpid(),
        "marked": getattr(guard, "_agentcell_guard", None),
        "wrapped_once": reduction.recvfds is guard,
        "below": _peer_check(below),
        "above": _peer_check(above),
        "owner_sends": _peer_check(owners),
    }
    os.write(out, json.dumps(result).encode())


def guard() -> dict[str, Any]:
    from multiprocess import reduction

    below, below_peer = socket.socketpair()
    out_r, out_w = os.pipe()
    reduction.sendfds(below_peer, [0])  # waiting already, should the check let it in
    middle = os.fork()
    if middle == 0:
        owners, owners_peer = socket.socketpair()
        child = os.fork()
        if child == 0:
            try:
                _grandchild(below, owners, out_w)
            finally:
                os._exit(0)
        try:
            reduction.sendfds(owners_peer, [0])
            os.waitpid(child, 0)
        finally:
            os._exit(0)
    os.close(out_w)
    os.waitpid(middle, 0)
    with os.fdopen(out_r, "rb") as pipe:
        result: dict[str, Any] = json.loads(pipe.read())
    result["first"] = os.getpid()
    return result


if __name__ == "__main__":
    mode, *rest = sys.argv[1:]
    print(json.dumps(serve(*rest) if mode == "serve" else guard()))
