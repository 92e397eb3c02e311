"""The README's promises: its Python snippets run, and its demo output is what the demo
prints today (numbers, times and paths aside)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from cli_runner import AGENTCELL
from places import ROOT

README = ROOT / "README.md"


def python_snippets() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def clean_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ANTHROPIC_"))}
    env.update(HOME=str(home), AGENTCELL_BLOCK_REAL_MODELS="1", NO_COLOR="1")
    return env


def test_the_readme_has_python_snippets() -> None:
    assert len(python_snippets()) == 3


@pytest.mark.parametrize("index", range(3))
def test_python_snippets_run(index: int, tmp_path: Path) -> None:
    snippet = python_snippets()[index]
    script = tmp_path / "snippet.py"
    script.write_text(snippet)
    done = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env=clean_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    if index == 0:
        assert lines[:2] == [
            "completed echo: Where is the config loaded?",
            "['completed', 'completed']",
        ]
        assert re.fullmatch(r"echo: Say hello \d+", lines[2])
    elif index == 2:  # the tracing example: the main agent's spans, made in-process
        assert lines == ["['chat echo', 'invoke_agent main']"]
    else:
        assert lines[0] == "'the' occurs 2 times"
        assert lines[1:] == [
            "a2 TurnStarted",
            "a2 UsageUpdate",
            "a2 ToolStarted",
            "a2 ToolFinished",
            "a2 TurnStarted",
            "a2 TextDelta",
            "a2 UsageUpdate",
            "a2 RunFinished",
        ]


def _normalise(line: str) -> str:
    line = re.sub(r"\S*\.agentcell/runs/[\w.-]+", "RUN", line)
    line = re.sub(r"\b\d{8}-\d{6}-[0-9a-f]{4}\b", "RUN-ID", line)
    line = re.sub(r"\d+(\.\d+)?", "N", line)
    return " ".join(line.split())


def readme_block(name: str) -> list[str]:
    """The lines of the README's ``<!-- NAME:start -->`` ... ``<!-- NAME:end -->`` block."""
    block = README.read_text().split(f"<!-- {name}:start -->")[1].split(f"<!-- {name}:end -->")[0]
    return [
        line for line in block.strip().strip("`").removeprefix("text").splitlines() if line.strip()
    ]


def assert_shown(name: str, output: str) -> None:
    printed = {_normalise(line) for line in output.splitlines()}
    missing = [line for line in readme_block(name) if _normalise(line) not in printed]
    assert not missing, f"README {name} lines the program no longer prints:\n" + "\n".join(missing)


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """One demo run for the tests that read its output and its record."""
    where = tmp_path_factory.mktemp("demo")
    done = subprocess.run(
        [AGENTCELL, "demo"],
        cwd=where,
        env=clean_env(where),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return where, done.stdout + done.stderr


def test_the_demo_output_in_the_readme_is_current(demo_run: tuple[Path, str]) -> None:
    assert_shown("demo-output", demo_run[1])


def test_the_runs_show_screen_in_the_readme_is_current(demo_run: tuple[Path, str]) -> None:
    where, _ = demo_run
    (run_dir,) = [p for p in (where / ".agentcell" / "runs").iterdir() if p.is_dir()]
    done = subprocess.run(
        [AGENTCELL, "runs", "show", run_dir.name],
        cwd=where,
        env=clean_env(where),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert_shown("runs-show", done.stdout)


def test_the_chat_screen_in_the_readme_is_current(tmp_path: Path) -> None:
    """The same session, typed on a pseudo-terminal and read through a terminal emulator."""
    from terminal_util import Screen

    work = tmp_path / "work"
    work.mkdir()
    term = Screen(["chat", "--model", "scripted:echo"], work, clean_env(tmp_path), cols=240)
    try:
        term.expect("you>")
        term.send("Summarise [this] for me\n")
        term.expect("agent> echo")
        term.send("@Explore where is the config loaded?\n")
        term.expect("echo: where is the config loaded?")
        term.send("/tasks\n")
        term.expect("no background tasks")
        term.send("/quit\n")
        screen = term.expect("bye")
        assert term.close() == 0
    finally:
        term.kill()
    assert_shown("chat-screen", screen.replace(str(work), "/tmp/chatcap/work"))


def test_the_readme_names_every_environment_variable_and_built_in_model() -> None:
    root = README.parent
    used = set()
    for folder in ("protocol", "worker", "orchestrator", "agentcell"):
        for path in (root / folder).rglob("*.py"):
            used |= set(
                re.findall(r"\"((?:AGENTCELL|OPENAI|ANTHROPIC)_[A-Z_]+)\"", path.read_text())
            )
    text = README.read_text()
    table = text.split("### Environment variables")[1].split("\n## ")[0]
    assert used and not [name for name in sorted(used) if f"`{name}`" not in table]
    from agentcell.worker.models._scripted import SCRIPTED_MODELS

    for name in SCRIPTED_MODELS:
        assert f"`scripted:{name}`" in text.split("### Built-in models")[1]
