"""Fast checks of the capability drop and the seccomp filter's probe, each in a forked
child (both change the caller for good): the kill tests of ``make mutants
MUTANTS="capabilities seccomp"`` (mutants/run.py), with test_walls_privilege's."""

from __future__ import annotations

import ctypes
import io
import os
import subprocess
import sys
from typing import Any

import pytest
from agentcell.worker.sandbox import _capabilities, _mountns, _seccomp
from forked import in_child

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root: a normal user has none")
NOBODY = 65534


def test_the_probes_change_nothing_in_the_process_that_asks() -> None:
    # First in this file, and in a process of its own: a probe that took the caller for
    # its throwaway child would enter a namespace, drop or filter, and end the caller —
    # pytest itself, exiting 0, were it run in-process.
    script = (
        "import os\n"
        "from agentcell.worker.sandbox import _capabilities, _seccomp\n"
        "print(_capabilities.probe())\n"
        "print(_seccomp.probe()['available'])\n"
        "status = open('/proc/self/status').read()\n"
        "seccomp = [l.split()[1] for l in status.splitlines() if l.startswith('Seccomp:')]\n"
        "print('still here', os.getpid(), open('/proc/self/uid_map').read().split()[2], *seccomp)\n"
        "try:\n"
        "    print('a child left:', os.waitpid(-1, os.WNOHANG))\n"
        "except ChildProcessError:\n"
        "    print('no child left')\n"
    )
    with subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True) as run:
        out, _ = run.communicate(timeout=60)
    assert run.returncode == 0
    line, available, after, children = out.splitlines()
    assert line.startswith("none") and available == "True"
    assert children == "no child left"  # each probe reaped its throwaway child
    # The process that asked, not a copy of it: in the machine's namespace, unfiltered.
    assert after == f"still here {run.pid} 4294967295 0"


def _securebits() -> int:
    return int(_capabilities.dropper()._prctl(27, 0, 0, 0, 0))


@needs_root
def test_drop_empties_every_set_and_locks_exactly_the_securebits() -> None:
    def steps() -> Any:
        kept = _capabilities.drop()
        return kept, _capabilities.held(), _securebits(), _capabilities.holds_none()

    kept, held, bits, none = in_child(steps)["value"]
    assert kept == ""
    assert held == {"CapInh": 0, "CapPrm": 0, "CapEff": 0, "CapBnd": 0, "CapAmb": 0}
    assert bits == 0xEF == _capabilities.LOCKED_SECUREBITS
    assert none is True


@needs_root
def test_lock_keeps_the_own_sets_and_empties_the_bounding_set() -> None:
    def steps() -> Any:
        before = _capabilities.held()
        kept = _capabilities.lock()
        again = _capabilities.lock()  # locked already: nothing to do, nothing raised
        return before, kept, again, _capabilities.held(), _securebits()

    before, kept, again, after, bits = in_child(steps)["value"]
    assert kept == again == ""
    assert after["CapEff"] == before["CapEff"] != 0
    assert after["CapPrm"] == before["CapPrm"] != 0
    assert after["CapBnd"] == 0 and after["CapAmb"] == 0
    assert bits == _capabilities.LOCKED_SECUREBITS


@needs_root
def test_a_normal_user_outside_a_user_namespace_is_told_what_it_keeps() -> None:
    def steps() -> Any:
        os.setgroups([])
        os.setresgid(NOBODY, NOBODY, NOBODY)
        os.setresuid(NOBODY, NOBODY, NOBODY)
        kept = _capabilities.drop()
        return kept, _capabilities.held(), _securebits()

    kept, held, bits = in_child(steps)["value"]
    assert kept == "bounding set and securebits kept (no user namespace; no_new_privs holds)"
    assert held["CapEff"] == held["CapPrm"] == held["CapAmb"] == 0
    assert held["CapBnd"] != 0 and bits == 0


