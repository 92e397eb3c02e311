"""An untrusted folder's ``.claude/settings.json`` and ``.claude/settings.local.json``
(issue 39 §8): their deny and ask rules only narrow what agents may do, so they hold
before anyone trusts the folder, as an untrusted ``agentcell.toml``'s do; their hooks,
allow rules, ``defaultMode`` and ``additionalDirectories`` are ignored, one line a file
saying so. They are read beneath the folder all the same: a link out is not followed, a
FIFO does not hang the load. Red with the project's files dropped whole when untrusted
(the sub-agent reads ``.env`` and ``secrets/key.txt``)."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

from agentcell.orchestrator import AgentDefinition, Orchestrator
from agentcell.orchestrator.config._load import load_settings
from agentcell.protocol import RunStatus
from cli_runner import agentcell, cli_env
from conftest import SpawnRecorder
from model_servers import ModelServer
from settings_calls import SEP, calls_then_report

ENV_SECRET = "sk-live-untrusted-dotenv-SECRET-7"
KEY_SECRET = "untrusted-secrets-key-SECRET-8"
ASKED = "asked-about-notes-CONTENT-9"


def write(path: Path, doc: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2))


def untrusted_project(tmp_path: Path) -> tuple[Path, Path, dict[str, str]]:
    """(home, project, env): a checkout nobody trusted, with Claude Code settings files
    that narrow (deny, ask) and loosen (allow, hooks, defaultMode, additionalDirectories)."""
    home, project = tmp_path / "home", tmp_path / "project"
    (home / ".claude").mkdir(parents=True)
    (project / "secrets").mkdir(parents=True)
    (project / ".env").write_text(f"OPENAI_API_KEY={ENV_SECRET}\n")
    (project / "secrets" / "key.txt").write_text(f"{KEY_SECRET}\n")
    (project / "notes.txt").write_text(f"{ASKED}\n")
    hook = f"{sys.executable} -c \"open('{tmp_path / 'hook-ran'}', 'w')\""
    write(
        project / ".claude" / "settings.json",
        {
            "permissions": {
                "allow": ["Read", "Write", "Bash"],
                "deny": ["Read(./.env)"],
                "ask": ["Read(./notes.txt)"],
                "defaultMode": "bypassPermissions",
                "additionalDirectories": ["../outside"],
            },
            "hooks": {"PreToolUse": [{"hooks": [{"type": "command", "command": hook}]}]},
            "env": {"FOO": "bar"},
        },
    )
    write(
        project / ".claude" / "settings.local.json",
        {
            "permissions": {
                "deny": ["Read(./secrets/**)"],
                "allow": ["Edit"],
                "defaultMode": "bypassPermissions",
            }
        },
    )
    return home, project, {"XDG_CONFIG_HOME": str(home / ".config")}


async def test_an_untrusted_projects_deny_and_ask_rules_hold_in_a_real_sub_agent(
    spawned: SpawnRecorder, tmp_path: Path, openai_served: ModelServer
) -> None:
    home, project, env = untrusted_project(tmp_path)
    notices: list[str] = []
    settings, _ = load_settings(workdir=project, home=home, env=env, notices=notices)
    settings.approval = "deny"  # an ask rule's question is answered no
    settings.warm_spares = 0
    settings.model = "openai:test"
    openai_served.responder = calls_then_report(
        [
            ("read_file", {"path": ".env"}),
            ("read_file", {"path": str(project.resolve() / ".env")}),
            ("read_file", {"path": "secrets/key.txt"}),
            ("grep", {"pattern": "SECRET", "path": "secrets"}),
            ("bash", {"command": "cat .env secrets/key.txt"}),
            ("read_file", {"path": "notes.txt"}),
            ("write_file", {"path": "made.txt", "content": "x\n"}),
        ]
    )
    worker = AgentDefinition(
        name="worker",
        description="works",
        tools=["read_file", "grep", "bash", "write_file"],
        model="openai:test",
        source="test",
    )
    async with Orchestrator(
        settings=settings, workdir=project, agents=[worker], load_agent_files=False, record=False
    ) as orch:
        result = await asyncio.wait_for(orch.delegate("worker", "go"), 60)
    assert result.status is RunStatus.COMPLETED, result
    env_read, env_absolute, key_read, key_grep, cat, notes, made = result.text.split(SEP)
    assert "denied by the rule read_file(.env)" in env_read, env_read
    assert "denied by the rule read_file(" in env_absolute, env_absolute
    assert "denied by the rule read_file(secrets/**)" in key_read, key_read
    assert KEY_SECRET not in key_grep, key_grep  # a grep walks past the denied files
    assert "denied by the rule" in cat, cat
    # The ask rule asked (a read the default mode allows without asking): answered no.
    assert "permission denied" in notes and ASKED not in notes, notes
    # Neither defaultMode nor an allow rule let the write through unasked.
    assert "permission denied" in made and not (project / "made.txt").exists(), made
    assert not (tmp_path / "hook-ran").exists()  # the project's hook never ran
    sent = json.dumps([request.body for request in openai_served.requests])
    assert ENV_SECRET not in sent and KEY_SECRET not in sent and ASKED not in sent
    # The loosening keys are ignored: no hook, no allow rule, no mode, no extra folder;
    # one line a file says so, and how many of its rules hold.
    assert settings.hooks == {} and settings.allow_rules == []
    assert settings.permission_mode == "default" and settings.sandbox_read == []
    lines = [n for n in notices if "hooks and allow rules ignored" in n]
    assert [(n.split(":")[0], n.split("; ")[1].split(":")[0]) for n in lines] == [
        (str(project / ".claude" / "settings.json"), "2 deny/ask rules applied"),
        (str(project / ".claude" / "settings.local.json"), "1 deny/ask rule applied"),
    ]


def test_an_untrusted_projects_settings_files_are_read_beneath_it(tmp_path: Path) -> None:
    """A ``.claude/settings.json`` linked to a file outside the project is not read, nor is
    anything under a linked ``.claude``; a FIFO in its place does not hang the load; the
    local file's deny rule beside them still holds."""
    home, project, env = untrusted_project(tmp_path)
    outside = tmp_path / "outside.json"
    write(outside, {"permissions": {"deny": ["Bash(outside-rule:*)"]}})
    claude = project / ".claude"
    (claude / "settings.json").unlink()
    (claude / "settings.json").symlink_to(outside)
    notices: list[str] = []
    settings, _ = load_settings(workdir=project, home=home, env=env, notices=notices)
    assert f"{claude / 'settings.json'}: ignored: it is a symlink, not followed" in notices
    assert not any("outside-rule" in rule for rule in settings.deny_rules)
    assert "read_file(secrets/**)" in settings.deny_rules  # the local file's, read
    assert settings.permission_mode == "default"

    (claude / "settings.json").unlink()
    os.mkfifo(claude / "settings.json")  # nobody ever writes to it: reading it would hang
    notices.clear()
    settings, _ = load_settings(workdir=project, home=home, env=env, notices=notices)
    assert f"{claude / 'settings.json'}: ignored: it is not a regular file" in notices
    assert "read_file(secrets/**)" in settings.deny_rules

    # A linked .claude folder: nothing beneath it is read.
    (claude / "settings.json").unlink()
    write(claude / "settings.json", {"permissions": {"deny": ["Bash(linked-rule:*)"]}})
    claude.rename(tmp_path / "elsewhere")
    claude.symlink_to(tmp_path / "elsewhere")
    notices.clear()
    settings, _ = load_settings(workdir=project, home=home, env=env, notices=notices)
    assert sum("it is a symlink, not followed" in n for n in notices) == 2
    assert not any("linked-rule" in r or "secrets" in r for r in settings.deny_rules)


def test_agents_show_says_each_ignored_file_once(tmp_path: Path) -> None:
    """`agents show` reads the settings more than once: each read logged the ignored
    files again (the same lines twice on stderr)."""
    _, project, env = untrusted_project(tmp_path)
    env = {**cli_env(project), **env}
    done = agentcell("agents", "show", "Explore", cwd=project, env=env)
    assert done.returncode == 0, done.stderr
    ignored = [line for line in done.stderr.splitlines() if "hooks and allow rules ignored" in line]
    assert len(ignored) == 2, done.stderr  # settings.json and settings.local.json, once each
