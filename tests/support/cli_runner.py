"""The ``agentcell`` command for tests, two ways.

``agentcell(*args, cwd=, env=)`` runs the installed executable (``AGENTCELL``) as a
subprocess: for what is about the process itself — signals, pipes (``| head``), a
terminal, full disks, exit codes only the real process has (130, 143), what children
write to its file descriptors, the environment it and its children are started with.

``invoke(*args, cwd=, env=)`` runs the same entry point (``agentcell.orchestrator.cli.main``,
exit codes and one-line errors included) in this process, about 0.5 s less a call (the
interpreter's start and the imports): for what only reads what a command prints, writes
or records. It is run as a fresh process would run it: ``os.environ`` is ``env`` exactly,
the current folder is ``cwd``, the program is named ``agentcell``, the root logger has no
handler (the command's own ``logging.basicConfig`` takes effect), the once-per-process
warnings are unsaid; all of it is put back after. An exception the command does not
handle is raised here, never turned into an exit code (a real process would print a
traceback). Both give a ``subprocess.CompletedProcess`` with text ``stdout``/``stderr``.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import signal
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from agentcell.worker.child import _proc

AGENTCELL = str(Path(sys.executable).with_name("agentcell"))
#: What a real run of the command starts with: the per-process warnings said once.
_ONCE_STATE = (
    ("agentcell.orchestrator.config._sandbox_policy", "_said", set),
    ("agentcell.orchestrator.records._key", "_warned", bool),
)


def cli_env(project: Path, server: Any = None, **extra: str) -> dict[str, str]:
    """This environment without model keys or agentcell settings, HOME the ``home``
    beside ``project``, no colour, real models blocked; ``server``'s (a ``ModelServer``)
    URL and a test key for openai; then ``extra``."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("OPENAI_", "ANTHROPIC_", "AGENTCELL_"))
    }
    env.update(HOME=str(project.parent / "home"), NO_COLOR="1", AGENTCELL_BLOCK_REAL_MODELS="1")
    env.pop("XDG_CONFIG_HOME", None)
    if server is not None:
        env.update(OPENAI_BASE_URL=server.openai_base_url, OPENAI_API_KEY="sk-test-cli-key-123456")
    env.update(extra)
    return env


def agentcell(
    *args: str,
    cwd: Path,
    env: Mapping[str, str],
    timeout: float = 120,
    input: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """The installed ``agentcell`` with ``args``, as a subprocess."""
    return subprocess.run(
        [AGENTCELL, *args],
        cwd=cwd,
        env=dict(env),
        input=input,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def invoke(
    *args: str, cwd: Path, env: Mapping[str, str], input: str | None = None
) -> subprocess.CompletedProcess[str]:
    """``agentcell`` with ``args``, run in this process as a fresh process runs it."""
    from agentcell.orchestrator.cli import main
    from click.testing import CliRunner

    with _as_a_fresh_process(args, cwd, env):
        with CliRunner().isolation(input=input) as (out, err, _both):
            try:
                main()
                code: Any = 0
            except SystemExit as exc:
                code = exc.code
        stdout = out.getvalue().decode(errors="replace")
        stderr = err.getvalue().decode(errors="replace")
    if code is None:
        code = 0
    elif not isinstance(code, int):  # as Python does: the message on stderr, exit code 1
        stderr, code = f"{stderr}{code}\n", 1
    return subprocess.CompletedProcess(["agentcell", *args], code, stdout, stderr)


@contextlib.contextmanager
def _as_a_fresh_process(args: tuple[str, ...], cwd: Path, env: Mapping[str, str]) -> Iterator[None]:
    environ = dict(os.environ)
    folder = os.getcwd()
    argv = sys.argv
    main_module = sys.modules["__main__"]
    package = getattr(main_module, "__package__", None)
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    signals = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    once = [(importlib.import_module(module), name) for module, name, _fresh in _ONCE_STATE]
    said = [getattr(module, name) for module, name in once]
    try:
        os.environ.clear()
        os.environ.update(env)
        os.chdir(cwd)
        # click names the program after argv[0], or "python -m pytest…" under `-m`.
        sys.argv = ["agentcell", *args]
        main_module.__package__ = None
        root.handlers = []
        root.setLevel(logging.WARNING)
        for (module, name), (_module, _name, fresh) in zip(once, _ONCE_STATE, strict=True):
            setattr(module, name, fresh())
        yield
    finally:
        for (module, name), value in zip(once, said, strict=True):
            setattr(module, name, value)
        for handler in root.handlers:
            if handler not in handlers:
                handler.close()
        root.handlers = handlers
        root.setLevel(level)
        for signum, handler in signals.items():
            if handler is not None:  # None: not set from Python (left as it is)
                signal.signal(signum, handler)
        main_module.__package__ = package
        sys.argv = argv
        os.chdir(folder)
        os.environ.clear()
        os.environ.update(environ)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "home").mkdir()
    work = tmp_path / "work"
    work.mkdir()
    for name in ("a.txt", "b.txt", "c.py"):
        (work / name).write_text("x\n")
    return work


def assert_gone(pids: list[int]) -> None:
    for pid in pids:
        assert not _proc.is_alive(pid), f"process {pid} outlived the command"