@needs_root
def test_a_normal_user_in_a_user_namespace_drops_everything() -> None:
    def steps() -> Any:
        os.setgroups([])
        os.setresgid(NOBODY, NOBODY, NOBODY)
        os.setresuid(NOBODY, NOBODY, NOBODY)
        if _mountns._enter_user_namespace():
            return "entered while not dumpable"  # it could not have mapped its uid
        _capabilities.dropper()._prctl(4, 1, 0, 0, 0)  # PR_SET_DUMPABLE: as a user's own
        if not _mountns._enter_user_namespace():
            return "no user namespace"
        return _capabilities.drop(), _capabilities.held(), _securebits()

    answer = in_child(steps)["value"]
    if answer == "no user namespace":
        pytest.skip("no unprivileged user namespaces here")
    kept, held, bits = answer
    assert kept == "" and not any(held.values()) and bits == _capabilities.LOCKED_SECUREBITS


def test_a_failing_step_raises_naming_it() -> None:
    def steps() -> Any:
        dropper = _capabilities.Dropper()
        dropper._capset = lambda header, data: -1  # the kernel refusing the last step
        return dropper.drop()

    answer = in_child(steps)
    assert answer["raised"].startswith("CapabilityError: [Errno"), answer
    assert "capset" in answer["raised"]


def test_held_reads_every_set_of_a_status_text() -> None:
    status = (
        "Name:\tx\nCapInh:\t0000000000000000\nCapPrm:\t0000000000000001\n"
        "CapEff:\t0000000000000000\nCapBnd:\t000001ffffffffff\nCapAmb:\t0000000000000000\n"
    )
    assert _capabilities.held(status) == {
        "CapInh": 0, "CapPrm": 1, "CapEff": 0, "CapBnd": 0x1FFFFFFFFFF, "CapAmb": 0,
    }  # fmt: skip
    assert not _capabilities.holds_none(status)
    empty = "".join(f"{name}:\t{'0' * 16}\n" for name in ("CapInh", "CapPrm", "CapBnd"))
    assert _capabilities.holds_none(empty)


def test_last_capability_is_the_kernels() -> None:
    with open("/proc/sys/kernel/cap_last_cap") as file:
        assert _capabilities.last_capability() == int(file.read())


def test_the_probe_says_none_where_a_sub_agent_gets_a_user_namespace() -> None:
    line = _capabilities.probe()
    assert line == "none (in a user namespace of its own)", line


# -- the seccomp filter, as agentcell sandbox reports it ---------------------------------------


def test_the_probe_lists_every_refused_call_and_socket() -> None:
    report = _seccomp.probe()
    if not report["available"]:
        pytest.skip(report["reason"])
    machine = _seccomp.arch()
    assert machine is not None
    calls = list(_seccomp.refused_calls(machine))
    ioctls = [f"ioctl {name}" for name in _seccomp.REFUSED_IOCTLS]
    x32 = ["x32 system calls"] if machine == "x86_64" else []
    sockets = ["socket(AF_PACKET)", "socket(SOCK_RAW)"]
    assert report["refuses"] == [*calls, *ioctls, *x32, *sockets]
    assert report["bash_refuses"] == [*calls, *ioctls, *x32, *sockets, "socket(AF_UNIX)"]


def test_only_calls_an_architecture_lacks_are_left_out() -> None:
    assert _seccomp.refused_calls("x86_64") == _seccomp.REFUSED_CALLS
    arm = _seccomp.refused_calls("aarch64")
    assert set(_seccomp.REFUSED_CALLS) - set(arm) == {"iopl", "ioperm"}
    assert [name for name in _seccomp.REFUSED_CALLS if name in arm] == list(arm)


def _set_effective(low: int, high: int = 0) -> None:
    """This (forked, root) process's effective set: ``low`` and ``high`` 32-bit words."""
    dropper = _capabilities.dropper()
    data = (_capabilities._Data * 2)()
    dropper._libc.capget(ctypes.byref(dropper._header), data)
    data[0].effective, data[1].effective = low, high
    assert dropper._capset(ctypes.byref(dropper._header), data) == 0


@needs_root
def test_setpcap_is_read_from_its_own_bit_of_the_low_word() -> None:
    setpcap = 1 << 8

    def steps() -> Any:
        dropper = _capabilities.Dropper()
        answers = []
        permitted = _capabilities.held()["CapPrm"]  # what the effective set may hold
        all_low, all_high = permitted & 0xFFFFFFFF, permitted >> 32
        for low, high in ((setpcap, 0), (all_low & ~setpcap, all_high), (setpcap | 1 | 8, 0)):
            _set_effective(low, high)
            answers.append(dropper._has_setpcap())
        return answers

    assert in_child(steps)["value"] == [True, False, True]


