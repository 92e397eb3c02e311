"""``agentcell run`` as scripts and people use it: streamed answers, prompts from stdin or a
file, SIGTERM and Ctrl-C, setup errors that leave nothing behind, ``runs show``, help."""

from __future__ import annotations

import json
import os
import re
import select
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import click
import pytest
from agentcell.orchestrator.cli._main import cli
from agentcell.worker.child import _proc
from cli_runner import agentcell, assert_gone, cli_env, project
from http_script import delegating_responder
from model_servers import Call, ModelServer, Reply
from terminal_util import AGENTCELL

__all__ = ["project"]  # the fixture (tests/support/cli_runner.py)


class Output:
    """A running command's stdout and stderr, read as they come."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc
        self.text = {"stdout": "", "stderr": ""}

    def wait_for(self, stream: str, needle: str, timeout: float = 60) -> str:
        deadline = time.monotonic() + timeout
        pipes = {"stdout": self.proc.stdout, "stderr": self.proc.stderr}
        while needle not in self.text[stream]:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"never saw {needle!r} on {stream}: {self.text}")
            ready, _, _ = select.select([p for p in pipes.values() if p], [], [], left)
            for pipe in ready:
                chunk = os.read(pipe.fileno(), 65536)
                name = "stdout" if pipe is self.proc.stdout else "stderr"
                if not chunk and self.proc.poll() is not None:
                    raise AssertionError(f"exited before {needle!r}: {self.text}")
                self.text[name] += chunk.decode(errors="replace")
        return self.text[stream]

    def finish(self, timeout: float = 60) -> int:
        out, err = self.proc.communicate(timeout=timeout)
        self.text["stdout"] += out.decode(errors="replace")
        self.text["stderr"] += err.decode(errors="replace")
        return self.proc.returncode


def start(args: list[str], cwd: Path, env: dict[str, str]) -> Output:
    proc = subprocess.Popen(
        [AGENTCELL, *args], cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    return Output(proc)


def test_the_answer_streams_to_stdout_as_it_arrives(
    project: Path, model_server: ModelServer
) -> None:
    release = threading.Event()
    model_server.add(
        Reply(
            text="first half, then the second half.", chunk_size=6, pause_after=3, release=release
        )
    )
    run = start(
        ["run", "--model", "openai:gpt-test", "hi"], project, cli_env(project, model_server)
    )
    try:
        # The stream stopped halfway at the server: what came so far is on stdout already.
        assert run.wait_for("stdout", "first half").startswith("first half")
        assert run.proc.poll() is None
        release.set()
        assert run.finish() == 0
    finally:
        release.set()
        if run.proc.poll() is None:
            run.proc.kill()
            run.proc.wait()
    assert run.text["stdout"] == "first half, then the second half.\n"
    assert "completed in" in run.text["stderr"]


def test_json_prints_one_object_at_the_end(project: Path, model_server: ModelServer) -> None:
    model_server.add(Reply(text="streamed but not printed", chunk_size=4))
    done = agentcell(
        "run",
        "--json",
        "--model",
        "openai:gpt-test",
        "hi",
        cwd=project,
        env=cli_env(project, model_server),
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["final_text"] == "streamed but not printed"


def test_prompt_from_stdin_or_a_file_and_an_empty_prompt_is_a_usage_error(
    project: Path,
) -> None:
    env = cli_env(project)
    long = "line one\n" + "x" * 50_000 + "\nthe end"
    piped = subprocess.run(
        [AGENTCELL, "run", "--quiet", "--model", "scripted:echo", "-"],
        input=long,
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert piped.returncode == 0, piped.stderr
    assert piped.stdout.startswith("echo: line one\n") and piped.stdout.endswith("the end\n")
    (project / "prompt.md").write_text("from a file [bold]\n")
    from_file = agentcell(
        "run",
        "--quiet",
        "--model",
        "scripted:echo",
        "--prompt-file",
        "prompt.md",
        cwd=project,
        env=env,
    )
    assert from_file.stdout == "echo: from a file [bold]\n"
    for args, needle in (
        (["run", "--model", "scripted:echo", "   "], "the prompt is empty"),
        (["run", "--model", "scripted:echo"], "the prompt is empty"),
        (["run", "--model", "scripted:echo", "--prompt-file", "nope.md"], "nope.md"),
        (["run", "--model", "scripted:echo", "--prompt-file", "prompt.md", "x"], "not both"),
    ):
        done = agentcell(*args, cwd=project, env=env)
        assert done.returncode == 2, (args, done.stderr)
        assert needle in done.stderr and "Traceback" not in done.stderr
    empty = subprocess.run(
        [AGENTCELL, "run", "--model", "scripted:echo", "-"],
        input="",
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert empty.returncode == 2 and "the prompt is empty" in empty.stderr


def hanging_responder(body: dict, api: str) -> Reply:
    main = "main agent of agentcell" in body["messages"][0]["content"]
    if not main:
        return Reply(hang=True)
    if body["messages"][-1]["role"] == "user":
        task = {"subagent_type": "Explore", "prompt": "hang", "description": "stuck"}
        return Reply(tool_calls=[Call("task", task)])
    return Reply(text="unexpected")


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_sigterm_and_ctrl_c_cancel_record_and_exit(
    project: Path, model_server: ModelServer, signum: int, code: int
) -> None:
    model_server.responder = hanging_responder
    run = start(
        ["run", "--model", "openai:gpt-test", "wait"], project, cli_env(project, model_server)
    )
    pids: list[int] = []
    try:
        seen = run.wait_for("stderr", '"stuck": started in process')
        pids = [int(p) for p in re.findall(r'"stuck": started in process (\d+)', seen)]
        run.proc.send_signal(signum)
        assert run.finish() == code
    finally:
        if run.proc.poll() is None:
            run.proc.kill()
            run.proc.wait()
        for pid in pids:
            _proc.kill_session(pid)
    assert_gone(pids)
    err = run.text["stderr"]
    assert "cancelling every sub-agent" in err and "Traceback" not in err
    (run_dir,) = [p for p in (project / ".agentcell" / "runs").iterdir() if p.is_dir()]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "cancelled"
    assert [s["status"] for s in summary["subagents"]] == ["cancelled"]


def test_ctrl_c_while_still_importing_prints_no_traceback(project: Path) -> None:
    # Ctrl-C arrives deterministically in the middle of the imports: an import hook
    # raises SIGINT when the command line's own modules start loading.
    script = textwrap.dedent(
        f"""
        import os, signal, sys
        class Trip:
            def find_spec(self, name, path=None, target=None):
                if name == "agentcell.orchestrator.cli._main":
                    os.kill(os.getpid(), signal.SIGINT)
                return None
        sys.meta_path.insert(0, Trip())
        sys.argv = [{AGENTCELL!r}, "--help"]
        from agentcell.__main__ import main
        main()
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=project,
        env=cli_env(project),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 130, done.stderr
    assert "Traceback" not in done.stderr and "KeyboardInterrupt" not in done.stderr
    assert "Usage" not in done.stdout  # it stopped where it was


