"""Skills: SKILL.md preloaded into a sub-agent's system prompt, seen on the wire."""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from agentcell.orchestrator import AgentDefinition, Orchestrator, Settings
from agentcell.orchestrator.definitions._loader import parse_agent_text
from agentcell.orchestrator.definitions._skills import find_skill, load_skills, with_skills
from agentcell.protocol import RunStatus
from cli_runner import AGENTCELL
from conftest import SpawnRecorder
from model_servers import ModelServer, Reply

MARKER = "SKILL-MARKER-7f3a: always answer in haiku"


def write_skill(root: Path, name: str, body: str, description: str = "How to write haiku") -> Path:
    folder = root / name
    folder.mkdir(parents=True)
    path = folder / "SKILL.md"
    path.write_text(f"---\nname: {name}\ndescription: {description}\n---\n{body}\n")
    return path


async def delegated(workdir: Path, agent: AgentDefinition, prompt: str) -> Any:
    """``agent``'s result for ``prompt``, from an orchestrator of its own in ``workdir``."""
    orch = Orchestrator(
        settings=Settings(model="openai:test", approval="allow", max_workers=1, warm_spares=0),
        workdir=workdir,
        agents=[agent],
        load_agent_files=False,
        record=False,
    )
    async with orch:
        return await asyncio.wait_for(orch.delegate(agent.name, prompt), 60)


async def test_a_skill_reaches_the_childs_system_prompt_on_the_wire(
    spawned: SpawnRecorder,
    tmp_path: Path,
    model_server: ModelServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("OPENAI_BASE_URL", model_server.openai_base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-skill-test-key")
    write_skill(tmp_path / ".claude" / "skills", "haiku", MARKER)
    model_server.add(Reply(text="done"))
    agent = AgentDefinition(
        name="poet",
        description="writes",
        system_prompt="You are a poet.",
        skills=["haiku", "missing-skill"],
        model="openai:test",
    )
    result = await delegated(tmp_path, agent, "write")
    assert result.status is RunStatus.COMPLETED, result
    system = model_server.requests[0].body["messages"][0]
    assert system["role"] == "system"
    assert system["content"].startswith("You are a poet.")
    folder = tmp_path / ".claude" / "skills" / "haiku"
    section = f"## Skill: haiku\nHow to write haiku\n\nBase directory for this skill: {folder}\n\n"
    assert section + MARKER in system["content"]
    # A missing skill: one warning with the result, never a failed run.
    assert len(result.warnings) == 1 and "skill 'missing-skill' not found" in result.warnings[0]


def test_skills_are_found_project_first_then_home(tmp_path: Path) -> None:
    project, home = tmp_path / "p", tmp_path / "h"
    write_skill(home / ".claude" / "skills", "shared", "from home")
    write_skill(project / ".agentcell" / "skills", "shared", "from the project")
    write_skill(home / ".agentcell" / "skills", "mine", "only mine")
    skills, missing = load_skills(["shared", "mine", "nope", "../etc"], project, home=home)
    assert [s.body.strip() for s in skills] == ["from the project", "only mine"]
    assert "skill 'nope' not found" in missing[0] and "not a folder name" in missing[1]
    assert with_skills("base", []) == "base"
    plain = project / ".claude" / "skills" / "plain"
    plain.mkdir(parents=True)
    (plain / "SKILL.md").write_text("No frontmatter at all.")
    skill = find_skill("plain", project, home=home)
    assert not isinstance(skill, str) and skill.body == "No frontmatter at all."


def test_skills_and_mcp_servers_are_fields_not_ignored_keys() -> None:
    loaded = parse_agent_text(
        "---\nname: x\ndescription: d\nskills: [a, b]\nmcpServers:\n  - github\n"
        "  - local: {command: python, args: [s.py]}\n---\nbody",
        path="x.md",
    )
    (definition,) = loaded.definitions
    assert definition.skills == ["a", "b"]
    assert definition.mcp_server_names == ["github", "local"]
    assert definition.extra == {}
    assert not any("ignored" in d.message or "does not" in d.message for d in loaded.diagnostics)
    bad = parse_agent_text(
        "---\nname: x\ndescription: d\nmcpServers:\n  - local: {args: [s.py]}\n---\n", path="x.md"
    )
    assert not bad.definitions
    assert any("needs a command" in d.message for d in bad.diagnostics)


def test_validate_names_a_missing_skill_or_server_and_show_lists_them(tmp_path: Path) -> None:
    home, work = tmp_path / "home", tmp_path / "work"
    (work / ".claude" / "agents").mkdir(parents=True)
    home.mkdir()
    write_skill(work / ".claude" / "skills", "style", "Write plainly.")
    (work / ".claude" / "agents" / "writer.md").write_text(
        "---\nname: writer\ndescription: writes\nskills: [style, ghost]\n"
        "mcpServers: [github]\n---\nYou write.\n"
    )
    env = {"HOME": str(home), "NO_COLOR": "1", "PATH": "/usr/bin:/bin"}
    validated = subprocess.run(
        [AGENTCELL, "agents", "validate"], cwd=work, env=env, capture_output=True, text=True
    )
    assert validated.returncode == 0, validated.stderr
    lines = [line for line in validated.stdout.splitlines() if "ghost" in line]
    assert len(lines) == 1 and "warning: skills: skill 'ghost' not found" in lines[0]
    assert "style" not in validated.stdout
    assert "warning: mcpServers: 'github' is not configured here" in validated.stdout
    shown = subprocess.run(
        [AGENTCELL, "agents", "show", "writer", "--json"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
    )
    row = json.loads(shown.stdout)
    assert row["skills"] == ["style (.claude/skills/style/SKILL.md)", "ghost (not found)"]
    assert row["mcp_servers"] == ["github"]


async def test_a_preloaded_skills_disallowed_tools_are_not_offered(
    spawned: SpawnRecorder,
    tmp_path: Path,
    openai_served: ModelServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Claude Code's ``disallowed-tools`` in a SKILL.md: tools taken away while the skill
    is active. A preloaded skill is active for the whole run, so the model is never
    offered them (before: read, and ignored)."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    path = write_skill(tmp_path / ".claude" / "skills", "careful", "Never run commands.")
    path.write_text(
        path.read_text().replace("description:", "disallowed-tools: Bash, Write\ndescription:")
    )
    openai_served.add(Reply(text="done"))
    agent = AgentDefinition(
        name="reader",
        description="reads",
        tools=["bash", "read_file", "write_file", "grep"],
        skills=["careful"],
        model="openai:test",
    )
    result = await delegated(tmp_path, agent, "look")
    assert result.status is RunStatus.COMPLETED, result
    offered = {t["function"]["name"] for t in openai_served.requests[0].body["tools"]}
    assert offered == {"read_file", "grep"}, offered