@needs_root
def test_lock_drops_the_last_capability_left_in_the_bounding_set() -> None:
    # Locked securebits and one capability left, the kernel's last: lock must see it.
    def steps() -> Any:
        dropper = _capabilities.Dropper()
        last = _capabilities.last_capability()
        for number in range(last):
            dropper._prctl(24, number, 0, 0, 0)  # PR_CAPBSET_DROP
        dropper._prctl(28, _capabilities.LOCKED_SECUREBITS, 0, 0, 0)  # PR_SET_SECUREBITS
        before = _capabilities.held()["CapBnd"]
        dropper.lock()
        return before, _capabilities.held()["CapBnd"], last

    before, after, last = in_child(steps)["value"]
    assert before == 1 << last and after == 0


def test_a_kernel_file_that_does_not_read_as_a_number_gives_the_highest_possible(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_capabilities, "open", lambda *a, **k: io.BytesIO(b"n/a\n"), raising=False)
    assert _capabilities.last_capability() == 63
    monkeypatch.setattr(_capabilities, "open", _missing, raising=False)
    assert _capabilities.last_capability() == 63


def _missing(*args: Any, **kwargs: Any) -> Any:
    raise FileNotFoundError("/proc/sys/kernel/cap_last_cap")


@needs_root
def test_bounded_reads_the_bounding_set_and_changes_nothing() -> None:
    def steps() -> Any:
        dropper = _capabilities.Dropper()
        full = dropper._bounded()
        still = _capabilities.held()["CapBnd"]
        for number in range(_capabilities.last_capability() + 1):
            dropper._prctl(24, number, 0, 0, 0)  # PR_CAPBSET_DROP
        return full, still, dropper._bounded()

    full, still, empty = in_child(steps)["value"]
    assert full is True and still != 0 and empty is False


@needs_root
def test_lock_locks_the_securebits_of_a_process_whose_bounding_set_is_empty() -> None:
    def steps() -> Any:
        dropper = _capabilities.Dropper()
        for number in range(_capabilities.last_capability() + 1):
            dropper._prctl(24, number, 0, 0, 0)  # PR_CAPBSET_DROP, securebits left as they are
        before = _securebits()
        return before, dropper.lock(), _securebits()

    before, kept, after = in_child(steps)["value"]
    assert before == 0 and kept == "" and after == _capabilities.LOCKED_SECUREBITS


@needs_root
def test_a_process_locked_and_without_capabilities_locks_again_quietly() -> None:
    # The MCP warden's case: it inherits locked securebits and an empty bounding set, and
    # holds no CAP_SETPCAP to set them again.
    def steps() -> Any:
        _capabilities.drop()
        again = _capabilities.Dropper()
        return again.lock(), again.drop(), _capabilities.held()

    lock, drop, held = in_child(steps)["value"]
    assert lock == "" and drop == "" and not any(held.values())


def test_a_preexec_whose_drop_fails_ends_its_child_with_126() -> None:
    pid = os.fork()
    if pid == 0:
        try:
            dropper = _capabilities.Dropper()
            dropper._capset = lambda header, data: -1
            dropper.drop_in_child()
        finally:
            os._exit(0)  # the command would have run: never reached
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 126


@needs_root
def test_the_probe_says_what_it_found_in_each_case(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_mountns, "_enter_user_namespace", lambda: False)
    assert _capabilities.probe() == "none (no user namespace)"
    monkeypatch.setattr(_capabilities, "drop", lambda: "the bounding set kept")
    assert _capabilities.probe() == "none effective (the bounding set kept)"

    def refused() -> str:
        raise _capabilities.CapabilityError(1, "capset: Operation not permitted")

    monkeypatch.setattr(_capabilities, "drop", refused)
    assert _capabilities.probe() == "not dropped here: [Errno 1] capset: Operation not permitted"


@needs_root
def test_lock_clears_the_ambient_set() -> None:
    def steps() -> Any:
        dropper = _capabilities.dropper()
        data = (_capabilities._Data * 2)()
        dropper._libc.capget(ctypes.byref(dropper._header), data)
        data[0].inheritable |= 1 << 10  # CAP_NET_BIND_SERVICE, then raised as ambient
        assert dropper._capset(ctypes.byref(dropper._header), data) == 0
        assert dropper._prctl(47, 2, 10, 0, 0) == 0  # PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE
        before = _capabilities.held()["CapAmb"]
        _capabilities.Dropper().lock()
        return before, _capabilities.held()["CapAmb"]

    before, after = in_child(steps)["value"]
    assert before == 1 << 10 and after == 0


