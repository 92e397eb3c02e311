"""What a new user trips on first, run as they run it: through pipes and a terminal."""

from __future__ import annotations

import subprocess
from pathlib import Path

from test_cli import AGENTCELL, cli_env


def _piped(command: str, cwd: Path, env: dict[str, str]) -> tuple[int, str]:
    """Run ``agentcell … | head -1`` in bash; return agentcell's exit code and its stderr."""
    script = f"set -o pipefail; {AGENTCELL} {command} 2>stderr.txt | head -1 >/dev/null"
    done = subprocess.run(["bash", "-c", script], cwd=cwd, env=env, timeout=120)
    return done.returncode, (cwd / "stderr.txt").read_text()


def test_a_closed_stdout_ends_the_run_quietly_and_the_run_is_recorded(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (tmp_path / "home").mkdir()
    env = cli_env(work)
    # The demo's answer is many lines, written over seconds: head is gone long before.
    code, stderr = _piped("run --model scripted:demo --quiet hello", work, env)
    assert code == 0, stderr
    assert "Traceback" not in stderr and "BrokenPipe" not in stderr, stderr
    listed = subprocess.run(
        [AGENTCELL, "runs", "list", "--json"], cwd=work, env=env, capture_output=True, text=True
    )
    assert '"completed"' in listed.stdout, listed.stdout + listed.stderr
