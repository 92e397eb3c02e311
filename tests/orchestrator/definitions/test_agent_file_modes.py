"""An agent file's ``permissionMode`` as the runner applies it (issue 44, item 2), which
of the loader's lines ``run`` and ``chat`` say (item 1), and that ``agents list`` names
the tools the runner's own spec offers a child (item 3). In-process: definitions and
settings in, a spec or lines out (the CLI's side: tests/orchestrator/cli/
test_cli_claude_collections.py)."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest
from agentcell.orchestrator import AgentDefinition, Settings
from agentcell.orchestrator.cli._agents_cmd import MAIN_TOOLS, _Here, offered_tools
from agentcell.orchestrator.config._load import user_config_path
from agentcell.orchestrator.config._sandbox_policy import distrust_project_agents
from agentcell.orchestrator.config._trust import trust
from agentcell.orchestrator.definitions._claude_compat import subagent_mode
from agentcell.orchestrator.definitions._registry import AgentRegistry
from agentcell.orchestrator.delegation._prepare import Preparer
from agentcell.orchestrator.delegation._request import DelegationRequest, Scope
from agentcell.orchestrator.delegation._task_args import task_tool_spec
from agentcell.orchestrator.mcp_host._shared import SharedMcp
from agentcell.orchestrator.model_relay._limiter import ProviderLimiter
from places import SHARED

CORPUS = SHARED / "agents-corpus"


@pytest.mark.parametrize(
    ("parent", "wanted", "chosen", "runs_in", "said"),
    [
        ("default", "acceptEdits", False, "accept_edits", ""),  # as in Claude Code
        ("default", "acceptEdits", True, "default", "permission mode was chosen"),
        ("plan", "acceptEdits", False, "plan", "its parent runs in plan mode"),
        ("accept_edits", "acceptEdits", True, "accept_edits", ""),
        ("bypass", "acceptEdits", True, "accept_edits", ""),  # a stricter mode applies
        ("default", "bypassPermissions", False, "default", "never switches approvals off"),
        ("accept_edits", "bypassPermissions", True, "accept_edits", "never switches"),
        ("bypass", "bypassPermissions", True, "bypass", ""),  # the session's, not the file's
        ("default", "plan", True, "plan", ""),
        ("accept_edits", "default", False, "default", ""),
        ("plan", None, False, "plan", ""),
    ],
)
def test_a_files_mode_applies_as_claude_code_applies_it_and_never_bypass(
    parent: str, wanted: str | None, chosen: bool, runs_in: str, said: str
) -> None:
    mode, line = subagent_mode(parent, wanted, session_set=chosen)
    assert mode == runs_in
    assert (said in line) if said else line == ""
    if line:
        assert line.startswith("permissionMode ") and line.endswith(f"runs in {runs_in} mode")


def _spec(tmp_path: Path, settings: Settings, scope_mode: str | None = None) -> tuple[str, list]:
    preparer = Preparer(
        settings=settings,
        registry=AgentRegistry.builtin(),
        workdir=str(tmp_path),
        home=tmp_path / "home",
        limiter=ProviderLimiter(settings.limits),
        model_objects={},
        custom_tools={},
    )
    writer = AgentDefinition(name="writer", permission_mode="acceptEdits", source="/x/writer.md")
    scope = Scope("main", ["read_file", "write_file"], "openai:m", permission_mode=scope_mode)
    prepared = preparer.spec(
        writer, DelegationRequest("writer", "p"), scope, "a1", False, run_dir=""
    )
    return prepared.spec.permission_mode, prepared.warnings


def test_the_spec_a_child_gets_carries_the_mode_and_the_result_says_why_not(
    tmp_path: Path,
) -> None:
    assert _spec(tmp_path, Settings()) == ("accept_edits", [])
    mode, [why] = _spec(tmp_path, Settings(permission_mode="default"))  # chosen, even default
    assert mode == "default" and "was chosen" in why
    mode, [why] = _spec(tmp_path, Settings(), scope_mode="plan")  # a parent in plan mode
    assert mode == "plan" and "plan mode" in why
    assert Settings().mode_chosen is False and Settings(permission_mode="plan").mode_chosen


def test_an_untrusted_projects_accept_edits_is_dropped_with_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    home, project = tmp_path / "home", tmp_path / "repo"
    project.mkdir()
    source = str(project / ".claude" / "agents" / "writer.md")
    planner = AgentDefinition(name="planner", permission_mode="plan", source=source)
    for trusted in (False, True):
        if trusted:
            trust(project, user_config_path(home))
        registry = AgentRegistry()
        registry.add(AgentDefinition(name="writer", permission_mode="acceptEdits", source=source))
        registry.add(planner)
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            distrust_project_agents(registry, project, home)
        writer = registry.get("writer")
        assert writer is not None
        assert writer.permission_mode == ("accept_edits" if trusted else None)
        said = [r.getMessage() for r in caplog.records]
        assert len(said) == (0 if trusted else 1)
        assert all("permission_mode ignored: acceptEdits" in line for line in said)
        assert registry.get("planner") == planner  # a stricter mode only narrows: kept


@pytest.fixture
def copied(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project with a few of the corpus's files in .claude/agents, a README among them,
    an MCP server the user configured, and sonnet run on an OpenAI model."""
    if not (CORPUS / "MANIFEST.tsv").is_file():
        pytest.skip(f"agent corpus not found at {CORPUS} (it is not part of the repository)")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    config = tmp_path / "home" / ".config" / "agentcell" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text(
        '[aliases]\nsonnet = "openai:m"\nopus = "openai:m"\nhaiku = "anthropic:h"\n'
        'fable = "openai:f"\n'
        '[mcp_servers.context7]\ncommand = "true"\n'
    )
    agents = tmp_path / "work" / ".claude" / "agents"
    agents.mkdir(parents=True)
    for name in (
        "README.md",
        "affaan-m__everything-claude-code/agents/docs-lookup.md",
        "affaan-m__everything-claude-code/agents/seo-specialist.md",
        "izzzzzi__izteam/plugins/arena/agents/researcher.md",
        "izzzzzi__izteam/plugins/think/agents/expert.md",
        "wshobson__agents/plugins/agent-teams/agents/team-lead.md",
    ):
        shutil.copyfile(CORPUS / name, agents / Path(name).name)
    return tmp_path / "work"


