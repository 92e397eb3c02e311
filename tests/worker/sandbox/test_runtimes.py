"""Runtimes bash may run under the default sandbox: a version manager's tree (pyenv, uv's
Python folder, conda) is readable and executable, read-only; nothing else of the home is.

Run from a real sub-agent's bash (a real child through the orchestrator, a local model
server), with the user's real home: the point is the machine's own pyenv."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
from agentcell.orchestrator import AgentDefinition, Orchestrator, Settings
from agentcell.protocol import RunStatus
from agentcell.worker import probe_sandbox
from model_servers import Call, ModelServer, Reply

CAPS = probe_sandbox()
pytestmark = pytest.mark.skipif(
    not CAPS["landlock_scopes"], reason="needs Landlock ABI 6 (this project's CI has 7)"
)
SEP = "\n=====\n"
PYENV = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv")


def _bash_script(commands: list[str]):  # type: ignore[no-untyped-def]
    def respond(body: dict, api: str) -> Reply:  # type: ignore[type-arg]
        outputs = [m["content"] for m in body["messages"] if m["role"] == "tool"]
        if len(outputs) < len(commands):
            command = commands[len(outputs)]
            return Reply(tool_calls=[Call("bash", {"command": command, "timeout_s": 30})])
        return Reply(text=SEP.join(outputs))

    return respond


async def _run(workdir: Path, commands: list[str], server: ModelServer) -> list[str]:
    server.responder = _bash_script(commands)
    agent = AgentDefinition(
        name="shell", description="shell", tools=["bash"], model="openai:test", source="test"
    )
    settings = Settings(model="openai:test", approval="allow", max_workers=1, warm_spares=0)
    orch = Orchestrator(
        settings=settings, workdir=workdir, agents=[agent], load_agent_files=False, record=False
    )
    async with orch:
        result = await asyncio.wait_for(orch.delegate("shell", "run them"), 120)
    assert result.status is RunStatus.COMPLETED, result
    assert result.sandbox.startswith("workspace, landlock abi"), result.sandbox
    return result.text.split(SEP)


@pytest.fixture
def served(model_server: ModelServer, monkeypatch: pytest.MonkeyPatch) -> ModelServer:
    monkeypatch.setenv("OPENAI_BASE_URL", model_server.openai_base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-runtimes-test-key")
    return model_server


@pytest.mark.skipif(not (PYENV / "shims" / "python3").exists(), reason="no pyenv on this machine")
async def test_pyenv_shim_runs_from_bash_and_its_tree_is_read_only(
    tmp_path: Path, served: ModelServer
) -> None:
    shim = PYENV / "shims" / "python3"
    marker = PYENV / f"agentcell-test-{os.getpid()}"
    commands = [
        f"{shim} --version; echo rc=$?",
        f"PATH={PYENV / 'shims'}:$PATH python3 -c 'print(6*7)'; echo rc=$?",
        f"touch {marker}; echo rc=$?",
        f"ls {Path.home() / '.ssh'} >/dev/null; echo rc=$?",
    ]
    try:
        out = await _run(tmp_path, commands, served)
    finally:
        marker.unlink(missing_ok=True)
    assert "Python 3." in out[0] and "rc=0" in out[0], out[0]
    assert "42" in out[1] and "rc=0" in out[1], out[1]
    assert "Permission denied" in out[2] and not marker.exists(), out[2]
    assert "rc=0" not in out[3], out[3]  # the rest of the home stays out of reach


def _fake_runtime(root: Path, version: str) -> Path:
    """A version manager's tree as it lies on disk: an interpreter (here a script that
    reads its own library file, so both read and execute are needed) under ``root``."""
    bin_dir = root / "bin"
    bin_dir.mkdir(parents=True)
    (root / "lib").mkdir()
    (root / "lib" / "stdlib.txt").write_text(f"Python {version}\n")
    python = bin_dir / "python3"
    python.write_text(f'#!/bin/sh\ncat "{root}/lib/stdlib.txt"\n')
    python.chmod(0o755)
    return python


@pytest.mark.parametrize(
    "tree",
    [
        ".pyenv/versions/9.9.1",
        ".local/share/uv/python/cpython-9.9.2-linux-x86_64-gnu",
        "miniconda3",
        "anaconda3/envs/work",
    ],
)
async def test_version_manager_trees_in_the_home_are_runnable_and_read_only(
    tmp_path: Path, served: ModelServer, monkeypatch: pytest.MonkeyPatch, tree: str
) -> None:
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir()
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_ed25519").write_text("PRIVATE-KEY-MATERIAL\n")
    (home / "notes.txt").write_text("PRIVATE-NOTES\n")
    python = _fake_runtime(home / tree, "9.9")
    # pyenv's way: a shim on PATH that execs the chosen version.
    shims = home / ".pyenv" / "shims"
    shims.mkdir(parents=True, exist_ok=True)
    (shims / "python3").write_text(f'#!/bin/sh\nexec "{python}" "$@"\n')
    (shims / "python3").chmod(0o755)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("PYENV_ROOT", raising=False)
    monkeypatch.delenv("CONDA_PREFIX", raising=False)
    commands = [
        f"{python} --version; echo rc=$?",
        f"{shims / 'python3'} --version; echo rc=$?",
        f"touch {python.parent}/planted; echo rc=$?",
        f"echo x >> {python}; echo rc=$?",
        "cat $HOME/.ssh/id_ed25519 $HOME/notes.txt; echo rc=$?",
    ]
    out = await _run(work, commands, served)
    assert "Python 9.9" in out[0] and "rc=0" in out[0], out[0]
    assert "Python 9.9" in out[1] and "rc=0" in out[1], out[1]
    assert "Permission denied" in out[2] and not (python.parent / "planted").exists(), out[2]
    assert "Permission denied" in out[3] and "x" not in python.read_text().split("\n")[-1]
    assert "PRIVATE" not in out[4] and "Permission denied" in out[4], out[4]


async def test_conda_prefix_is_runnable_but_never_the_home_itself(
    tmp_path: Path, served: ModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir()
    home.mkdir()
    (home / "notes.txt").write_text("PRIVATE-NOTES\n")
    python = _fake_runtime(tmp_path / "opt" / "envs" / "ml", "9.9")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("CONDA_PREFIX", str(python.parent.parent))
    out = await _run(work, [f"{python} --version", "cat $HOME/notes.txt"], served)
    assert "Python 9.9" in out[0], out[0]
    monkeypatch.setenv("CONDA_PREFIX", str(home))  # a prefix that is the home: not granted
    out = await _run(work, ["cat $HOME/notes.txt"], served)
    assert "PRIVATE" not in out[0] and "Permission denied" in out[0], out[0]