@pytest.mark.parametrize("command", ["run", "chat"])
@pytest.mark.parametrize(
    ("args", "env_extra", "needle", "code"),
    [
        ([], {}, "no model configured: pass --model", 2),
        (["--model", "nope:x"], {}, "unknown model provider 'nope'", 2),
        # the main agent's model cannot be reached: 3, as for a sub-agent's
        (["--model", "openai:gpt-test"], {"OPENAI_BASE_URL": ""}, "OPENAI_API_KEY is not set", 3),
    ],
    ids=["no-model", "unknown-provider", "missing-key"],
)
def test_a_setup_error_exits_2_and_records_nothing(
    project: Path, command: str, args: list[str], env_extra: dict[str, str], needle: str, code: int
) -> None:
    env = {k: v for k, v in cli_env(project, **env_extra).items() if v != ""}
    extra = ["hi"] if command == "run" else []
    done = subprocess.run(
        [AGENTCELL, command, *args, *extra],
        cwd=project,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == code, done.stdout + done.stderr
    assert needle in done.stderr and "Traceback" not in done.stderr
    assert not (project / ".agentcell").exists()


def test_runs_show_lists_each_sub_agent_and_prints_a_transcript(
    project: Path, model_server: ModelServer
) -> None:
    model_server.responder = delegating_responder
    env = cli_env(project, model_server)
    done = agentcell(
        "run",
        "--json",
        "--model",
        "openai:gpt-test",
        "--approve",
        "allow",
        "survey",
        cwd=project,
        env=env,
    )
    report = json.loads(done.stdout)
    run_id = Path(report["run_dir"]).name
    survey = next(s for s in report["subagents"] if s["description"] == "survey")

    shown = agentcell("runs", "show", run_id, cwd=project, env=env)
    assert shown.returncode == 0, shown.stderr
    block = shown.stdout.split(f'{survey["agent_id"]}  Explore "survey"')[1].split("\n    a")[0]
    assert "completed" in block
    assert re.search(r"prompt: \S", block)
    assert "result: found 2 text files" in block
    assert re.search(r"tools:  glob ×1", block)
    assert re.search(r"\d+ tokens", block) and " s" in block

    as_json = json.loads(agentcell("runs", "show", run_id, "--json", cwd=project, env=env).stdout)
    by_id = {s["agent_id"]: s for s in as_json["subagents"]}
    assert by_id[survey["agent_id"]]["tools_used"] == {"glob": 1}
    assert by_id[survey["agent_id"]]["prompt"]

    transcript = agentcell("runs", "show", run_id, survey["agent_id"], cwd=project, env=env)
    assert transcript.returncode == 0, transcript.stderr
    assert "── user" in transcript.stdout and "→ glob" in transcript.stdout
    assert (
        "── tool result (glob)" in transcript.stdout and "found 2 text files" in transcript.stdout
    )
    records = json.loads(
        agentcell("runs", "show", run_id, survey["agent_id"], "--json", cwd=project, env=env).stdout
    )["records"]
    assert records[0]["kind"] == "start"
    missing = agentcell("runs", "show", run_id, "a99", cwd=project, env=env)
    assert missing.returncode == 2 and "has no agent 'a99'" in missing.stderr


def test_every_option_has_help_and_help_names_the_default_model() -> None:
    def commands(group: click.Group, path: str) -> list[tuple[str, click.Command]]:
        found = []
        for name, command in group.commands.items():
            found.append((f"{path} {name}", command))
            if isinstance(command, click.Group):
                found += commands(command, f"{path} {name}")
        return found

    missing = [
        f"{path} {param.opts[0]}"
        for path, command in commands(cli, "agentcell")
        for param in command.params
        if isinstance(param, click.Option) and not param.help
    ]
    assert not missing, f"options without help text: {missing}"
    text = " ".join(cli.commands["run"].get_help(click.Context(cli.commands["run"])).split())
    assert "[default: AGENTCELL_MODEL" in text


@pytest.mark.parametrize(
    ("args", "files", "env_extra", "needle", "absent"),
    [
        (
            ["run", "--model", "openai:x", "hi"],
            {"agentcell.toml": "max_workerz = 3\n"},
            {},
            "unknown setting 'max_workerz': did you mean 'max_workers'?",
            "known settings",
        ),
        (
            ["run", "--model", "gpt-4o", "hi"],
            {},
            {},
            "--model gpt-4o: model: model 'gpt-4o'",
            "alue error",
        ),
        (
            ["run", "--model", "openai:x", "hi"],
            {},
            {"AGENTCELL_MAX_WORKERS": "0"},
            "AGENTCELL_MAX_WORKERS='0': max_workers",
            "settings:",
        ),
    ],
    ids=["near-key", "no-pydantic-prefix", "names-the-variable"],
)
def test_configuration_errors_say_where_and_suggest(
    project: Path,
    args: list[str],
    files: dict[str, str],
    env_extra: dict[str, str],
    needle: str,
    absent: str,
) -> None:
    for name, text in files.items():
        (project / name).write_text(text)
    done = agentcell(*args, cwd=project, env=cli_env(project, **env_extra))
    assert done.returncode == 2
    assert needle in done.stderr and absent not in done.stderr


def test_tables_do_not_wrap_in_a_pipe(project: Path) -> None:
    agents = project / ".claude" / "agents"
    agents.mkdir(parents=True)
    description = "Reviews every module of a large code base for problems " * 4
    (agents / "wide.md").write_text(
        f"---\nname: wide\ndescription: {description}\n"
        "tools: Read, Grep, Glob, Bash, Edit\n---\nx\n"
    )
    listed = agentcell("agents", "list", cwd=project, env=cli_env(project))
    (row,) = [line for line in listed.stdout.splitlines() if line.startswith("wide ")]
    assert "read_file, edit_file, glob, grep, bash" in row and row.rstrip().endswith("…")


def test_without_ray_installed_the_ray_commands_say_so_in_one_line(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Ray is absent as far as the command can tell: its executable and its module are
    # names that exist nowhere (Ray itself may well be installed here).
    from agentcell.orchestrator.backends.ray import _local as _ray_local
    from agentcell.orchestrator.cli import _ray_cmd
    from click.testing import CliRunner

    env = cli_env(project)  # this process's environment, as the command gets it elsewhere
    for name in [name for name in os.environ if name not in env]:
        monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(_ray_local, "RAY", str(project / "no-such-bin" / "ray"))
    monkeypatch.setattr(_ray_cmd, "RAY_MODULE", "agentcell_test_no_such_ray")
    temp = project.parent / "temp"
    temp.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(temp))  # where a driver's log would go

    runner = CliRunner()
    started = runner.invoke(cli, ["ray", "start"])
    ran = runner.invoke(
        cli,
        ["run", "--backend", "ray", "--model", "scripted:echo", "--workdir", str(project), "hi"],
    )
    for done in (started, ran):
        assert done.exit_code == 2, done.output
        (line,) = done.output.splitlines()
        assert "Ray" in line and "not installed here" in line and "pip install -e '.[ray]'" in line
        assert done.exception is None or isinstance(done.exception, SystemExit)
    assert "no-such-bin" in started.output  # which command it looked for
    assert not list(temp.iterdir())  # no driver started, no log left behind
    assert not (project / ".agentcell").exists()


def test_a_prompt_read_from_a_pipe_gets_no_hint_and_its_answer_survives_head(
    project: Path,
) -> None:
    # The hint is for a person at a terminal; a pipe says nothing, and `| head` still ends 0.
    done = subprocess.run(
        f"printf 'hello from a pipe\\n' | {AGENTCELL} run --model scripted:echo - | head -1",
        shell=True, cwd=project, env=cli_env(project), capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "hello from a pipe" in done.stdout
    assert "Ctrl-D" not in done.stderr
