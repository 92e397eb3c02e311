"""Landlock rule descriptors opened once in the fork server (worker/sandbox/_landlock_held.py).

A real sub-agent (the default ``workspace`` sandbox, a scripted model server, bash) adds
the rules for the shared paths from the descriptors it inherited, opens only its own
(the workdir, the home's git config), and its walls still hold: ``/etc/shadow`` stays
unreadable, ``/usr`` unwritable, the runtime runs. The control run, with the held
descriptors forgotten, opens every shared path itself.
"""

from __future__ import annotations

import functools
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import held_paths_child
import pytest
from agentcell.protocol import RunStatus
from agentcell.worker import probe_sandbox
from agentcell.worker.sandbox import _landlock_held
from conftest import SpawnRecorder
from model_servers import ModelServer
from sandbox_util import SEP, bash_script, delegate_bash_on

CAPS = probe_sandbox()
pytestmark = pytest.mark.skipif(
    not CAPS["landlock_scopes"], reason="needs Landlock ABI 6 (this project's CI has 7)"
)

#: Paths every child's ruleset names and the fork server holds.
SHARED = ["/usr", "/etc", "/dev/null", "/etc/passwd", os.path.realpath(sys.base_prefix)]


@pytest.fixture
def served(model_server: ModelServer, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModelServer]:
    monkeypatch.setenv("OPENAI_BASE_URL", model_server.openai_base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-held-descriptors-test-key")
    yield model_server


COMMANDS = [
    "cat /etc/shadow && echo SHADOW-READ",
    "echo x > /usr/agentcell-held-test && echo USR-WRITTEN",
    "head -c 0 /etc/passwd && echo PASSWD-OK",
    "python3 -c 'print(\"RUNTIME-OK\")'",
    "echo work > inside.txt && cat inside.txt",
    # Nothing bash runs has a held descriptor (close-on-exec, and bash's own start
    # closes what it does not pass). A descriptor bash opens for a moment (the pipe's)
    # may be gone by the time ls reads its link: that complaint is not the check's.
    "ls -l /proc/$$/fd/ 2>/dev/null | grep -c -e ' -> /usr$' -e ' -> /etc/passwd$'; "
    "echo FD-CHECKED",
]


async def _run_child(tmp_path: Path, served: ModelServer, use_held: bool) -> dict[str, Any]:
    """One sub-agent's bash run; what its ruleset set-up opened, and its outputs."""
    work = tmp_path / ("held" if use_held else "control")
    work.mkdir()
    report = tmp_path / f"report-{use_held}.json"
    served.responder = bash_script(COMMANDS)
    target = functools.partial(held_paths_child.counting_child, str(report), use_held)
    result = await delegate_bash_on(work, target)
    assert result.status is RunStatus.COMPLETED, result.error
    assert result.sandbox.startswith("workspace, landlock abi"), result.sandbox
    (line,) = report.read_text().splitlines()
    return {**json.loads(line), "out": result.text.split(SEP), "work": str(work)}


def _walls_hold(out: list[str]) -> None:
    assert len(out) == len(COMMANDS), out
    assert "SHADOW-READ" not in out[0] and "Permission denied" in out[0]
    assert "USR-WRITTEN" not in out[1] and "Permission denied" in out[1]
    assert "PASSWD-OK" in out[2]
    assert "RUNTIME-OK" in out[3]
    assert out[4].strip() == "work"
    assert out[5].split() == ["0", "FD-CHECKED"], out[5]


async def test_a_child_adds_the_shared_rules_from_the_fork_servers_descriptors(
    spawned: SpawnRecorder,
    tmp_path: Path,
    served: ModelServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / ".gitconfig").write_text("[user]\n\tname = test\n")
    monkeypatch.setenv("HOME", str(home))
    held = await _run_child(tmp_path, served, use_held=True)
    for path in SHARED:
        assert path in held["held"], f"{path} is not held by the fork server"
        assert path not in held["opened"], f"{path} was opened again in the child"
    # Its own paths it still opens itself: the home's git config (rewritten by rename,
    # so never held) and, through the grants, the workdir.
    assert str(home / ".gitconfig") in held["opened"]
    assert not any(path.startswith(os.path.realpath(held["work"])) for path in held["held"])
    assert held["cloexec"], "a held descriptor would survive an exec"
    _walls_hold(held["out"])

    control = await _run_child(tmp_path, served, use_held=False)
    for path in SHARED:
        assert path in control["opened"]
    _walls_hold(control["out"])
    saved = len(control["opened"]) - len(held["opened"])
    assert saved >= 100, (len(control["opened"]), len(held["opened"]))


def test_an_etc_entry_is_used_only_under_the_key_it_was_held_under(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_landlock_held, "_held", {})
    monkeypatch.setattr(_landlock_held, "_etc_key", None)
    monkeypatch.setattr(_landlock_held, "_room", None)
    entry, target, link = tmp_path / "hosts", tmp_path / "target", tmp_path / "resolv.conf"
    entry.write_text("127.0.0.1 localhost\n")
    target.write_text("nameserver 127.0.0.1\n")
    link.symlink_to(target)
    folder = tmp_path / "folder"
    folder.mkdir()
    try:
        _landlock_held.hold([str(folder), str(tmp_path / "missing")])
        _landlock_held.hold_etc([str(entry), str(link)], (1, 2, 3))
        assert _landlock_held.held_paths() == sorted([str(folder), str(entry)])
        got = _landlock_held.lookup(str(entry), (1, 2, 3))
        assert got is not None and not got.is_dir and got.etc
        assert _landlock_held.lookup(str(entry), (1, 2, 4)) is None  # /etc changed: reopen
        assert _landlock_held.lookup(str(link), (1, 2, 3)) is None  # a link: never held
        stable = _landlock_held.lookup(str(folder), (9, 9, 9))
        assert stable is not None and stable.is_dir  # not an /etc entry: any key
    finally:
        for held in _landlock_held._held.values():
            os.close(held.fd)


def test_under_a_low_descriptor_limit_only_a_quarter_of_it_is_held(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_landlock_held, "_held", {})
    monkeypatch.setattr(_landlock_held, "_room", None)
    monkeypatch.setattr(_landlock_held.resource, "getrlimit", lambda which: (96, 96))
    files = []
    for i in range(40):
        files.append(tmp_path / f"f{i}")
        files[-1].write_text("x")
    try:
        _landlock_held.hold(str(f) for f in files)
        held = _landlock_held.held_paths()
        assert 0 < len(held) <= 24  # the rest each child opens itself
        assert held == sorted(str(f) for f in files[: len(held)])  # in the order asked
    finally:
        for entry in _landlock_held._held.values():
            os.close(entry.fd)
