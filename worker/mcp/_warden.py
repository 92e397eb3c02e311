"""The warden of one stdio MCP server: run as a script, it starts the server as its child
and ends the server's whole tree — helpers that left with ``setsid`` or a double fork
included — when the server exits, when its owner (the agent process) is gone, when it
is told to stop (SIGTERM, SIGINT, SIGHUP), or ``STOP_GRACE_S`` after the SDK closed the
server's stdin if the server is still there.

Why a process of its own: npx- and uv-launched servers fork helpers that leave the
server's session, so the SDK's ``killpg`` misses them, and once the server exits they are
orphans of whoever is the nearest subreaper. The warden is that subreaper
(``PR_SET_CHILD_SUBREAPER``), so every process the server ever started stays in the
warden's subtree, where a /proc walk finds it. It is started before the sub-agent's walls
go up and is outside its Landlock domain, so it may signal the server's processes, which
the sub-agent itself may not (Landlock's signal scope): the sub-agent never has to.

Run by path (``python _warden.py OWNER STATUS_FILE SECCOMP COMMAND ARGS...``), not
as ``-m agentcell...``: it imports nothing of agentcell, so it starts in milliseconds.
``STATUS_FILE`` (or ``-``) receives one line if the server cannot be run or exits: the
reason, for the agent's "failed to start" message. ``SECCOMP`` (or ``-``) is the
sub-agent's filter, ``<seccomp syscall number>:<program hex>`` (``worker/sandbox/_seccomp.py``),
installed in the server's process before it runs the server: the server starts before the
sub-agent's walls go up and would not otherwise be under it. Neither the warden nor the
server gains a capability, whatever user runs agentcell: the sub-agent locked its
securebits and emptied its bounding set before it started them (``_sandbox.before_servers``).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import signal
import stat
import sys

_PR_SET_PDEATHSIG = 1
_PR_SET_NO_NEW_PRIVS = 38
_PR_SET_CHILD_SUBREAPER = 36
_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
#: The server could not be executed (the shell's code for "command not found").
EXIT_CANNOT_RUN = 127
#: How long a server whose stdin was closed has to exit by itself before its tree is
#: ended (under the SDK's own wait, 2 s, so that its stop sees the exit).
STOP_GRACE_S = 1.0


class _Stop(Exception):
    """A stop signal arrived."""


def _prctl(option: int, value: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(option, value, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))


def _on_stop(signum: int, frame: object) -> None:
    raise _Stop


def _children() -> dict[int, list[int]]:
    """Every process's children, from /proc (a process that exits meanwhile is skipped)."""
    tree: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as handle:
                stat = handle.read()
        except OSError:
            continue
        # Fields after the command name, which may itself hold spaces and parentheses.
        fields = stat[stat.rfind(b")") + 2 :].split()
        tree.setdefault(int(fields[1]), []).append(int(name))
    return tree


def descendants(pid: int) -> list[int]:
    tree = _children()
    found: list[int] = []
    stack = list(tree.get(pid, ()))
    while stack:
        child = stack.pop()
        found.append(child)
        stack.extend(tree.get(child, ()))
    return found


def end_tree() -> None:
    """SIGKILL everything below this process and reap it, until nothing is left: as a
    subreaper, whatever is still alive anywhere below is reaped here in the end."""
    while True:
        for pid in descendants(os.getpid()):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            return


def _note(status_file: str, line: str) -> None:
    """Write the one line, into a new file only: the first note wins, and nothing found
    at that path (a link, a file someone put there) is followed or overwritten."""
    if status_file == "-":
        return
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    with contextlib.suppress(OSError):
        fd = os.open(status_file, flags, 0o600)
        try:
            os.write(fd, line.encode(errors="replace"))
        finally:
            os.close(fd)


