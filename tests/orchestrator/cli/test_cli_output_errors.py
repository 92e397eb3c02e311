"""stdout that fails under the command: a full disk (``> /dev/full``) and a reader that
closes the pipe early (``| head -1``), through the installed ``agentcell`` command."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from cli_runner import AGENTCELL, agentcell, cli_env, project

__all__ = ["project"]  # the fixture (tests/support/cli_runner.py)

NO_SPACE = "agentcell: error: cannot write the output: No space left on device"


def _recorded_run(project: Path, prompt: str = "hi") -> str:
    """A finished run of the offline echo model; its id."""
    prompt_file = project.parent / "prompt.txt"
    prompt_file.write_text(prompt)
    done = agentcell(
        *("run", "--json", "--model", "scripted:echo", "--prompt-file", str(prompt_file)),
        cwd=project,
        env=cli_env(project),
    )
    assert done.returncode == 0, done.stderr
    return Path(json.loads(done.stdout)["run_dir"]).name


def _runs(project: Path) -> set[str]:
    root = project / ".agentcell" / "runs"
    return {p.name for p in root.iterdir() if p.is_dir()} if root.is_dir() else set()


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
@pytest.mark.parametrize(
    "args",
    [
        ["run", "--model", "scripted:echo", "hi"],
        ["run", "--json", "--model", "scripted:echo", "hi"],
        ["runs", "list"],
        ["runs", "show", "RUN"],
        ["agents", "list"],
        ["agents", "list", "--json"],
    ],
    ids=["run", "run-json", "runs-list", "runs-show", "agents-list", "agents-list-json"],
)
def test_output_to_a_full_disk_is_one_line_and_exit_1(project: Path, args: list[str]) -> None:
    earlier = _recorded_run(project)
    args = [earlier if arg == "RUN" else arg for arg in args]
    with open("/dev/full", "w") as full:
        done = subprocess.run(
            [AGENTCELL, *args],
            cwd=project,
            env=cli_env(project),
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
        )
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr and "ERROR" not in done.stderr, done.stderr
    said = [line for line in done.stderr.splitlines() if "cannot write the output" in line]
    assert len(said) == 1 and said[0].startswith(NO_SPACE), done.stderr
    if args[0] == "run":  # the run went on: its record is whole, and says it completed
        (new,) = _runs(project) - {earlier}
        summary = json.loads((project / ".agentcell" / "runs" / new / "summary.json").read_text())
        assert summary["status"] == "completed" and summary["final_text"] == "echo: hi"


def _read_some_then_close(proc: subprocess.Popen[bytes]) -> bytes:
    """What ``| head -1`` does: read what has come (a first line), then close the pipe."""
    assert proc.stdout is not None
    first = os.read(proc.stdout.fileno(), 4096)
    proc.stdout.close()
    return first


def _end(proc: subprocess.Popen[bytes]) -> None:
    """Kill the command if a failed check left it running (``with`` then reaps it)."""
    if proc.poll() is None:
        proc.kill()


@pytest.mark.parametrize("command", ["runs show", "run"])
def test_a_reader_closing_the_pipe_early_leaves_the_exit_code_as_it_was(
    project: Path, command: str
) -> None:
    # Far more output than a pipe holds (64 KiB): the command is still writing when the
    # reader goes away, so its next write meets the closed pipe.
    long_prompt = "word " * 40_000
    if command == "runs show":
        args = ["runs", "show", _recorded_run(project, long_prompt)]
    else:
        (project / "prompt.txt").write_text(long_prompt)
        args = ["run", "--model", "scripted:echo", "--prompt-file", "prompt.txt"]
    with subprocess.Popen(
        [AGENTCELL, *args],
        cwd=project,
        env=cli_env(project),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    ) as proc:
        try:
            first = _read_some_then_close(proc)
            assert proc.stderr is not None
            errors = proc.stderr.read().decode()
            assert proc.wait(timeout=120) == 0, errors
        finally:
            _end(proc)
    assert first.startswith(b"run " if command == "runs show" else b"e")  # "echo: word…"
    assert "Traceback" not in errors and "Error" not in errors, errors


def test_chat_from_a_pipe_whose_reader_closes_goes_on_and_exits_0(project: Path) -> None:
    with subprocess.Popen(
        [AGENTCELL, "chat", "--model", "scripted:echo"],
        cwd=project,
        env=cli_env(project),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    ) as proc:
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        try:
            # ``| head -2``: the greeting's two lines, then the reader is gone; only then
            # does chat get a line, so its answer meets the closed pipe.
            seen = b""
            while seen.count(b"\n") < 2:
                chunk = os.read(proc.stdout.fileno(), 4096)
                assert chunk, f"stdout ended early: {seen!r}"
                seen += chunk
            proc.stdout.close()
            proc.stdin.write(b"hi\nthere\n")
            proc.stdin.close()
            errors = proc.stderr.read().decode()
            assert proc.wait(timeout=120) == 0, errors
        finally:
            _end(proc)
    assert seen.startswith(b"agentcell chat")
    assert "Traceback" not in errors and "Error" not in errors, errors
    (run,) = _runs(project)  # the session went on to the end of its input, recorded
    summary = json.loads((project / ".agentcell" / "runs" / run / "summary.json").read_text())
    assert [turn["final_text"] for turn in summary["turns"]] == ["echo: hi", "echo: there"]
