"""Claude Code agent collections copied whole into ``.claude/agents`` (issue 44): what
``run``, ``chat`` and ``agents validate`` say about them, an agent file's
``permissionMode: acceptEdits``, and the tools ``agents list``/``show`` name. The files
are real ones from ../shared/agents-corpus (skipped where it is absent), a README
included; ``writer.md`` adds what no file there has (permissionMode, hooks)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from cli_runner import cli_env, invoke, project
from model_servers import Call, ModelServer, Reply
from places import SHARED
from terminal_util import Screen

__all__ = ["project"]  # the fixture (tests/support/cli_runner.py)

CORPUS = SHARED / "agents-corpus"
#: A handful of each collection's shapes, by their path in the corpus.
COPIED = (
    "README.md",  # no frontmatter: Claude Code skips it
    # `description: … Examples: user: "…"`, not strict YAML: read by the tolerant parser
    "VoltAgent__awesome-claude-code-subagents/categories/08-business-product/growth-loops.md",
    # two `expert`s in one folder: the later path wins
    "izzzzzi__izteam/plugins/arena/agents/expert.md",
    "izzzzzi__izteam/plugins/think/agents/expert.md",
    "izzzzzi__izteam/plugins/arena/agents/researcher.md",  # disallows NotebookEdit
    "izzzzzi__izteam/plugins/audit/agents/usage-analyzer.md",  # names LSP
    "Yeachan-Heo__oh-my-claudecode/agents/explore.md",  # `explore` beside the built-in
    "affaan-m__everything-claude-code/agents/docs-lookup.md",  # mcp__context7__… tools
    "affaan-m__everything-claude-code/agents/seo-specialist.md",  # WebSearch, WebFetch
)
WRITER = """---
name: writer
description: Writes the files it is asked to
tools: Read, Write, Edit
permissionMode: acceptEdits
hooks:
  PreToolUse:
    - matcher: Bash
      hooks:
        - type: command
          command: echo checked