def test_list_names_exactly_the_tools_the_runners_spec_offers(copied: Path) -> None:
    here = _Here(copied, ())
    registry = here.registry
    preparer = Preparer(
        settings=here.settings.model_copy(update={"max_depth": 2}),
        registry=registry,
        workdir=str(copied),
        home=copied.parent / "home",
        limiter=ProviderLimiter(here.settings.limits),
        model_objects={},
        custom_tools={},
        task_tool_spec=lambda allowed: task_tool_spec(registry, allowed=allowed),
    )
    here.settings = preparer.settings
    scope = Scope("main", MAIN_TOOLS, "openai:main", max_depth=2)
    files = [d for d in registry.definitions() if d.source.startswith(str(copied))]
    assert len(files) == 5
    for definition in files:
        model = here.model(definition)
        request = DelegationRequest(definition.name, "p")
        spec = preparer.spec(definition, request, scope, "a1", False, run_dir="").spec
        given = [*spec.tools, *(t.name for t in spec.remote_tools)]
        given += ["web_search"] if "web_search" in spec.model_options else []
        given += [p for server in spec.mcp_servers for p in server.allow or []]
        # What an agent without tools: inherits of the main agent's shared servers,
        # offered when its run starts (SharedMcp.offer): one pattern per server.
        named = {server.name for server in spec.mcp_servers}
        shared = SharedMcp.for_settings(here.settings, str(copied))
        given += [f"mcp__{server.name}__*" for server in shared.inherits(definition, named)]
        assert offered_tools(definition, here, model) == given, definition.name
    lookup = registry.get("docs-lookup")
    assert lookup is not None and "mcp__context7__query-docs" in offered_tools(
        lookup, here, "openai:m"
    )


def test_run_says_only_the_lines_that_change_what_an_agent_may_do(copied: Path) -> None:
    agents = copied / ".claude" / "agents"
    (agents / "half.md").write_text("---\nname: half\ndescription: no end\n")
    (agents / "dontask.md").write_text(
        "---\nname: d\ndescription: d\npermissionMode: dontAsk\n---\n"
    )
    (agents / "net.md").write_text('---\nname: n\ndescription: d\nnetwork: ["http://x/y"]\n---\n')
    registry = AgentRegistry.load(copied, extra_dirs=[copied / "nowhere"])
    said = {Path(d.path).name: d.message for d in registry.diagnostics if d.at_run}
    assert set(said) == {"half.md", "dontask.md", "net.md", "nowhere"}
    assert said["net.md"].endswith("the agent is refused at its start until it is fixed")
    assert said["dontask.md"].startswith("permissionMode 'dontAsk': agentcell has no mode")
    assert registry.no_frontmatter == [str(agents / "README.md")]
    quiet = [d for d in registry.diagnostics if not d.at_run]
    assert quiet and {d.level for d in quiet} <= {"info", "warning"}