def _install_seccomp(filter_spec: str) -> None:
    """Install ``NR:HEX`` (a classic BPF program) as this process's seccomp filter."""
    if filter_spec == "-":
        return
    number, code = filter_spec.split(":")
    libc = ctypes.CDLL(None, use_errno=True)
    program = ctypes.create_string_buffer(bytes.fromhex(code))
    # struct sock_fprog on a little-endian 64-bit ABI: the length, padding, the pointer.
    fprog = (ctypes.c_ulong * 2)(len(code) // 16, ctypes.addressof(program))
    _prctl(_PR_SET_NO_NEW_PRIVS, 1)
    if libc.syscall(int(number), 1, 0, fprog) != 0:  # SECCOMP_SET_MODE_FILTER
        raise OSError(ctypes.get_errno(), "cannot install the seccomp filter")


def _exec_server(warden: int, status_file: str, seccomp: str, command: list[str]) -> None:
    """In the forked child: die with the warden, take the filter, then become the server."""
    for number in _STOP_SIGNALS:
        signal.signal(number, signal.SIG_DFL)
    _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != warden:  # the warden died before the prctl
        os._exit(1)
    try:
        _install_seccomp(seccomp)
    except OSError as exc:
        _note(status_file, f"cannot install the seccomp filter: {exc.strerror}")
        os._exit(126)
    try:
        os.execvp(command[0], command)  # noqa: S606 (the configured command, as given)
    except OSError as exc:
        message = f"cannot run {command[0]!r}: {exc.strerror}"
        _note(status_file, message)
        print(message, file=sys.stderr)
        os._exit(EXIT_CANNOT_RUN)


def _describe(status: int) -> str:
    code = os.waitstatus_to_exitcode(status)
    if code < 0:
        return f"the server was killed by {signal.Signals(-code).name}"
    return f"the server exited with status {code}"


def _keep_stdin() -> int | None:
    """A copy of the server's stdin, to see the SDK close it (None: not a pipe)."""
    try:
        if stat.S_ISFIFO(os.fstat(0).st_mode):
            return os.dup(0)
    except OSError:
        pass
    return None


def _watch(owner_fd: int, server_fd: int, stdin: int | None) -> bool:
    """Wait for the end: True when the server exited, False when its owner is gone or
    the SDK closed the server's stdin (its polite stop) ``STOP_GRACE_S`` ago and the
    server is still there. A stopping sub-agent may not signal us (Landlock): closing
    the server's stdin is all it can do, so that is the stop it gets."""
    poller = select.poll()
    poller.register(owner_fd, select.POLLIN)
    poller.register(server_fd, select.POLLIN)
    if stdin is not None:
        poller.register(stdin, 0)  # the hang-up alone: what the server reads stays its
    timeout_ms: int | None = None
    while True:
        ready = dict(poller.poll(timeout_ms))
        if server_fd in ready:
            return True
        if owner_fd in ready or (timeout_ms is not None and not ready):
            return False
        if stdin is not None and ready.get(stdin, 0) & (select.POLLHUP | select.POLLERR):
            poller.unregister(stdin)
            timeout_ms = int(STOP_GRACE_S * 1000)


def serve(owner: int, status_file: str, seccomp: str, command: list[str]) -> int:
    _prctl(_PR_SET_CHILD_SUBREAPER, 1)
    try:
        owner_fd = os.pidfd_open(owner)
    except ProcessLookupError:
        return 1
    if os.getppid() != owner:  # the owner died before we could watch it
        return 1
    for number in _STOP_SIGNALS:
        signal.signal(number, _on_stop)
    code = 1
    warden = os.getpid()
    try:
        server = os.fork()
        if server == 0:
            _exec_server(warden, status_file, seccomp, command)
        stdin = _keep_stdin()
        # The server holds the SDK's pipes now; ours go, so that its output ends when the
        # server's tree is gone (not when the warden leaves as well).
        null = os.open(os.devnull, os.O_RDWR)
        os.dup2(null, 0)
        os.dup2(null, 1)
        os.close(null)
        server_fd = os.pidfd_open(server)
        if _watch(owner_fd, server_fd, stdin):
            _, status = os.waitpid(server, 0)
            _note(status_file, _describe(status))
            code = os.waitstatus_to_exitcode(status)
    except _Stop:
        pass
    finally:
        for number in _STOP_SIGNALS:
            signal.signal(number, signal.SIG_IGN)  # nothing interrupts the clean-up
        end_tree()
    return code if code >= 0 else 1


if __name__ == "__main__":
    sys.exit(serve(int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4:]))