---
Write what you are asked to.
"""


@pytest.fixture
def collection(project: Path) -> Path:
    """``project`` with the collection copied into its .claude/agents (not trusted)."""
    if not (CORPUS / "MANIFEST.tsv").is_file():
        pytest.skip(f"agent corpus not found at {CORPUS} (it is not part of the repository)")
    agents = project / ".claude" / "agents"
    for name in COPIED:
        (agents / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(CORPUS / name, agents / name)
    (agents / "writer.md").write_text(WRITER)
    return project


def _env(collection: Path, served: ModelServer) -> dict[str, str]:
    """The CLI's environment, with an Anthropic key: the corpus's `model: haiku` agents
    are reachable (one unreachable is said too: test_cli_unreachable.py)."""
    return {**cli_env(collection, served), "ANTHROPIC_API_KEY": "sk-ant-not-used"}


def _notices(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("agentcell: ")]


# -- 1. what run, chat and validate say ----------------------------------------------------


def test_run_says_only_what_changes_what_an_agent_may_do(
    collection: Path, model_server: ModelServer
) -> None:
    model_server.add(Reply(text="ok"))
    done = invoke("run", "--model", "openai:gpt-test", "hi", cwd=collection, env=_env(
        collection, model_server))  # fmt: skip
    assert done.returncode == 0 and done.stdout == "ok\n", done.stderr
    notices = _notices(done.stderr)
    # writer.md's hooks and acceptEdits, dropped in an untrusted folder: one line each.
    assert len(notices) == 2, notices
    assert all("writer.md" in line and "not trusted" in line for line in notices)
    assert "permission_mode ignored" in notices[0] and "hooks ignored" in notices[1]


def test_chat_on_a_terminal_shows_the_same_two_lines(
    collection: Path, model_server: ModelServer
) -> None:
    term = Screen(["chat", "--model", "openai:gpt-test"], collection, _env(
        collection, model_server))  # fmt: skip
    try:
        screen = term.expect("you>")
        term.send("/quit\n")
        term.expect("bye")
        assert term.close() == 0
    finally:
        term.kill()
    said = [line for line in screen.splitlines() if line.startswith("agentcell: ")]
    assert len(said) == 2 and all("writer.md" in line for line in said), screen
    for noise in ("README", "overrides", "NotebookEdit", "LSP", "strict YAML", "explore"):
        assert noise not in screen


def test_validate_names_problems_counts_the_rest_and_fails_only_for_an_agent_file(
    collection: Path,
) -> None:
    env = cli_env(collection)
    done = invoke("agents", "validate", cwd=collection, env=env)
    assert done.returncode == 0, done.stdout
    lines = done.stdout.splitlines()
    assert "1 .md file(s) without frontmatter skipped: not agent files" in done.stdout
    assert not [line for line in lines if "README.md" in line or ": info: " in line]
    [override] = [line for line in lines if "agent 'expert'" in line]
    assert override.startswith(".claude/agents/izzzzzi__izteam/plugins/think/agents/expert.md")
    # The notes hidden are counted, and --verbose shows them.
    [hidden] = [line for line in lines if line.endswith("note(s) not shown: --verbose shows them")]
    verbose = invoke("agents", "validate", "--verbose", cwd=collection, env=env).stdout
    notes = [line for line in verbose.splitlines() if ": info: " in line]
    assert len(notes) == int(hidden.split()[0])
    assert any("growth-loops.md: info: frontmatter is not strict YAML" in n for n in notes)
    assert ".claude/agents/README.md: skipped: no frontmatter" in verbose
    # On a terminal: the same lines (wrapped to its width), the same exit code.
    term = Screen(["agents", "validate"], collection, env)
    try:
        screen = term.expect("file(s) checked")
        assert term.close() == 0
    finally:
        term.kill()
    assert "".join(screen.split()) == "".join(done.stdout.split())
    # A file that is an agent file and fails: exit 1.
    agents = collection / ".claude" / "agents"
    (agents / "half.md").write_text("---\nname: half\ndescription: no end\n\nBody\n")
    failed = invoke("agents", "validate", cwd=collection, env=env)
    assert failed.returncode == 1
    assert ".claude/agents/half.md: error: no closing '---'" in failed.stdout


# -- 2. permissionMode: acceptEdits, and --permission-mode ---------------------------------


def _writes(body: dict[str, Any], api: str) -> Reply:
    """The main agent gives writer one file to write; writer writes it."""
    messages = body["messages"]
    done = [m for m in messages if m["role"] == "tool"]
    if "main agent of agentcell" in messages[0]["content"]:
        if done:
            return Reply(text="delegated")
        task = {"subagent_type": "writer", "prompt": "write it", "description": "write"}
        return Reply(tool_calls=[Call("task", task)])
    if done:
        return Reply(text=f"write_file said: {done[0]['content']}")
    return Reply(tool_calls=[Call("write_file", {"path": "out.txt", "content": "written"})])


def test_an_agent_files_accept_edits_applies_unless_a_mode_is_chosen(
    project: Path, model_server: ModelServer
) -> None:
    agents = project / ".claude" / "agents"
    agents.mkdir(parents=True)
    (agents / "writer.md").write_text(WRITER)
    model_server.responder = _writes
    env = cli_env(project, model_server)
    assert invoke("trust", cwd=project, env=env).returncode == 0
    # No terminal to ask on: only acceptEdits lets the write through.
    done = invoke("run", "--json", "--model", "openai:gpt-test", "go", cwd=project, env=env)
    (sub,) = json.loads(done.stdout)["subagents"]
    assert (project / "out.txt").read_text() == "written", sub
    assert sub["warnings"] == [] and _notices(done.stderr) == []
    (project / "out.txt").unlink()
    chosen = invoke(
        "run", "--json", "--permission-mode", "default", "--model", "openai:gpt-test", "go",
        cwd=project, env=env,
    )  # fmt: skip
    (sub,) = json.loads(chosen.stdout)["subagents"]
    assert not (project / "out.txt").exists()
    assert "no terminal to ask on" in sub["final_text"]
    [why] = sub["warnings"]
    assert why.startswith("permissionMode acceptEdits is not applied: the session's permission")
    [said] = _notices(chosen.stderr)  # and once before the run, for the session
    assert said.endswith(f"writer.md: {why}")


def _main_writes(body: dict[str, Any], api: str) -> Reply:
    done = [m for m in body["messages"] if m["role"] == "tool"]
    if done:
        return Reply(text=f"write_file said: {done[0]['content']}")
    return Reply(tool_calls=[Call("write_file", {"path": "out.txt", "content": "written"})])


@pytest.mark.parametrize(
    ("given", "code", "said"),
    [
        ("yolo", 2, "--permission-mode yolo: permission_mode: unknown permission mode 'yolo'"),
        ("acceptEdits", 0, "write_file said: Created out.txt"),  # Claude Code's spelling
        ("plan", 0, "plan mode"),
    ],
)
def test_the_permission_mode_flag_takes_what_the_setting_takes(
    project: Path, model_server: ModelServer, given: str, code: int, said: str
) -> None:
    model_server.responder = _main_writes
    env = cli_env(project, model_server)
    done = invoke("run", "--permission-mode", given, "--model", "openai:gpt-test", "x",
                  cwd=project, env=env)  # fmt: skip
    assert done.returncode == code, done.stderr
    assert said in done.stdout + done.stderr and "Traceback" not in done.stderr
    assert (project / "out.txt").exists() is (given == "acceptEdits")


# -- 3. the tools agents list and show name ---------------------------------------------------


def _configure(project: Path, *lines: str) -> dict[str, str]:
    home = project.parent / "home"
    (home / ".config" / "agentcell").mkdir(parents=True, exist_ok=True)
    (home / ".config" / "agentcell" / "config.toml").write_text("\n".join(lines) + "\n")
    return cli_env(project)


def test_list_names_web_fetch_mcp_and_a_web_search_only_where_it_is_offered(
    collection: Path,
) -> None:
    server = '[mcp_servers.context7]\ncommand = "true"'
    env = _configure(collection, 'model = "anthropic:claude-sonnet-4-5"', server)
    listed = json.loads(invoke("agents", "list", "--json", cwd=collection, env=env).stdout)
    tools = {row["name"]: row["tools"] for row in listed["agents"]}
    assert tools["docs-lookup"] == [
        "read_file",
        "grep",
        "mcp__context7__resolve-library-id",
        "mcp__context7__query-docs",
    ]
    assert tools["seo-specialist"] == ["read_file", "glob", "grep", "web_fetch", "web_search"]
    # sonnet on an OpenAI model: no server-side search there, and validate says so.
    env = _configure(collection, '[aliases]\nsonnet = "openai:gpt-test"', server)
    listed = json.loads(invoke("agents", "list", "--json", cwd=collection, env=env).stdout)
    tools = {row["name"]: row["tools"] for row in listed["agents"]}
    assert tools["seo-specialist"] == ["read_file", "glob", "grep", "web_fetch"]
    checked = invoke("agents", "validate", cwd=collection, env=env).stdout
    [refused] = [line for line in checked.splitlines() if "web_search" in line]
    assert refused.startswith(".claude/agents/affaan-m__everything-claude-code/agents/seo-")
    assert "warning: web_search is not offered" in refused


def test_show_on_a_terminal_and_through_a_pipe_says_the_tools_and_the_mode(
    project: Path,
) -> None:
    agents = project / ".claude" / "agents"
    agents.mkdir(parents=True)
    (agents / "writer.md").write_text(
        WRITER.replace("tools: Read, Write, Edit", "tools: Read, Write, WebFetch, mcp__docs")
    )
    env = _configure(project, 'permission_mode = "default"', '[mcp_servers.docs]\ncommand = "x"')
    assert invoke("trust", cwd=project, env=env).returncode == 0
    piped = invoke("agents", "show", "writer", cwd=project, env=env).stdout
    term = Screen(["agents", "show", "writer"], project, env)
    try:
        screen = term.expect("System prompt")
        assert term.close() == 0
    finally:
        term.kill()
    for shown in (piped, screen):
        text = " ".join(shown.split())  # as wrapped to the terminal's width
        assert "tools read_file, write_file, web_fetch, mcp__docs__*" in text
        assert (
            "permission mode accept_edits (permissionMode acceptEdits is not applied: the "
            "session's permission mode was chosen" in text
        )
