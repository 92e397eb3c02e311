"""Skills as Claude Code uses them (issue 22 item 4), from real sub-agent processes under
the default sandbox: each skill says its base directory, its bundled scripts and
references can be read and run from bash (never written), for the user's
``~/.claude/skills/`` and the project's; the ``skill`` tool loads a skill on demand; a
skill folder that is a symlink out of its skills folder is refused."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from agentcell.orchestrator import AgentDefinition, Orchestrator, Settings
from agentcell.protocol import RunStatus
from agentcell.worker import probe_sandbox
from conftest import SpawnRecorder
from model_servers import Call, ModelServer, Reply

CAPS = probe_sandbox()
pytestmark = pytest.mark.skipif(
    not CAPS["landlock_scopes"], reason="needs Landlock ABI 6 (this project's CI has 7)"
)
SEP = "\n=====\n"
BODY_MARKER = "SKILL-BODY-5e1c: count the words with the bundled script"


def _calls(calls: list[tuple[str, dict[str, Any]]]) -> Any:
    def respond(body: dict[str, Any], api: str) -> Reply:
        outputs = [m["content"] for m in body["messages"] if m["role"] == "tool"]
        if len(outputs) < len(calls):
            return Reply(tool_calls=[Call(*calls[len(outputs)])])
        return Reply(text=SEP.join(outputs))

    return respond


def _bash(command: str) -> tuple[str, dict[str, Any]]:
    return ("bash", {"command": command, "timeout_s": 30})


def _skill(root: Path, name: str, description: str = "Counts words in a report") -> Path:
    """A skill as people ship them: SKILL.md, a script and a reference file."""
    folder = root / name
    (folder / "scripts").mkdir(parents=True)
    (folder / "references").mkdir()
    (folder / "SKILL.md").write_text(
        f"---\nname: {name}\ndescription: {description}\n---\n{BODY_MARKER}\n"
        "Run scripts/count.py with the file to count.\n"
    )
    script = folder / "scripts" / "count.py"
    script.write_text(
        f"#!{sys.executable}\nimport sys\nprint('WORDS', len(open(sys.argv[1]).read().split()))\n"
    )
    script.chmod(0o755)
    (folder / "references" / "style.md").write_text("REFERENCE-STYLE-GUIDE\n")
    return folder


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    (home / "secret.txt").write_text("HOME-SECRET\n")
    monkeypatch.setenv("HOME", str(home))
    return home


@pytest.fixture
def served(model_server: ModelServer, monkeypatch: pytest.MonkeyPatch) -> ModelServer:
    monkeypatch.setenv("OPENAI_BASE_URL", model_server.openai_base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-skills-test-key")
    return model_server


async def _delegate(work: Path, agent: AgentDefinition) -> Any:
    orch = Orchestrator(
        settings=Settings(model="openai:test", approval="allow", max_workers=1, warm_spares=0),
        workdir=work,
        agents=[agent],
        load_agent_files=False,
        record=False,
    )
    async with orch:
        result = await asyncio.wait_for(orch.delegate(agent.name, "count"), 120)
    assert result.status is RunStatus.COMPLETED, result
    assert result.sandbox.startswith("workspace, landlock abi"), result.sandbox
    return result


def _system(served: ModelServer) -> str:
    first = served.requests[0].body["messages"][0]
    assert first["role"] == "system"
    return str(first["content"])


def _offered(served: ModelServer) -> set[str]:
    return {t["function"]["name"] for t in served.requests[0].body.get("tools", [])}


@pytest.mark.parametrize("where", ["home", "project"])
async def test_a_preloaded_skills_bundled_files_are_readable_and_runnable_not_writable(
    spawned: SpawnRecorder, tmp_path: Path, home: Path, served: ModelServer, where: str
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "report.txt").write_text("one two three four\n")
    root = home / ".claude" / "skills" if where == "home" else work / ".claude" / "skills"
    folder = _skill(root, "wordcount")
    served.responder = _calls(
        [
            _bash(f"ls {folder}/scripts"),
            _bash(f"{folder}/scripts/count.py report.txt"),
            _bash(f"cat {folder}/references/style.md"),
            _bash(f"touch {folder}/planted; echo x >> {folder}/scripts/count.py; echo done"),
            _bash("cat $HOME/secret.txt"),
        ]
    )
    agent = AgentDefinition(
        name="counter",
        description="counts",
        tools=["bash"],
        skills=["wordcount"],
        model="openai:test",
        source="test",
    )
    result = await _delegate(work, agent)
    assert f"Base directory for this skill: {folder}\n\n{BODY_MARKER}" in _system(served)
    listing, ran, reference, written, secret = result.text.split(SEP)
    assert "count.py" in listing
    assert "WORDS 4" in ran
    assert "REFERENCE-STYLE-GUIDE" in reference
    if where == "home":  # the project's own folder is the workspace: writable by design
        assert written.count("Permission denied") == 2, written
        assert not (folder / "planted").exists()
        assert (folder / "scripts" / "count.py").read_text().count("x\n") == 0
    assert "HOME-SECRET" not in secret and "Permission denied" in secret
    assert result.warnings == []


async def test_the_skill_tool_loads_a_skill_on_demand_and_its_script_runs(
    spawned: SpawnRecorder, tmp_path: Path, home: Path, served: ModelServer
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "report.txt").write_text("a b c\n")
    folder = _skill(home / ".claude" / "skills", "wordcount")
    _skill(home / ".claude" / "skills", "other", description="Something else entirely")
    served.responder = _calls(
        [
            ("skill", {"skill": "wordcount"}),
            _bash(f"{folder}/scripts/count.py report.txt"),
            ("skill", {"skill": "nope"}),
        ]
    )
    agent = AgentDefinition(
        name="counter",
        description="counts",
        tools=["Bash", "Skill"],  # Claude Code's spellings
        model="openai:test",
        source="test",
    )
    result = await _delegate(work, agent)
    system = _system(served)
    # Listed by name and description; the body costs nothing until loaded.
    assert "- wordcount: Counts words in a report" in system
    assert "- other: Something else entirely" in system
    assert BODY_MARKER not in system
    assert {"bash", "skill"} <= _offered(served)
    loaded, ran, unknown = result.text.split(SEP)
    assert f"Base directory for this skill: {folder}" in loaded and BODY_MARKER in loaded
    assert "WORDS 3" in ran
    assert "no skill named 'nope'" in unknown and "wordcount" in unknown


async def test_no_skill_tool_where_the_allowlist_leaves_it_out(
    spawned: SpawnRecorder, tmp_path: Path, home: Path, served: ModelServer
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    folder = _skill(home / ".claude" / "skills", "wordcount")
    served.responder = _calls([_bash(f"cat {folder}/SKILL.md")])
    agent = AgentDefinition(
        name="plain", description="x", tools=["bash"], model="openai:test", source="test"
    )
    result = await _delegate(work, agent)
    assert "skill" not in _offered(served) and "Available skills" not in _system(served)
    # Neither offered nor preloaded: its folder is not opened to this agent.
    assert BODY_MARKER not in result.text and "Permission denied" in result.text


async def test_a_skill_folder_symlinked_out_of_its_root_is_refused(
    spawned: SpawnRecorder, tmp_path: Path, home: Path, served: ModelServer
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    outside = _skill(tmp_path / "elsewhere", "sneaky")
    (outside / "loot.txt").write_text("OUTSIDE-LOOT\n")
    skills = home / ".claude" / "skills"
    skills.mkdir(parents=True)
    os.symlink(outside, skills / "sneaky")
    good = _skill(skills, "wordcount")
    served.responder = _calls(
        [("skill", {"skill": "sneaky"}), _bash(f"cat {outside}/loot.txt {skills}/sneaky/loot.txt")]
    )
    agent = AgentDefinition(name="counter", description="x", model="openai:test", source="test")
    result = await _delegate(work, agent)
    system = _system(served)
    assert "- wordcount:" in system and "sneaky" not in system
    refused, read = result.text.split(SEP)
    assert "no skill named 'sneaky'" in refused
    assert "OUTSIDE-LOOT" not in read and "Permission denied" in read
    assert any("leads out of" in line and "sneaky" in line for line in result.warnings)
    assert good.is_dir()
