"""Tests that kill the mutants of worker/_fork_request.py (the fork server's lean start
request and its peer check) that its child-level tests let live (issue 21, item 9).

Each runs in a fraction of a second, so ``make mutants`` runs them first: the request's
encoding here, and the fork server's side of it in a throwaway process
(``fork_request_harness.py``) that plays the fork server around ``serve_one`` and gives
the peer check a process below its owner, the owner, and one above. The child-level
tests (``test_fork_request.py``, and ``test_sandbox.py``'s attack on the fork server from
a real sub-agent) still prove both in real children.
"""

from __future__ import annotations

import json
import os
import pickle
import signal
import struct
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from agentcell.worker import _fork_request

HARNESS = Path(__file__).with_name("fork_request_harness.py")


def _harness(*args: str) -> dict[str, Any]:
    """Run the harness in its own session; every process of it ends with the test."""
    process = subprocess.Popen(
        [sys.executable, str(HARNESS), *args],
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


def test_a_request_is_the_marker_its_kind_two_lengths_the_settings_and_the_body(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    request = _fork_request.encode_request(print, ("a", 2), "agentcell-child-3")
    kind, settings, body = _parts(request)
    assert kind == b"p"
    assert settings == {"name": "agentcell-child-3", "sys_path": sys.path, "dir": str(tmp_path)}
    assert pickle.loads(body) == (print, ("a", 2))


def _local_function() -> Any:
    def target() -> None:
        pass

    return target


@pytest.mark.parametrize(
    "target, args",
    [
        (_local_function(), ()),  # AttributeError from pickle: a local object
        (lambda: None, ()),  # PicklingError: no name to find it by
        (print, (threading.Lock(),)),  # TypeError: a lock cannot be pickled
    ],
    ids=["local-function", "lambda", "lock-argument"],
)
def test_whatever_the_stdlib_pickle_refuses_travels_by_dill(target: Any, args: Any) -> None:
    import dill

    kind, _, body = _parts(_fork_request.encode_request(target, args, "agentcell-child-1"))
    assert kind == b"d"
    sent, sent_args = dill.loads(body)
    assert sent.__name__ == target.__name__ and len(sent_args) == len(args)


@pytest.mark.parametrize("order", ["encoded-before", "encoded-after"])
def test_the_child_gets_the_requests_name_path_directory_arguments_and_descriptors(
    tmp_path: Path, order: str
) -> None:
    # Both orders of the two folders: the directory is changed whichever sorts first.
    low, high = tmp_path / "a", tmp_path / "b"
    low.mkdir(), high.mkdir()
    encoded, before = (low, high) if order == "encoded-before" else (high, low)
    seen = _harness("serve", "plain", str(encoded), str(before))
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


def test_the_child_drops_what_the_fork_server_held_for_itself(tmp_path: Path) -> None:
    seen = _harness("serve", "plain", str(tmp_path), str(tmp_path))
    assert seen["wakeup_fd"] == -1  # the server's wake-up descriptor is no longer set
    assert seen["usr1_default"] is True  # the handlers it was given are back
    assert seen["unused_closed"] is True
    assert seen["request_closed"] is True


def test_a_dill_request_is_read_by_dill(tmp_path: Path) -> None:
    seen = _harness("serve", "dill", str(tmp_path), "/")
    assert seen["loads"] == ["pickle", "dill"]
    assert seen["args"] == ["made in a closure", "first", 2]
    assert seen["cwd"] == str(tmp_path) and seen["code"] == 0


def test_the_peer_check_lets_in_its_owner_only_and_wraps_once() -> None:
    seen = _harness("guard")
    # The three peers: the process below the owner, the owner, one above it (as pids
    # are handed out, both sides of a wrong order are caught; the check holds either way).
    first, me = seen["first"], seen["me"]
    assert seen["below"] == f"refused True fork request from process {first}, not the orchestrator"
    assert seen["above"] == f"refused True fork request from process {me}, not the orchestrator"
    assert seen["owner_sends"] == "accepted 1"
    assert seen["marked"] is True
    assert seen["wrapped_once"] is True
