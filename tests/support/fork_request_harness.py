"""Runs worker/child/_fork_request.py's fork-server side in a throwaway process, for
tests/mutants/test_mutation_kills_fork.py: what a fork server's child does with one request, and
what the fork server's peer check accepts. It prints one JSON object.

    python fork_request_harness.py serve KIND CWD_AT_ENCODE CWD_BEFORE
    python fork_request_harness.py serve-process OUT
    python fork_request_harness.py guard
    python fork_request_harness.py check     # every check of the test file, no pytest

``check`` is what ``make mutants`` runs first for this module: the test file's checks
without pytest's start-up (a tenth of the CPU per mutant), failing at the first.

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
import struct
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

from agentcell.worker.child import _fork_request

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


def inheriting_now() -> bool:
    """Called while the child unpickles what it is sent (``Probe``'s reduction)."""
    from multiprocess import process

    return bool(getattr(process.current_process(), "_inheriting", False))


class Probe:
    def __reduce__(self) -> tuple[Any, tuple[()]]:
        return inheriting_now, ()


def report_process(inheriting: bool, out: str) -> None:
    """A multiprocess ``Process``'s target: what its unpickling saw."""
    Path(out).write_text(json.dumps({"inheriting": inheriting}))


def serve_process(out: str) -> dict[str, Any]:
    """multiprocess's own request (preparation data, then the pickled ``Process``), served
    by ``serve_one`` as the fork server's children serve it."""
    import io

    import multiprocess
    from multiprocess import context, reduction, spawn

    ctx = multiprocess.get_context("forkserver")
    started = ctx.Process(target=report_process, args=(Probe(), out), name="agentcell-plain")
    buffer = io.BytesIO()
    context.set_spawning_popen(object())  # what Popen does while it pickles the Process
    try:
        reduction.dump(spawn.get_preparation_data(started._name), buffer)
        reduction.dump(started, buffer)
    finally:
        context.set_spawning_popen(None)
    child_r, request_w = os.pipe()
    os.write(request_w, buffer.getvalue())
    os.close(request_w)
    fds = [os.open(os.devnull, os.O_RDONLY) for _ in range(3)]
    code = _fork_request.serve_one(child_r, fds, [], {})
    return {"code": code, **json.loads(Path(out).read_text())}


def check_process_serving(folder: Path) -> None:
    """The unpickling of a multiprocess request runs as multiprocess's own does: marked as
    inheriting (manager proxies are not counted twice, no process starts from it)."""
    seen = run("serve-process", str(folder / "seen.json"))
    assert seen == {"code": 0, "inheriting": True}


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


def run(*args: str) -> dict[str, Any]:
    """This harness in a process of its own session; every process of it ends here."""
    process = subprocess.Popen(
        [sys.executable, __file__, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    assert process.returncode == 0, err.decode()
    result: dict[str, Any] = json.loads(out)
    return result


def _parts(request: bytes) -> tuple[bytes, dict[str, Any], bytes]:
    sizes = struct.Struct(">II")
    assert request[:1] == _fork_request.MARKER
    head_size, body_size = sizes.unpack_from(request, 2)
    head_end = 2 + sizes.size + head_size
    assert len(request) == head_end + body_size
    return request[1:2], pickle.loads(request[2 + sizes.size : head_end]), request[head_end:]


def check_encoding(folder: Path) -> None:
    """A request is the marker, its kind, two lengths, the settings and the body."""
    os.chdir(folder)
    kind, settings, body = _parts(_fork_request.encode_request(print, ("a", 2), "child-3"))
    assert kind == b"p"
    assert settings == {"name": "child-3", "sys_path": sys.path, "dir": str(folder)}
    assert pickle.loads(body) == (print, ("a", 2))


def _local_function() -> Any:
    def target() -> None:
        pass

    return target


#: What the stdlib pickle refuses, each for another of the three errors it raises.
BY_DILL = {
    "local-function": (_local_function(), ()),  # AttributeError: a local object
    "lambda": (lambda: None, ()),  # PicklingError: no name to find it by
    "lock-argument": (print, (threading.Lock(),)),  # TypeError: a lock cannot be pickled
}


def check_by_dill(target: Any, args: Any) -> None:
    import dill

    kind, _, body = _parts(_fork_request.encode_request(target, args, "child-1"))
    assert kind == b"d"
    sent, sent_args = dill.loads(body)
    assert sent.__name__ == target.__name__ and len(sent_args) == len(args)


def check_serving(encoded: Path, before: Path) -> None:
    """The child gets the request's name, path, directory, arguments and descriptors."""
    seen = run("serve", "plain", str(encoded), str(before))
    assert seen["code"] == 0
    assert seen["args"] == ["first", 2]
    assert seen["name"] == "agentcell-child-77"
    assert seen["cwd"] == str(encoded)
    assert seen["path_mark"] is True
    # A plain request is read by the stdlib's unpickler, settings and body alike.
    assert seen["loads"] == ["pickle", "pickle"]
    fds = seen["fds"]
    assert (seen["alive_fd"], seen["tracker_fd"]) == (fds["alive"], fds["tracker"])
    assert seen["inherited"] == [fds["conn"], fds["other"]]
    assert seen["conn_fd"] == fds["conn"]  # the first inherited descriptor, not another
    # What the fork server held for itself is dropped.
    assert seen["wakeup_fd"] == -1  # its wake-up descriptor is no longer set
    assert seen["usr1_default"] is True  # the handlers it was given are back
    assert seen["unused_closed"] is True
    assert seen["request_closed"] is True


def check_dill_serving(folder: Path) -> None:
    seen = run("serve", "dill", str(folder), "/")
    assert seen["loads"] == ["pickle", "dill"]
    assert seen["args"] == ["made in a closure", "first", 2]
    assert seen["cwd"] == str(folder) and seen["code"] == 0


def check_peer_guard() -> None:
    """The peer check lets in its owner only, and wraps ``recvfds`` once."""
    seen = run("guard")
    # The three peers: the process below the owner, the owner, one above it (as pids
    # are handed out, both sides of a wrong order are caught; the check holds either way).
    first, me = seen["first"], seen["me"]
    assert seen["below"] == f"refused True fork request from process {first}, not the orchestrator"
    assert seen["above"] == f"refused True fork request from process {me}, not the orchestrator"
    assert seen["owner_sends"] == "accepted 1"
    assert seen["marked"] is True
    assert seen["wrapped_once"] is True


def check_all() -> None:
    with tempfile.TemporaryDirectory(prefix="agentcell-fork-request-") as tmp:
        low, high = Path(tmp, "a"), Path(tmp, "b")
        low.mkdir(), high.mkdir()
        check_encoding(low)
        for target, args in BY_DILL.values():
            check_by_dill(target, args)
        check_serving(low, high)
        check_serving(high, low)  # both orders: the directory changes whichever sorts first
        check_dill_serving(low)
        check_process_serving(low)
        check_peer_guard()


if __name__ == "__main__":
    mode, *rest = sys.argv[1:]
    if mode == "check":
        check_all()
    else:
        modes = {"serve": serve, "serve-process": serve_process, "guard": guard}
        print(json.dumps(modes[mode](*rest)))
