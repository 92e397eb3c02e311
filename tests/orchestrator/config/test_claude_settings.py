"""Claude Code's settings files: ``.claude/settings.json``, ``.claude/settings.local.json``
and the user's ``~/.claude/settings.json``, written as Claude Code documents them (nested
``hooks``, ``permissions`` with ``allow``/``deny``/``ask`` rules in its syntax,
``defaultMode``, ``additionalDirectories``). A trusted folder's apply, through a real
sub-agent; an untrusted folder's are ignored with one line; a symlink is not followed.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from agentcell.orchestrator import AgentDefinition, Orchestrator
from agentcell.orchestrator.approvals._hooks import HookRunner
from agentcell.orchestrator.config._load import load_settings
from agentcell.orchestrator.config._trust import trust
from agentcell.protocol import RunStatus
from conftest import SpawnRecorder
from model_servers import ModelServer
from settings_calls import SEP, calls_then_report

PY = sys.executable
SECRET = "sk-live-settings-json-SECRET-42"

GUARD = """\
import json, sys
doc = json.load(sys.stdin)
if doc.get("tool_name") == "Bash" and "rm -rf" in doc["tool_input"].get("command", ""):
    print("Blocked by the project's guard", file=sys.stderr)
    sys.exit(2)
"""


@pytest.fixture
def served(model_server: ModelServer, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModelServer]:
    monkeypatch.setenv("OPENAI_BASE_URL", model_server.openai_base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-claude-settings-test-key")
    yield model_server


class Folder:
    """A home and a project laid out as a Claude Code user has them."""

    def __init__(self, tmp_path: Path) -> None:
        self.home = tmp_path / "home"
        self.project = tmp_path / "project"
        (self.home / ".claude").mkdir(parents=True)
        (self.project / ".claude" / "hooks").mkdir(parents=True)
        (self.project / ".claude" / "hooks" / "guard.py").write_text(GUARD)
        self.env = {"XDG_CONFIG_HOME": str(self.home / ".config")}
        self.write(
            self.project / ".claude" / "settings.json",
            {
                "$schema": "https://json.schemastore.org/claude-code-settings.json",
                "permissions": {
                    "allow": ["Bash(git status:*)"],
                    "deny": ["Read(./.env)", "NotebookEdit(x.ipynb)"],
                    "defaultMode": "acceptEdits",
                    "additionalDirectories": ["../shared-lib"],
                },
                "hooks": {
                    "PreToolUse": [
                        {
                            "matcher": "Bash",
                            "hooks": [
                                {
                                    "type": "command",
                                    "command": f'{PY} "$CLAUDE_PROJECT_DIR/.claude/hooks/guard.py"',
                                    "timeout": 30,
                                }
                            ],
                        }
                    ]
                },
                "env": {"FOO": "bar"},
            },
        )
        self.write(
            self.project / ".claude" / "settings.local.json",
            {"permissions": {"deny": ["Bash(curl:*)"]}},
        )
        self.write(
            self.home / ".claude" / "settings.json", {"permissions": {"deny": ["Bash(wget:*)"]}}
        )

    @staticmethod
    def write(path: Path, doc: dict[str, Any]) -> None:
        path.write_text(json.dumps(doc, indent=2))

    def trust(self) -> None:
        trust(self.project, self.home / ".config" / "agentcell" / "config.toml")

    def settings(self, notices: list[str] | None = None) -> Any:
        return load_settings(workdir=self.project, home=self.home, env=self.env, notices=notices)[0]


async def test_a_trusted_projects_claude_settings_guard_a_real_sub_agent(
    spawned: SpawnRecorder, tmp_path: Path, served: ModelServer
) -> None:
    folder = Folder(tmp_path)
    folder.trust()
    project = folder.project
    (project / ".env").write_text(f"OPENAI_API_KEY={SECRET}\n")
    (project / "junk").mkdir()
    settings = folder.settings()
    settings.approval = "allow"
    settings.warm_spares = 0
    settings.model = "openai:test"
    served.responder = calls_then_report(
        [
            ("read_file", {"path": ".env"}),
            ("read_file", {"path": str(project.resolve() / ".env")}),
            ("bash", {"command": "rm -rf junk"}),
            ("bash", {"command": "curl -s http://127.0.0.1:9/"}),
            ("bash", {"command": "wget -q http://127.0.0.1:9/"}),
        ]
    )
    definition = AgentDefinition(
        name="worker",
        description="works",
        tools=["read_file", "bash"],
        model="openai:test",
        source="test",
    )
    async with Orchestrator(
        settings=settings,
        workdir=project,
        agents=[definition],
        load_agent_files=False,
        record=False,
    ) as orch:
        result = await asyncio.wait_for(orch.delegate("worker", "go"), 60)
    assert result.status is RunStatus.COMPLETED, result
    relative, absolute, removed, curl, wget = result.text.split(SEP)
    assert "denied by the rule read_file(.env)" in relative
    assert "denied by the rule read_file(" in absolute  # the absolute spelling too
    assert "Blocked by the project's guard" in removed and (project / "junk").is_dir()
    assert "denied by the rule bash(curl *)" in curl  # settings.local.json
    assert "denied by the rule bash(wget *)" in wget  # ~/.claude/settings.json
    assert all(SECRET not in json.dumps(request.body) for request in served.requests)


def test_what_a_trusted_projects_settings_become_and_where_each_came_from(
    tmp_path: Path,
) -> None:
    folder = Folder(tmp_path)
    folder.trust()
    notices: list[str] = []
    settings = folder.settings(notices)
    root = folder.project.resolve()
    # The user's, the project's and the local file's rules all hold (they add up).
    assert settings.deny_rules == [
        "bash(wget)",
        "bash(wget *)",
        # .env, and what is in it should it be a folder (gitignore's reading)
        *[
            f"{tool}({pattern})"
            for tool in ("read_file", "grep", "glob")
            for pattern in (
                ".env",
                f"{root}/.env",
                "*/.env",
                ".env/*",
                f"{root}/.env/*",
                "*/.env/*",
            )
        ],
        "bash(curl)",
        "bash(curl *)",
    ]
    assert settings.allow_rules == ["bash(git status)", "bash(git status *)"]
    assert settings.permission_mode == "accept_edits"
    assert settings.sandbox_read == [str(root.parent / "shared-lib")]
    [hook] = HookRunner.from_table(settings.hooks, "config").commands
    assert hook.event == "PreToolUse" and hook.matcher == "Bash" and hook.timeout_s == 30
    assert hook.origin == str(folder.project / ".claude" / "settings.json")
    assert any("NotebookEdit(x.ipynb)" in n and "no such tool" in n for n in notices)


def test_an_untrusted_projects_claude_settings_keep_only_deny_and_ask_rules_one_line_each(
    tmp_path: Path,
) -> None:
    folder = Folder(tmp_path)
    notices: list[str] = []
    settings = folder.settings(notices)
    assert settings.hooks == {}
    assert settings.allow_rules == [] and settings.permission_mode == "default"
    assert settings.sandbox_read == []
    # A deny rule only narrows: the project's hold beside the user's own (issue 39 §8).
    assert settings.deny_rules[:2] == ["bash(wget)", "bash(wget *)"]
    assert {"read_file(.env)", "bash(curl)", "bash(curl *)"} <= set(settings.deny_rules)
    ignored = [n for n in notices if "hooks and allow rules ignored" in n]
    assert [n.split(":")[0] for n in ignored] == [
        str(folder.project / ".claude" / "settings.json"),
        str(folder.project / ".claude" / "settings.local.json"),
    ]
    assert all("; 1 deny/ask rule applied" in n for n in ignored)  # NotebookEdit: no tool
    assert all("not trusted" in n and "(run 'agentcell trust' in it" in n for n in ignored)


def test_a_settings_file_behind_a_symlink_is_not_followed(tmp_path: Path) -> None:
    folder = Folder(tmp_path)
    folder.trust()
    outside = tmp_path / "outside.json"
    Folder.write(outside, {"permissions": {"defaultMode": "bypassPermissions"}})
    local = folder.project / ".claude" / "settings.local.json"
    local.unlink()
    local.symlink_to(outside)
    notices: list[str] = []
    settings = folder.settings(notices)
    assert settings.permission_mode == "accept_edits"  # settings.json's, not the link's
    assert f"{local}: ignored: it is a symlink, not followed" in notices
    # A linked .claude folder: nothing beneath it is read.
    claude = folder.project / ".claude"
    claude.rename(tmp_path / "elsewhere")
    claude.symlink_to(tmp_path / "elsewhere")
    notices.clear()
    settings = folder.settings(notices)
    assert settings.hooks == {} and settings.permission_mode == "default"
    assert sum("it is a symlink, not followed" in n for n in notices) == 2


def test_claude_code_rules_translate_into_ours(tmp_path: Path) -> None:
    from agentcell.orchestrator.config._claude_settings import translate_rule

    base = tmp_path
    real = os.path.realpath(tmp_path)
    assert translate_rule("Bash", base) == ["bash"]
    assert translate_rule("Bash(npm run test:*)", base) == [
        "bash(npm run test)",
        "bash(npm run test *)",
    ]
    assert translate_rule("Bash(git log)", base) == ["bash(git log)"]
    assert translate_rule("Edit", base) == ["edit_file", "write_file"]
    # A deny rule ``dir/**`` holds for such a folder at any depth (Claude Code's docs).
    assert translate_rule("Write(src/**)", base) == [
        "write_file(src/**)",
        f"write_file({real}/src/**)",
        "write_file(*/src/**)",
    ]
    assert translate_rule("Read(//etc/passwd)", base) == [
        "read_file(/etc/passwd)",
        "grep(/etc/passwd)",
        "glob(/etc/passwd)",
    ]
    assert translate_rule("mcp__github", base) == ["mcp__github__*"]
    assert translate_rule("mcp__github__create_issue", base) == ["mcp__github__create_issue"]
    assert translate_rule("Task(reviewer)", base) == ["task(reviewer)"]
    assert translate_rule("WebFetch", base) == ["web_fetch"]
    # Matched against the URL's host in the child (a URL glob never matched: see
    # test_claude_rules_compat.py).
    assert translate_rule("WebFetch(domain:example.com)", base) == ["web_fetch(domain:example.com)"]
    assert translate_rule("NotebookEdit(x.ipynb)", base) is None


def test_agents_show_says_where_each_rule_and_hook_came_from(tmp_path: Path) -> None:
    import subprocess

    folder = Folder(tmp_path)
    folder.trust()
    (folder.project / "agentcell.toml").write_text(
        'deny_rules = ["bash(sudo *)"]\n[[hooks.Stop]]\ncommand = "./done.sh"\n'
    )
    # Read covers grep and glob: with Grep beside it, grep was listed twice (issue 44).
    user_file = folder.home / ".claude" / "settings.json"
    user = json.loads(user_file.read_text())
    user.setdefault("permissions", {})["allow"] = ["Grep", "Read"]
    user_file.write_text(json.dumps(user))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENTCELL_", "XDG_"))}
    env.update(HOME=str(folder.home), NO_COLOR="1", COLUMNS="250", **folder.env)
    done = subprocess.run(
        [str(Path(PY).with_name("agentcell")), "agents", "show", "general-purpose", "--json"],
        cwd=folder.project,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    configured = json.loads(done.stdout)["configured"]
    assert "deny bash(wget *)  (from ~/.claude/settings.json)" in configured
    assert "deny bash(curl *)  (from .claude/settings.local.json)" in configured
    assert "allow bash(git status)  (from .claude/settings.json)" in configured
    assert "deny bash(sudo *)  (from agentcell.toml)" in configured
    assert "hook Stop ./done.sh  (from agentcell.toml)" in configured
    allowed = [line.split("  ")[0] for line in configured if line.startswith("allow ")]
    assert sorted(allowed) == [
        "allow bash(git status *)",
        "allow bash(git status)",
        "allow glob",
        "allow grep",
        "allow read_file",
    ]
    [guard] = [line for line in configured if line.startswith("hook PreToolUse[Bash]")]
    assert guard.endswith("(from .claude/settings.json)")


def test_a_project_file_cannot_drop_the_users_deny_rules(tmp_path: Path) -> None:
    """deny and ask rules join over every layer: an untrusted (or trusted) project's
    ``deny_rules = []`` leaves the user's ~/.claude/settings.json rules in force."""
    folder = Folder(tmp_path)
    (folder.project / "agentcell.toml").write_text("deny_rules = []\nask_rules = []\n")
    assert folder.settings().deny_rules[:2] == ["bash(wget)", "bash(wget *)"]
    folder.trust()
    assert folder.settings().deny_rules[:2] == ["bash(wget)", "bash(wget *)"]


def test_the_users_own_settings_file_may_be_a_link(tmp_path: Path) -> None:
    """~/.claude/settings.json is the user's own (often a dotfile manager's link): it is
    followed, unlike a project's."""
    folder = Folder(tmp_path)
    user_file = folder.home / ".claude" / "settings.json"
    dotfiles = tmp_path / "dotfiles.json"
    user_file.rename(dotfiles)
    user_file.symlink_to(dotfiles)
    assert folder.settings().deny_rules[:2] == ["bash(wget)", "bash(wget *)"]