@needs_root
def test_a_step_the_kernel_refuses_is_said_with_its_error() -> None:
    # KEEP_CAPS set and locked: no process of agentcell's has it, and none may unset it.
    def steps() -> Any:
        dropper = _capabilities.Dropper()
        assert dropper._prctl(28, 0xFF, 0, 0, 0) == 0  # PR_SET_SECUREBITS: every bit
        return dropper.lock()

    answer = in_child(steps)
    assert answer == {
        "raised": "CapabilityError: [Errno 1] prctl(PR_SET_SECUREBITS): Operation not permitted"
    }


def _status_field(name: str) -> str:
    with open("/proc/self/status") as status:
        return next(line.split(":")[1].strip() for line in status if line.startswith(name + ":"))


def test_a_preexec_installs_the_filter_and_then_it_is_said_available() -> None:
    ready = _seccomp.Prepared()
    if ready.reason is not None:
        pytest.skip(ready.reason)
    assert ready.process is not None and ready.bash is not None

    def steps() -> Any:
        assert ready.bash is not None
        ready.bash.install_in_child()  # exits 126 on any failure: in_child then fails
        return _status_field("Seccomp"), _status_field("NoNewPrivs"), _seccomp.unavailable()

    assert in_child(steps)["value"] == ["2", "1", None]


def test_the_fork_servers_filters_are_the_ones_its_children_use(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_seccomp, "_prepared", None)
    _seccomp.warm()
    warmed = _seccomp._prepared
    assert warmed is not None and _seccomp.prepared() is warmed
    assert warmed.process is not None and not warmed.process.refuse_unix_sockets
    assert warmed.bash is not None and warmed.bash.refuse_unix_sockets


def test_where_no_filter_can_be_had_the_probe_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_seccomp, "unavailable", lambda: "no seccomp on this kernel")
    assert _seccomp.probe() == {
        "available": False,
        "reason": "no seccomp on this kernel",
        "refuses": [],
        "bash_refuses": [],
    }


def test_install_filters_a_thread_already_running() -> None:
    ready = _seccomp.Prepared()
    if ready.reason is not None or ready.process is None:
        pytest.skip(str(ready.reason))
    process = ready.process

    def steps() -> Any:
        import threading

        stop = threading.Event()
        thread = threading.Thread(target=stop.wait)
        thread.start()
        process.install()  # TSYNC: every thread of the process
        modes = []
        for tid in os.listdir("/proc/self/task"):
            with open(f"/proc/self/task/{tid}/status") as status:
                modes += [line.split()[1] for line in status if line.startswith("Seccomp:")]
        stop.set()
        thread.join()
        return modes

    assert in_child(steps)["value"] == ["2", "2"]


def _refusing_syscall(*args: Any) -> int:
    ctypes.set_errno(22)  # EINVAL, as the kernel answers a filter it will not take
    return -1


def test_a_filter_the_kernel_refuses_raises_and_ends_a_preexec_with_126(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ready = _seccomp.Prepared()
    if ready.reason is not None or ready.process is None:
        pytest.skip(str(ready.reason))
    monkeypatch.setattr(_seccomp, "_syscall", _refusing_syscall)
    answer = in_child(ready.process.install)
    assert answer == {
        "raised": "SeccompError: [Errno 22] seccomp(SET_MODE_FILTER): Invalid argument"
    }
    pid = os.fork()
    if pid == 0:
        try:
            ready.process.install_in_child()
        finally:
            os._exit(0)  # the command would have run without its wall
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 126


def test_a_probe_whose_child_fails_says_none_is_available(monkeypatch: pytest.MonkeyPatch) -> None:
    if _seccomp.unavailable() is not None:
        pytest.skip("no seccomp here")

    def refused(self: Any) -> None:
        raise _seccomp.SeccompError(22, "seccomp(SET_MODE_FILTER): Invalid argument")

    monkeypatch.setattr(_seccomp.Filter, "install", refused)
    report = _seccomp.probe()
    assert report["available"] is False
    assert report["reason"] == "the filter could not be installed here"
