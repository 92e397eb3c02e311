"""The README's promises: its Python snippets run, and its demo output is what the demo
prints today (numbers, times and paths aside)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
AGENTCELL = str(Path(sys.executable).with_name("agentcell"))


def python_snippets() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def clean_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ANTHROPIC_"))}
    env.update(HOME=str(home), AGENTCELL_BLOCK_REAL_MODELS="1", NO_COLOR="1")
    return env


def test_the_readme_has_python_snippets() -> None:
    assert len(python_snippets()) == 2


@pytest.mark.parametrize("index", range(2))
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
    line = re.sub(r"\d+(\.\d+)?", "N", line)
    return " ".join(line.split())


def test_the_demo_output_in_the_readme_is_current(tmp_path: Path) -> None:
    text = README.read_text()
    block = text.split("<!-- demo-output:start -->")[1].split("<!-- demo-output:end -->")[0]
    shown = [
        line for line in block.strip().strip("`").removeprefix("text").splitlines() if line.strip()
    ]
    done = subprocess.run(
        [AGENTCELL, "demo"],
        cwd=tmp_path,
        env=clean_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    printed = {_normalise(line) for line in (done.stdout + done.stderr).splitlines()}
    missing = [line for line in shown if _normalise(line) not in printed]
    assert not missing, "README lines the demo no longer prints:\n" + "\n".join(missing)
