"""The Python the virtualenv is built with, and what each supported Python needs.

``scripts/newest_python`` picks the newest CPython >= 3.11 that really runs and can make a
virtualenv: tested here against folders of stand-in interpreters (a broken pyenv shim, one
too old, one that cannot make a virtualenv, pyenv's installs) and against the real one
running this suite. CI's smoke list must name tests that exist. And ``sniffio``, which
httpcore imports on every lock use, must be importable in a sub-agent's own process.
"""

from __future__ import annotations

import ast
import asyncio
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import python_children
from conftest import SpawnRecorder
from places import ROOT

from agentcell import AgentDefinition, Orchestrator, Settings
from agentcell.testing import FunctionModel

PICKER = ROOT / "scripts" / "newest_python"
TOOLS = ("bash", "env", "awk", "sort", "mktemp", "timeout", "rm", "mkdir", "ln", "make", "true")

#: A stand-in interpreter: answers the picker's probe and version questions for one version.
FAKE = """#!/bin/sh
case "$1 $2" in
  "-c import os, sys, venv, ensurepip"*) echo "{major} {minor} {micro} $0" ;;
  "-c import sys;"*) echo "{major}.{minor}.{micro}" ;;
  "-m venv") {venv} ;;
  *) exit 3 ;;
esac
"""
MAKES_VENV = f'mkdir -p "$4/bin" && ln -s {shutil.which("true")} "$4/bin/python"'


class Machine:
    """A PATH and a pyenv root of stand-in interpreters, and nothing else to find."""

    def __init__(self, root: Path) -> None:
        self.bin, self.tools, self.pyenv = root / "bin", root / "tools", root / "pyenv"
        self.home = root / "home"
        for folder in (self.bin, self.tools, self.pyenv / "versions", self.home):
            folder.mkdir(parents=True)
        for tool in TOOLS:
            found = shutil.which(tool)
            assert found, f"{tool} is needed by this test"
            (self.tools / tool).symlink_to(found)

    def python(self, path: Path, version: str, *, venv: bool = True) -> Path:
        major, minor, micro = version.split(".")
        path.parent.mkdir(parents=True, exist_ok=True)
        script = FAKE.format(
            major=major, minor=minor, micro=micro, venv=MAKES_VENV if venv else "exit 1"
        )
        path.write_text(script)
        path.chmod(0o755)
        return path

    def shim(self, name: str) -> Path:
        """A pyenv shim for a version that is not selected: it fails, as they do here."""
        path = self.bin / name
        path.write_text(f"#!/bin/sh\necho 'pyenv: {name}: command not found' >&2\nexit 127\n")
        path.chmod(0o755)
        return path

    def env(self) -> dict[str, str]:
        return {
            "PATH": f"{self.bin}:{self.tools}",
            "HOME": str(self.home),
            "PYENV_ROOT": str(self.pyenv),
            "UV_PYTHON_INSTALL_DIR": str(self.home / "uv"),
        }

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(PICKER), *args], env=self.env(), capture_output=True, text=True, timeout=120
        )


@pytest.fixture
def machine(tmp_path: Path) -> Machine:
    return Machine(tmp_path)


def test_the_newest_python_that_can_make_a_virtualenv_is_picked(machine: Machine) -> None:
    machine.python(machine.bin / "python3", "3.10.14")  # too old
    machine.python(machine.bin / "python3.11", "3.11.9")
    machine.shim("python3.13")  # a shim of an unselected pyenv version: fails to run
    newest = machine.python(machine.pyenv / "versions/3.14.0/bin/python3.14", "3.14.0", venv=False)
    wanted = machine.python(machine.pyenv / "versions/3.12.4/bin/python3.12", "3.12.4")
    machine.python(machine.pyenv / "versions/3.12.2/bin/python3.12", "3.12.2")
    picked = machine.run()
    assert (picked.returncode, picked.stdout, picked.stderr) == (0, f"{wanted}\n", "")
    assert newest.exists()  # found, newer, but it cannot make a virtualenv: passed over


def test_only_picks_the_newest_of_one_version(machine: Machine) -> None:
    older = machine.python(machine.bin / "python3.11", "3.11.9")
    machine.python(machine.pyenv / "versions/3.13.1/bin/python3.13", "3.13.1")
    picked = machine.run("--only", "3.11")
    assert (picked.returncode, picked.stdout) == (0, f"{older}\n")


def test_no_usable_python_is_one_line_naming_the_fix(machine: Machine) -> None:
    machine.python(machine.bin / "python3", "3.10.14")
    machine.shim("python3.12")
    picked = machine.run()
    assert picked.returncode == 1 and picked.stdout == ""
    [line] = picked.stderr.splitlines()
    assert "no CPython >= 3.11" in line and "make PYTHON=/path/to/python3.X" in line


