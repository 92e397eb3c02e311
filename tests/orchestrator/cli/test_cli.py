"""The ``agentcell`` command: the installed executable where the process is what is tested
(a pseudo-terminal for chat, what lands on stderr, a traceback), else run in this process
(``invoke``: tests/support/cli_runner.py)."""

from __future__ import annotations

import json
import os
import re
import signal
import time
from pathlib import Path

import pytest
from agentcell.worker.child import _proc
from cli_runner import (
    AGENTCELL,
    agentcell,
    assert_gone,
    cli_env,
    invoke,
    project,
)
from http_script import delegating_responder
from model_servers import Call, ModelServer, Reply
from terminal_util import read_pty

__all__ = ["project"]  # the fixture


def test_run_json_with_delegation_crash_and_background(
    project: Path, model_server: ModelServer
) -> None:
    model_server.responder = delegating_responder
    done = agentcell(
        "run",
        "--json",
        "--model",
        "openai:gpt-test",
        "--approve",
        "allow",
        "survey this folder",
        cwd=project,
        env=cli_env(project, model_server),
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["status"] == "completed"
    assert report["final_text"].startswith("All done")
    assert set(report) >= {
        "status",
        "final_text",
        "usage",
        "cost_usd",
        "duration_ms",
        "run_dir",
        "subagents",
    }
    by_description = {s["description"]: s for s in report["subagents"]}
    assert by_description["survey"]["status"] == "completed"
    assert by_description["survey"]["final_text"] == "found 2 text files"
    assert by_description["in the back"]["background"] is True
    assert by_description["doomed"]["status"] == "crashed"
    assert by_description["doomed"]["signal"] == "SIGKILL"
    for sub in report["subagents"]:
        assert set(sub) >= {
            "agent_id",
            "agent_type",
            "description",
            "status",
            "final_text",
            "usage",
            "duration_ms",
            "turns",
            "tool_calls",
            "pid",
            "peak_rss_bytes",
            "exit_code",
            "signal",
            "background",
        }
    assert_gone([s["pid"] for s in report["subagents"] if s["pid"]])
    # The run was recorded, and `runs` reads it back.
    run_dir = Path(report["run_dir"])
    assert (run_dir / "summary.json").is_file() and (run_dir / "main.jsonl").is_file()
    listed = invoke("runs", "list", "--json", cwd=project, env=cli_env(project))
    assert json.loads(listed.stdout)[0]["run_id"] == run_dir.name
    shown = invoke("runs", "show", run_dir.name[:15], cwd=project, env=cli_env(project))
    assert shown.returncode == 0 and "crashed" in shown.stdout and "glob" in shown.stdout
    # Secrets never reach the records.
    for path in run_dir.rglob("*"):
        if path.is_file():
            assert "sk-test-cli-key-123456" not in path.read_text(errors="replace"), path


def test_run_prints_the_answer_and_progress_apart(project: Path, model_server: ModelServer) -> None:
    model_server.add(Reply(text="Just an answer."))
    done = agentcell(
        "run", "--model", "openai:gpt-test", "hi", cwd=project, env=cli_env(project, model_server)
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "Just an answer.\n"
    assert "completed in" in done.stderr


@pytest.mark.parametrize(
    ("args", "files", "code", "needle"),
    [
        (["run", "hi"], {}, 2, "no model configured: pass --model"),
        (["run", "--model", "gpt-4o", "hi"], {}, 2, "needs a provider: write PROVIDER:NAME"),
        (
            ["run", "--model", "openai:x", "hi"],
            {"agentcell.toml": "max_workers = 0\n"},
            2,
            "agentcell.toml: max_workers",
        ),
        (
            ["run", "--model", "openai:x", "hi"],
            {"agentcell.toml": "max_workerz = 3\n"},
            2,
            "unknown setting 'max_workerz'",
        ),
        (
            ["run", "--model", "openai:x", "hi"],
            {"agentcell.toml": "[model_options.openai]\napi_key = 'sk-x'\n"},
            2,
            "API keys do not belong in configuration files",
        ),
        (
            ["run", "--model", "openai:x", "hi"],
            {"agentcell.toml": "model = \n"},
            2,
            "not valid TOML",
        ),
        (["run", "--model", "nope:x", "hi"], {}, 2, "unknown model provider 'nope'"),
        (["agents", "show", "nobody"], {}, 2, "no agent named 'nobody'"),
        (["runs", "show", "nothing"], {}, 2, "no run 'nothing'"),
    ],
    ids=[
        "no-model",
        "no-provider",
        "bad-value",
        "unknown-key",
        "secret-in-file",
        "bad-toml",
        "bad-provider",
        "unknown-agent",
        "unknown-run",
    ],
)
def test_user_errors_are_one_clear_line(
    project: Path, args: list[str], files: dict[str, str], code: int, needle: str
) -> None:
    for name, text in files.items():
        (project / name).write_text(text)
    done = invoke(*args, cwd=project, env=cli_env(project))
    assert done.returncode == code, (done.stdout, done.stderr)
    assert needle in done.stdout + done.stderr
    assert "Traceback" not in done.stderr


def _fast_retries(project: Path) -> None:
    """The user's config: the openai provider's retries 10 ms apart, not 0.5 s and more
    (they are still made: "gave up after 5 attempts")."""
    config = project.parent / "home" / ".config" / "agentcell"
    config.mkdir(parents=True)
    (config / "config.toml").write_text("[model_options.openai]\nretry_base_delay = 0.01\n")


def test_unreachable_model_is_a_failed_run_not_a_crash(project: Path) -> None:
    _fast_retries(project)
    env = cli_env(project, OPENAI_BASE_URL="http://127.0.0.1:9/v1", OPENAI_API_KEY="sk-test")
    done = invoke("run", "--model", "openai:gpt-test", "hi", cwd=project, env=env)
    assert done.returncode == 1
    assert "cannot reach http://127.0.0.1:9/v1" in done.stderr
    assert "(gave up after 5 attempts)" in done.stderr
    assert "Traceback" not in done.stderr


def test_quiet_drops_progress_but_still_says_why_a_run_failed(project: Path) -> None:
    # The real process: nothing else on its stderr (a fork server's or a child's included).
    _fast_retries(project)
    env = cli_env(project, OPENAI_BASE_URL="http://127.0.0.1:9/v1", OPENAI_API_KEY="sk-test")
    done = agentcell("run", "--quiet", "--model", "openai:gpt-test", "hi", cwd=project, env=env)
    assert done.returncode == 1
    (line,) = done.stderr.splitlines()
    assert line.startswith("agentcell: error: ") and "cannot reach http://127.0.0.1:9/v1" in line
    quiet_ok = agentcell("run", "--quiet", "--model", "scripted:echo", "hi", cwd=project, env=env)
    assert quiet_ok.returncode == 0 and quiet_ok.stderr == "", quiet_ok.stderr


def test_debug_shows_the_traceback(project: Path) -> None:
    done = agentcell("run", "--debug", "hi", cwd=project, env=cli_env(project))
    assert done.returncode != 0 and "Traceback" in done.stderr


def test_settings_precedence(project: Path, model_server: ModelServer) -> None:
    model_server.responder = lambda body, api: Reply(text=f"model was {body['model']}")
    config = project.parent / "home" / ".config" / "agentcell"
    config.mkdir(parents=True)
    (config / "config.toml").write_text('model = "openai:from-user-file"\n')
    env = cli_env(project, model_server)
    assert invoke("run", "x", cwd=project, env=env).stdout == "model was from-user-file\n"
    (project / "pyproject.toml").write_text('[tool.agentcell]\nmodel = "openai:from-pyproject"\n')
    assert invoke("run", "x", cwd=project, env=env).stdout == "model was from-pyproject\n"
    (project / "agentcell.toml").write_text('model = "openai:from-project-file"\n')
    assert invoke("run", "x", cwd=project, env=env).stdout == "model was from-project-file\n"
    env["AGENTCELL_MODEL"] = "openai:from-env"
    assert invoke("run", "x", cwd=project, env=env).stdout == "model was from-env\n"
    assert (
        invoke("run", "--model", "openai:from-flag", "x", cwd=project, env=env).stdout
        == "model was from-flag\n"
    )


GOOD_AGENT = """---
name: reviewer
description: Reviews code
tools: Read, Grep
model: sonnet
---
You review code.
"""

BAD_AGENT = """---
name: broken
description: bad turns
maxTurns: ten
permissionMode: yolo
---
Body.
"""


def test_agents_validate_list_and_show(project: Path) -> None:
    agents_dir = project / ".claude" / "agents"
    agents_dir.mkdir(parents=True)
    (agents_dir / "reviewer.md").write_text(GOOD_AGENT)
    env = cli_env(project)

    good = invoke("agents", "validate", cwd=project, env=env)
    assert good.returncode == 0, good.stdout
    assert "1 file(s) checked, 0 failed" in good.stdout

    (agents_dir / "broken.md").write_text(BAD_AGENT)
    bad = invoke("agents", "validate", str(agents_dir), cwd=project, env=env)
    assert bad.returncode == 1
    problems = [line for line in bad.stdout.splitlines() if "broken.md" in line]
    assert len(problems) == 2  # one line per problem
    assert any("maxTurns" in line for line in problems) and any("yolo" in line for line in problems)

    listed = json.loads(invoke("agents", "list", "--json", cwd=project, env=env).stdout)
    by_name = {a["name"]: a for a in listed["agents"]}
    assert {"general-purpose", "Explore", "Plan", "reviewer"} <= set(by_name)
    assert by_name["reviewer"]["tools"] == ["read_file", "grep"]
    assert by_name["reviewer"]["source"] == ".claude/agents/reviewer.md"
    assert by_name["reviewer"]["resolved_model"] == "anthropic:claude-sonnet-4-5"
    assert "task" not in by_name["general-purpose"]["tools"]

    shown = invoke("agents", "show", "reviewer", cwd=project, env=env)
    assert shown.returncode == 0 and "You review code." in shown.stdout


def test_agents_validate_reports_duplicates_and_overrides_as_list_counts_them(
    project: Path,
) -> None:
    extra = project / "more-agents"
    (extra / "a").mkdir(parents=True)
    (extra / "b").mkdir()
    (extra / "a" / "reviewer.md").write_text(GOOD_AGENT)
    (extra / "b" / "reviewer.md").write_text(GOOD_AGENT.replace("Reviews code", "Second"))
    (extra / "explore.md").write_text(GOOD_AGENT.replace("name: reviewer", "name: Explore"))
    (extra / "devops.md").write_text(
        GOOD_AGENT.replace("name: reviewer", "name: Python DevOps/CI-CD Expert")
    )
    env = cli_env(project)

    done = invoke(
        "agents", "validate", "--verbose", "--agents-dir", str(extra), cwd=project, env=env
    )
    assert done.returncode == 0, done.stdout  # warnings, but every file loaded
    lines = done.stdout.splitlines()
    [duplicate] = [line for line in lines if "agent 'reviewer'" in line]
    assert duplicate.startswith("more-agents/b/reviewer.md: warning: ")
    assert "overrides the one from" in duplicate and "a/reviewer.md" in duplicate
    [builtin] = [line for line in lines if "agent 'Explore'" in line]
    assert builtin.startswith("more-agents/explore.md: info: ") and "from builtin" in builtin
    [renamed] = [line for line in lines if "devops.md: warning" in line]
    assert "loaded as 'python-devops-ci-cd-expert'" in renamed
    assert lines[-1] == "4 file(s) checked, 0 failed, 2 problem(s)"

    # The same folder given as a path: the same findings.
    by_path = invoke("agents", "validate", "-v", str(extra), cwd=project, env=env)
    assert by_path.stdout.splitlines()[-1] == lines[-1]

    listed = invoke("agents", "list", "--agents-dir", str(extra), cwd=project, env=env)
    assert "2 problem(s) while loading" in listed.stdout
    document = json.loads(
        invoke("agents", "list", "--json", "--agents-dir", str(extra), cwd=project, env=env).stdout
    )
    assert [p["level"] for p in document["problems"]] == ["warning", "warning"]
    assert {p["path"] for p in document["problems"]} == {
        str(extra / "b" / "reviewer.md"),
        str(extra / "devops.md"),
    }
    assert any("agent 'Explore'" in n["message"] for n in document["notes"])
    assert "python-devops-ci-cd-expert" in {a["name"] for a in document["agents"]}

    missing = invoke("agents", "validate", "--agents-dir", "nowhere", cwd=project, env=env)
    assert "nowhere: warning: agents folder not found" in missing.stdout


def test_demo_exits_zero_and_prints_the_table(tmp_path: Path) -> None:
    env = cli_env(tmp_path)
    done = agentcell("demo", cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    assert "Summary of the parallel survey" in done.stdout
    assert "sub-agents" in done.stderr and "crashed" in done.stderr and "SIGSEGV" in done.stderr
    rows = [
        line for line in done.stderr.splitlines() if re.match(r"a\d+\s+(Explore|crash-test)", line)
    ]
    assert len(rows) == 5


# -- chat through a pseudo-terminal ----------------------------------------------------------


class Terminal:
    """``agentcell chat`` on a pseudo-terminal: type lines, wait for text to appear."""

    def __init__(self, args: list[str], cwd: Path, env: dict[str, str]) -> None:
        import pty

        pid, fd = pty.fork()
        if pid == 0:  # the child: become agentcell
            os.chdir(cwd)
            os.execve(AGENTCELL, [AGENTCELL, *args], env)
        self.pid, self.fd = pid, fd
        self.output = ""
        self._seen = 0  # where the next expect starts looking

    def expect(self, text: str, timeout: float = 60) -> str:
        """Read until ``text`` appears after the previous match; returns the output
        since that match (the timeout is only a safety net)."""
        deadline = time.monotonic() + timeout
        while text not in self.output[self._seen :]:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"never saw {text!r}; output so far:\n{self.output}")
            chunk = read_pty(self.fd, left)
            if chunk == b"":
                raise AssertionError(f"exited before {text!r}; output:\n{self.output}")
            if chunk is not None:
                self.output += chunk.decode(errors="replace").replace("\r\n", "\n")
        start = self._seen
        self._seen = self.output.index(text, start) + len(text)
        return self.output[start : self._seen]

    def send(self, data: str) -> None:
        os.write(self.fd, data.encode())

    def close(self) -> int:
        try:
            _, status = os.waitpid(self.pid, 0)
        finally:
            os.close(self.fd)
        return os.waitstatus_to_exitcode(status)

    def kill(self) -> None:
        try:
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
        os.close(self.fd)


def chat_responder(body: dict, api: str) -> Reply:
    messages = body["messages"]
    last_user = next(m["content"] for m in reversed(messages) if m["role"] == "user")
    results = [m for m in messages if m["role"] == "tool"]
    main = "main agent of agentcell" in messages[0]["content"]
    if main and last_user == "run echo please" and (not results or messages[-1]["role"] == "user"):
        return Reply(tool_calls=[Call("bash", {"command": "echo approved-42"})])
    if main and last_user == "run echo please":
        return Reply(text=f"bash said: {results[-1]['content'].strip()}")
    if main and last_user == "something slow":
        if messages[-1]["role"] == "user":
            return Reply(
                tool_calls=[
                    Call(
                        "task",
                        {"subagent_type": "Explore", "prompt": "hang", "description": "slow one"},
                    )
                ]
            )
        return Reply(text="unexpected")
    if not main and last_user == "hang":
        return Reply(hang=True)
    if not main:
        return Reply(text=f"explored: {last_user}")
    return Reply(text="ok")


def test_chat_through_a_pseudo_terminal(project: Path, model_server: ModelServer) -> None:
    model_server.responder = chat_responder
    env = cli_env(project, model_server, TERM="dumb")
    term = Terminal(["chat", "--model", "openai:gpt-test"], project, env)
    pids: list[int] = []
    try:
        term.expect("you> ")
        term.send("@Explore where is the config\n")
        term.expect("explored: where is the config")

        term.send("run echo please\n")
        term.expect("wants to run bash")
        term.expect("allow? [y]es / [n]o / [a]lways for bash:")
        term.send("y\n")
        term.expect("bash said: approved-42")

        term.send("/tasks\n")
        term.expect("no background tasks")

        term.send("something slow\n")
        started = term.expect('"slow one": started in process')
        pids = [int(p) for p in re.findall(r'"slow one": started in process (\d+)', started)]
        term.send("\x03")  # Ctrl-C: cancels the turn, not the program
        term.expect("cancelling this turn")
        term.expect("cancelled: the run was cancelled", timeout=60)
        assert_gone(pids)

        term.send("/quit\n")
        term.expect("bye")
        assert term.close() == 0
    except BaseException:
        term.kill()
        raise
    finally:
        for pid in pids:
            _proc.kill_session(pid)


def test_an_agent_run_beside_a_running_turn(project: Path, model_server: ModelServer) -> None:
    """``@agent`` while a turn runs (the README's command table says it works then): it
    runs beside the turn, as its own direct run, and its answer shows when it ends."""
    model_server.responder = chat_responder
    env = cli_env(project, model_server, TERM="dumb")
    term = Terminal(["chat", "--model", "openai:gpt-test"], project, env)
    pids: list[int] = []
    try:
        term.expect("you> ")
        term.send("something slow\n")
        started = term.expect('"slow one": started in process')
        pids = [int(p) for p in re.findall(r'"slow one": started in process (\d+)', started)]
        term.send("@Explore where is the config\n")
        term.expect("beside this turn")
        term.expect("explored: where is the config")  # while the slow one still runs
        term.send("\x03")
        term.expect("cancelled: the run was cancelled", timeout=60)
        assert_gone(pids)
        term.send("/quit\n")
        term.expect("bye")
        assert term.close() == 0
    except BaseException:
        term.kill()
        raise
    finally:
        for pid in pids:
            _proc.kill_session(pid)


def test_ctrl_c_at_an_approval_question_cancels_the_turn(
    project: Path, model_server: ModelServer
) -> None:
    """The README: Ctrl-C cancels the turn. At an approval question it used to answer "no"
    alone, and the turn carried on."""
    model_server.responder = chat_responder
    env = cli_env(project, model_server, TERM="dumb")
    term = Terminal(["chat", "--model", "openai:gpt-test"], project, env)
    try:
        term.expect("you> ")
        term.send("run echo please\n")
        term.expect("allow? [y]es / [n]o / [a]lways for bash:")
        term.send("\x03")
        term.expect("cancelling this turn")
        term.expect("cancelled: the run was cancelled", timeout=60)
        term.send("/quit\n")
        term.expect("bye")
        assert term.close() == 0
    except BaseException:
        term.kill()
        raise