def test_a_virtualenv_of_another_python_is_kept_and_named_in_one_line(machine: Machine) -> None:
    venv = machine.home / "venv"
    machine.python(venv / "bin" / "python", "3.11.9")
    picked = machine.python(machine.bin / "python3.13", "3.13.1")
    checked = machine.run("--check", str(venv), str(picked))
    assert checked.returncode == 0 and checked.stdout == ""
    [line] = checked.stderr.splitlines()
    assert f"{venv} runs Python 3.11.9, not 3.13.1" in line and f"rm -rf {venv}" in line
    same = machine.run("--check", str(venv), str(machine.python(machine.bin / "p", "3.11.9")))
    assert (same.returncode, same.stdout, same.stderr) == (0, "", "")


def test_make_builds_the_virtualenv_with_the_pick_and_python_overrides_it(
    machine: Machine,
) -> None:
    picked = machine.python(machine.pyenv / "versions/3.13.1/bin/python3.13", "3.13.1")
    other = machine.python(machine.bin / "python3.11", "3.11.9")
    venv = machine.home / "v"

    def dry_run(*args: str) -> str:
        done = subprocess.run(
            ["make", "-n", "-C", str(ROOT), "demo", f"VENV={venv}", *args],
            env=machine.env(),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    assert f"--venv {venv} {picked}\n" in dry_run()
    assert f"--venv {venv} {other}\n" in dry_run(f"PYTHON={other}")


def _real_python() -> Path:
    """The interpreter itself (not this suite's virtualenv's link to it)."""
    return Path(os.path.realpath(getattr(sys, "_base_executable", sys.executable)))


def test_the_real_python_running_this_suite_is_picked_and_its_virtualenv_is_not(
    machine: Machine,
) -> None:
    real = _real_python()
    version = "{}.{}".format(*sys.version_info[:2])
    (machine.bin / f"python{version}").symlink_to(real)
    picked = machine.run()
    assert (picked.returncode, picked.stdout) == (0, f"{real}\n"), picked.stderr
    # A virtualenv's python (its bin/ first on PATH, as when activated) runs, but a
    # virtualenv is not made from one.
    subprocess.run([str(real), "-m", "venv", "--without-pip", str(machine.home / "v")], check=True)
    machine.bin = machine.home / "v" / "bin"
    assert (machine.bin / f"python{version}").exists()
    assert machine.run().returncode == 1


# -- CI's smoke run ------------------------------------------------------------------------------


def _smoke_ids() -> list[str]:
    lines = (ROOT / "tests" / "smoke.txt").read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def test_every_test_of_the_smoke_list_exists() -> None:
    missing = []
    for node in _smoke_ids():
        file, _, name = node.partition("::")
        path = ROOT / file
        if not path.is_file():
            missing.append(node)
            continue
        defined = {
            n.name
            for n in ast.walk(ast.parse(path.read_text()))
            if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
        }
        if name and name.split("[")[0] not in defined:
            missing.append(node)
    assert missing == [], f"tests/smoke.txt names tests that do not exist: {missing}"


def test_the_smoke_list_checks_the_per_version_patches_and_each_layer() -> None:
    files = {node.partition("::")[0] for node in _smoke_ids()}
    assert (
        "tests/orchestrator/backends/test_multiprocess_pin.py" in files
    )  # multiprocess's internals per Python
    assert {
        "tests/protocol/test_codec.py",
        "tests/worker/engine/test_engine.py",
        "tests/worker/sandbox/test_sandbox.py",
    } <= files


# -- sniffio in a sub-agent ----------------------------------------------------------------------


async def test_sniffio_is_importable_in_a_sub_agent_child(
    spawned: SpawnRecorder, tmp_path: Path
) -> None:
    model = FunctionModel(python_children.ask_the_async_library, name="function:asker")
    asker = AgentDefinition(
        name="asker",
        description="asks which async library runs its tool",
        system_prompt="You are asker.",
        tools=["async_library"],
        model="function:asker",
        source="test",
    )
    orch = Orchestrator(
        settings=Settings(model="scripted:echo", approval="allow", max_workers=2, warm_spares=0),
        workdir=tmp_path,
        agents=[asker],
        models={"function:asker": model},
        tools=[python_children.async_library],
        load_agent_files=False,
    )
    async with orch:
        result = await asyncio.wait_for(orch.delegate("asker", "which library?"), 60)
    assert result.text.startswith("{"), result.text  # the tool's error, if it failed
    seen = json.loads(result.text)
    assert seen["library"] == "asyncio", result.text
    assert seen["pid"] != os.getpid() and seen["pid"] in spawned.pids
    assert seen["python"] == list(sys.version_info[:3])  # the child runs this Python
