"""Definition files as people really write them, and the registry's sources and overrides."""

from __future__ import annotations

from pathlib import Path

import pytest
from agentcell.orchestrator.definitions._loader import (
    Diagnostic,
    LoadResult,
    field_for_key,
    load_agent_file,
    load_agents_dir,
    parse_agent_text,
)
from agentcell.orchestrator.definitions._model import AgentDefinition
from agentcell.orchestrator.definitions._registry import AgentRegistry, agent_dirs
from hypothesis import given
from hypothesis import strategies as st

BASIC = "---\nname: {name}\ndescription: {desc}\n---\nYou are {name}.\n"


def write(path: Path, text: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def agent(name: str, desc: str = "does things") -> str:
    return BASIC.format(name=name, desc=desc)


def load_one(tmp_path: Path, text: str | bytes, filename: str = "agent.md") -> AgentDefinition:
    result = load_agent_file(write(tmp_path / filename, text))
    assert [d for d in result.diagnostics if d.level == "error"] == []
    [definition] = result.definitions
    return definition


def skipped(tmp_path: Path, text: str | bytes, filename: str = "bad.md") -> list[Diagnostic]:
    path = write(tmp_path / filename, text)
    result = load_agent_file(path)
    assert result.definitions == []
    assert result.diagnostics
    for diagnostic in result.diagnostics:
        line = str(diagnostic)
        assert line.startswith(f"{path}: ")
        assert "\n" not in line
        assert "Traceback" not in line
        assert line.endswith("(file skipped)")
    return result.diagnostics


def messages(result: LoadResult) -> list[str]:
    return [d.message for d in result.diagnostics]


# -- the file format -------------------------------------------------------------------


def test_basic_file(tmp_path: Path) -> None:
    text = (
        "---\nname: reviewer\ndescription: Reviews code.\ntools: Read, Grep\nmodel: sonnet\n"
        "---\n\n\nYou are a reviewer.\n\nBe brief.\n\n\n"
    )
    d = load_one(tmp_path, text)
    assert d.name == "reviewer"
    assert d.description == "Reviews code."
    assert d.tools == ["read_file", "grep"]
    assert d.model == "sonnet"
    assert d.system_prompt == "You are a reviewer.\n\nBe brief."
    assert d.source == str(tmp_path / "agent.md")


def test_bom_and_crlf(tmp_path: Path) -> None:
    text = "---\r\nname: bom\r\ndescription: x\r\ntools: Read\r\n---\r\nBody line\r\nTwo\r\n"
    d = load_one(tmp_path, b"\xef\xbb\xbf" + text.encode())
    assert (d.name, d.tools, d.system_prompt) == ("bom", ["read_file"], "Body line\nTwo")


def test_blank_lines_before_and_indented_delimiters(tmp_path: Path) -> None:
    text = "\n\n   \n  ---   \n  name: indented\n  description: x\n  ---\nBody\n"
    d = load_one(tmp_path, text)
    assert (d.name, d.description, d.system_prompt) == ("indented", "x", "Body")


def test_trailing_spaces_after_delimiters(tmp_path: Path) -> None:
    d = load_one(tmp_path, "--- \nname: t\ndescription: x\n---\t \nBody\n")
    assert (d.name, d.system_prompt) == ("t", "Body")


def test_indented_dashes_inside_a_block_scalar_do_not_close(tmp_path: Path) -> None:
    text = "---\nname: t\ndescription: |\n  before\n  ---\n  after\n---\nBody\n"
    d = load_one(tmp_path, text)
    assert d.description == "before\n---\nafter\n"
    assert d.system_prompt == "Body"


def test_body_horizontal_rules_stay_in_the_body(tmp_path: Path) -> None:
    d = load_one(tmp_path, "---\nname: t\ndescription: x\n---\nA\n\n---\n\nB\n")
    assert d.system_prompt == "A\n\n---\n\nB"


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("tools: Read, Grep, Glob", ["read_file", "grep", "glob"]),
        ('tools: ["Read", "Grep", "Read"]', ["read_file", "grep"]),
        ("tools:\n  - Read\n  - Bash", ["read_file", "bash"]),
        ("tools:\n- Read\n- Bash", ["read_file", "bash"]),
        ("tools: []", []),
        ('tools: ""', []),
        ("tools:", None),
        ('tools: "*"', None),
        ("tools: all", None),
        ("tools: Read, MultiEdit, Edit, LS, Glob", ["read_file", "edit_file", "glob"]),
    ],
)
def test_tools_formats(tmp_path: Path, line: str, expected: list[str] | None) -> None:
    d = load_one(tmp_path, f"---\nname: t\ndescription: x\n{line}\n---\nBody\n")
    assert d.tools == expected


def test_bare_star_loads_through_the_fallback(tmp_path: Path) -> None:
    # An unquoted * starts a YAML alias, so strict YAML rejects it; it still means "all".
    path = write(tmp_path / "star.md", "---\nname: t\ndescription: x\ntools: *\n---\nBody\n")
    result = load_agent_file(path)
    [d] = result.definitions
    assert d.tools is None
    [note] = [x for x in result.diagnostics if "tolerant parser" in x.message]
    assert note.level == "info"


def test_disallowed_tools_spellings(tmp_path: Path) -> None:
    for key in ("disallowedTools", "disallowed_tools", "disallowed-tools"):
        text = f"---\nname: t\ndescription: x\n{key}: Write, Edit\n---\n"
        d = load_one(tmp_path, text, f"{key}.md")
        assert d.disallowed_tools == ["write_file", "edit_file"]
        assert d.tools is None


@pytest.mark.parametrize(
    ("key", "field"),
    [
        ("maxTurns", "max_turns"),
        ("max_turns", "max_turns"),
        ("max-turns", "max_turns"),
        ("permissionMode", "permission_mode"),
        ("timeoutS", "timeout_s"),
        ("maxDepth", "max_depth"),
        ("memoryLimitMb", "memory_limit_mb"),
        ("memoryLimitMB", "memory_limit_mb"),
        ("cpuLimitS", "cpu_limit_s"),
        ("maxToolCalls", "max_tool_calls"),
        ("maxToolOutputBytes", "max_tool_output_bytes"),
        ("Name", "name"),
        ("color", "color"),
        ("initialPrompt", "initial_prompt"),
        ("systemPrompt", None),  # the body is the prompt
        ("source", None),
    ],
)
def test_key_spellings(key: str, field: str | None) -> None:
    assert field_for_key(key) == field


def test_camel_case_fields(tmp_path: Path) -> None:
    text = (
        "---\nname: t\ndescription: x\nmaxTurns: 12\npermissionMode: acceptEdits\n"
        "timeoutS: 30\nmaxDepth: 0\nbackground: true\ncontext: fork\nisolation: worktree\n"
        "memoryLimitMb: 512\ncpuLimitS: 60\nmaxToolCalls: 40\nmaxToolOutputBytes: 10000\n---\n"
    )
    d = load_one(tmp_path, text)
    assert (d.max_turns, d.permission_mode, d.timeout_s, d.max_depth) == (
        12,
        "accept_edits",
        30.0,
        0,
    )
    assert (d.background, d.context, d.isolation) == (True, "fork", "worktree")
    assert (d.memory_limit_mb, d.cpu_limit_s, d.max_tool_calls, d.max_tool_output_bytes) == (
        512,
        60,
        40,
        10000,
    )


def test_both_spellings_given_is_reported(tmp_path: Path) -> None:
    path = write(
        tmp_path / "a.md", "---\nname: t\ndescription: x\nmaxTurns: 3\nmax_turns: 5\n---\n"
    )
    result = load_agent_file(path)
    assert result.definitions[0].max_turns == 5
    assert any("both 'maxTurns' and 'max_turns'" in m for m in messages(result))


def test_name_falls_back_to_the_file_name(tmp_path: Path) -> None:
    d = load_one(tmp_path, "---\ndescription: x\n---\nBody\n", "db-helper.md")
    assert d.name == "db-helper"
    d = load_one(tmp_path, "---\nname:\ndescription: x\n---\n", "other.md")
    assert d.name == "other"


def test_file_name_that_is_not_a_valid_name_loads_under_its_slug(tmp_path: Path) -> None:
    path = write(tmp_path / "My Agent.md", "---\ndescription: x\n---\n")
    result = load_agent_file(path)
    [d] = result.definitions
    assert d.name == "my-agent"
    [warning] = [x for x in result.diagnostics if x.level == "warning"]
    assert warning.message.startswith("name (from the file name) 'My Agent' is not an agent")


def test_escaped_newlines_in_description(tmp_path: Path) -> None:
    text = "---\nname: t\ndescription: First line.\\nExamples:\\n- one\n---\n"
    d = load_one(tmp_path, text)
    assert d.description == "First line.\nExamples:\n- one"


def test_unquoted_colon_value_loads_via_fallback(tmp_path: Path) -> None:
    text = (
        "---\nname: growth\n"
        "description: Use when X. Triggers on: 'growth loop', 'flywheel'.\n"
        "tools: Read, WebFetch\nmodel: haiku\n---\nBody\n"
    )
    path = write(tmp_path / "growth.md", text)
    result = load_agent_file(path)
    [d] = result.definitions
    assert d.description == "Use when X. Triggers on: 'growth loop', 'flywheel'."
    assert (d.name, d.tools, d.model) == ("growth", ["read_file", "web_fetch"], "haiku")
    [note] = [x for x in result.diagnostics if "tolerant parser" in x.message]
    assert note.level == "info"
    assert "line 3" in note.message  # the file's line, not the frontmatter's
    assert not [x for x in result.diagnostics if x.level == "error"]


def test_fallback_keeps_block_scalars_lists_and_continuations(tmp_path: Path) -> None:
    text = (
        "---\n"
        "name: mixed\n"
        "# a comment\n"
        "description: Use it: when needed\n"
        "  and also here: too\n"
        "notes: |\n"
        "  line one: a\n"
        "  line two\n"
        "summary: >-\n"
        "  folded\n"
        "  text\n"
        "tools:\n"
        "\t- Read\n"
        "\t- Grep\n"
        "---\n"
    )
    d = load_one(tmp_path, text)
    assert d.description == "Use it: when needed and also here: too"
    assert d.extra == {"notes": "line one: a\nline two\n", "summary": "folded text"}
    assert d.tools == ["read_file", "grep"]


def test_broken_flow_list_still_denies(tmp_path: Path) -> None:
    # Strict YAML rejects the unclosed list; the denial must not be lost with it.
    text = "---\nname: t\ndescription: x\ndisallowedTools: [Bash, 'Write'\n---\n"
    d = load_one(tmp_path, text)
    assert d.disallowed_tools == ["bash", "write_file"]


def test_unknown_keys_kept_in_extra(tmp_path: Path) -> None:
    text = "---\nname: t\ndescription: x\ncolor: green\nlevel: 3\nmemory: project\n---\n"
    d = load_one(tmp_path, text)
    assert d.extra == {"level": 3}
    assert (d.color, d.memory) == ("green", "project")


def test_claude_code_keys_are_fields_not_warnings(tmp_path: Path) -> None:
    text = (
        "---\nname: t\ndescription: x\nmemory: Local\neffort: high\ninitialPrompt: Start here\n"
        "hooks:\n  PreToolUse:\n    - matcher: Bash\n      hooks:\n"
        "        - type: command\n          command: ./guard.sh\n          timeout: 5\n---\n"
    )
    result = load_agent_file(write(tmp_path / "t.md", text))
    [d] = result.definitions
    assert result.diagnostics == []
    assert (d.memory, d.effort, d.initial_prompt) == ("local", "high", "Start here")
    assert d.hooks["PreToolUse"][0]["hooks"][0]["command"] == "./guard.sh"
    assert d.extra == {}


def test_a_hook_of_the_wrong_shape_is_one_clear_error(tmp_path: Path) -> None:
    text = "---\nname: t\ndescription: x\nhooks:\n  pre: [a, b]\n---\n"
    result = load_agent_file(write(tmp_path / "t.md", text))
    assert result.definitions == []
    [error] = result.diagnostics
    assert error.level == "error"
    assert "unknown hook event 'pre': use one of PreToolUse" in error.message


def test_unknown_tools_reported_not_granted(tmp_path: Path) -> None:
    text = (
        "---\nname: t\ndescription: x\ntools: Read, KillShell, mcp__ctx__docs\n"
        "disallowedTools: NotebookEdit, Bash\n---\n"
    )
    result = load_agent_file(write(tmp_path / "t.md", text))
    [d] = result.definitions
    assert d.unknown_tools == ["KillShell", "NotebookEdit"]
    warnings = [x for x in result.diagnostics if x.level == "warning"]
    assert len(warnings) == 1
    # An MCP tool is not unknown: the configured server of its name is started for it.
    assert any(
        x.level == "info" and "tools mcp__ctx__docs: mcpServers does not name" in x.message
        for x in result.diagnostics
    )
    assert "unknown tools KillShell:" in warnings[0].message
    assert any(x.level == "info" and "NotebookEdit" in x.message for x in result.diagnostics)


def test_unknown_model_is_a_warning(tmp_path: Path) -> None:
    result = load_agent_file(write(tmp_path / "m.md", agent("m")))
    assert not result.diagnostics
    text = "---\nname: m\ndescription: x\nmodel: parable\n---\n"
    result = load_agent_file(write(tmp_path / "m.md", text))
    assert result.definitions[0].model == "parable"
    [warning] = result.diagnostics
    assert warning.level == "warning"
    assert "model 'parable'" in warning.message


def test_missing_description_is_a_warning(tmp_path: Path) -> None:
    result = load_agent_file(write(tmp_path / "n.md", "---\nname: n\n---\nBody\n"))
    assert result.definitions[0].description == ""
    [warning] = result.diagnostics
    assert warning.level == "warning"
    assert "no description" in warning.message


# -- files that are skipped --------------------------------------------------------------


@pytest.mark.parametrize(
    ("filename", "text"),
    [
        ("notes.md", "# Notes\n\nJust some notes.\n"),
        ("README.md", "# Our agents\n\nSee below.\n"),
        ("empty.md", ""),
        ("blank.md", "\n  \n"),
    ],
)
def test_a_file_without_frontmatter_is_no_agent_file_and_skipped_without_a_word(
    tmp_path: Path, filename: str, text: str
) -> None:
    # Claude Code skips them: a README in a copied collection is no problem to report.
    path = write(tmp_path / filename, text)
    result = load_agent_file(path)
    assert (result.definitions, result.diagnostics) == ([], [])
    assert result.no_frontmatter == [str(path)]


def test_no_closing_delimiter(tmp_path: Path) -> None:
    [d] = skipped(tmp_path, "---\nname: t\ndescription: x\n\nBody without end\n")
    assert d.level == "error"
    assert d.at_run  # an agent file left out: run and chat say so too
    assert "no closing '---'" in d.message
    assert "line 1" in d.message


def test_frontmatter_that_is_a_list(tmp_path: Path) -> None:
    [d] = skipped(tmp_path, "---\n- name\n- description\n---\nBody\n")
    assert "frontmatter is a list, not a mapping" in d.message


def test_frontmatter_that_is_a_string(tmp_path: Path) -> None:
    [d] = skipped(tmp_path, "---\njust words\n---\nBody\n")
    assert "frontmatter is a str, not a mapping" in d.message


def test_docs_page_with_frontmatter(tmp_path: Path) -> None:
    [d] = skipped(tmp_path, "---\ntitle: Agents\nlayout: page\n---\n# Agents\n", "index.md")
    assert d.level == "warning"
    assert "neither name nor description" in d.message


def test_frontmatter_nobody_can_read(tmp_path: Path) -> None:
    [d] = skipped(tmp_path, "---\n  [unclosed\n---\n")
    assert "not valid YAML" in d.message


def test_invalid_max_turns(tmp_path: Path) -> None:
    [d] = skipped(tmp_path, "---\nname: t\ndescription: x\nmaxTurns: ten\n---\n")
    assert d.level == "error"
    assert d.message == "maxTurns must be a whole number ≥ 1, got 'ten' (file skipped)"


def test_invalid_permission_mode(tmp_path: Path) -> None:
    [d] = skipped(tmp_path, "---\nname: t\ndescription: x\npermissionMode: yolo\n---\n")
    assert d.message.startswith("permissionMode must be one of default, accept_edits")
    assert "got 'yolo'" in d.message


def test_one_diagnostic_per_problem(tmp_path: Path) -> None:
    text = "---\nname: t\ndescription: x\nmax_turns: 0\ncontext: both\ntools: 7\n---\n"
    lines = [d.message for d in skipped(tmp_path, text)]
    assert len(lines) == 3
    assert lines[0].startswith("tools must be")
    assert lines[1].startswith("max_turns must be")
    assert lines[2].startswith("context must be")


def test_invalid_utf8(tmp_path: Path) -> None:
    [d] = skipped(tmp_path, b"---\nname: t\ndescription: caf\xe9\n---\n")
    assert "not valid UTF-8 (byte 0xe9" in d.message


def test_unreadable_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write(tmp_path / "secret.md", agent("secret"))
    write(tmp_path / "fine.md", agent("fine"))
    from agentcell.orchestrator.definitions import _loader

    real_read = _loader._read_regular

    def read_regular(path: Path) -> bytes:
        if path.name == "secret.md":
            raise PermissionError(13, "Permission denied", str(path))
        return real_read(path)

    # chmod does not stop root (CI containers), so refuse the read itself.
    monkeypatch.setattr(_loader, "_read_regular", read_regular)
    result = load_agents_dir(tmp_path)
    assert [d.name for d in result.definitions] == ["fine"]
    [d] = result.diagnostics
    assert str(d) == (
        f"{path}: cannot read the file (Permission denied): check that it is a readable file "
        "(file skipped)"
    )


def test_a_directory_named_like_a_file(tmp_path: Path) -> None:
    (tmp_path / "odd.md").mkdir()
    result = load_agent_file(tmp_path / "odd.md")
    [d] = result.diagnostics
    assert d.message.startswith("cannot read the file")


FRAGMENTS = [
    "---",
    "  ---",
    "",
    "name: x",
    "name: [a",
    "description: a: b",
    "description: |",
    "  text: more",
    "tools: *",
    "tools:",
    "- Read",
    "\t- Bash",
    "maxTurns: ten",
    "permissionMode: plan",
    "model: gpt-4o",
    "# comment",
    "key: 'open",
    "{a: 1}",
    "Body text",
]


@given(st.lists(st.sampled_from(FRAGMENTS) | st.text(max_size=20), max_size=12))
def test_parsing_never_raises(lines: list[str]) -> None:
    result = parse_agent_text("\n".join(lines), path="x.md")
    assert len(result.definitions) + len(result.diagnostics) + len(result.no_frontmatter) >= 1
    assert len(result.definitions) <= 1
    for d in result.diagnostics:
        assert "\n" not in str(d)


# -- directories ---------------------------------------------------------------------------


def test_directory_is_recursive_sorted_and_keeps_going(tmp_path: Path) -> None:
    write(tmp_path / "b.md", agent("bee"))
    write(tmp_path / "a.md", agent("ay"))
    write(tmp_path / "sub" / "deep" / "c.md", agent("sea"))
    write(tmp_path / "broken.md", "---\nname: x\n")
    write(tmp_path / "README.md", "# readme\n")
    write(tmp_path / "notes.txt", "not markdown")
    result = load_agents_dir(tmp_path)
    assert [d.name for d in result.definitions] == ["ay", "bee", "sea"]
    assert [Path(d.path).name for d in result.diagnostics] == ["broken.md"]
    assert result.no_frontmatter == [str(tmp_path / "README.md")]


def test_missing_directory_is_silent(tmp_path: Path) -> None:
    result = load_agents_dir(tmp_path / "nope")
    assert (result.definitions, result.diagnostics) == ([], [])


def test_directory_results_are_deterministic(tmp_path: Path) -> None:
    for i in range(20):
        write(tmp_path / f"g{i % 3}" / f"{19 - i}.md", agent(f"a{i}"))
    first = load_agents_dir(tmp_path)
    second = load_agents_dir(tmp_path)
    assert [d.source for d in first.definitions] == [d.source for d in second.definitions]
    rel = [Path(d.source).relative_to(tmp_path).as_posix() for d in first.definitions]
    assert rel == sorted(rel)


# -- the registry ----------------------------------------------------------------------------


def test_builtins() -> None:
    registry = AgentRegistry.builtin()
    assert registry.names() == ["general-purpose", "Explore", "Plan"]
    gp = registry.get("general-purpose")
    assert gp is not None
    assert gp.tools is None
    assert "final message" in gp.system_prompt
    for name in ("Explore", "Plan"):
        d = registry.get(name)
        assert d is not None
        assert d.tools == ["read_file", "glob", "grep"]
        assert d.source == "builtin"
    assert registry.diagnostics == []


def test_get_falls_back_to_case_insensitive() -> None:
    registry = AgentRegistry.builtin()
    assert registry.get("explore") is registry.get("Explore")
    assert registry.get("PLAN") is registry.get("Plan")
    assert registry.get("nobody") is None
    assert "explore" in registry


def test_exact_name_beats_case_insensitive(tmp_path: Path) -> None:
    registry = AgentRegistry.builtin()
    mine = AgentDefinition(name="explore", description="mine")
    registry.add(mine)
    assert registry.get("explore") is mine
    builtin = registry.get("Explore")
    assert builtin is not None
    assert builtin.source == "builtin"
    assert registry.get("EXPLORE") is None  # ambiguous
    [twins] = registry.diagnostics
    assert twins.level == "warning"
    assert "'explore' from programmatic and 'Explore' from builtin differ only in" in twins.message


SOURCES = [
    "home/.claude/agents",
    "home/.agentcell/agents",
    "proj/.claude/agents",
    "proj/.harness9/agents",
    "proj/.agentcell/agents",
    "extra1",
    "extra2",
]


def test_agent_dirs_order(tmp_path: Path) -> None:
    dirs = agent_dirs(
        tmp_path / "proj",
        home=tmp_path / "home",
        extra_dirs=[tmp_path / "extra1", tmp_path / "extra2"],
    )
    assert dirs == [tmp_path / s for s in SOURCES]


def test_precedence_of_every_source(tmp_path: Path) -> None:
    # Source i defines `shared` (overridden by each later one) and `only-i` (kept).
    for i, folder in enumerate(SOURCES):
        write(tmp_path / folder / "shared.md", agent("shared", f"from {i}"))
        write(tmp_path / folder / f"only{i}.md", agent(f"only-{i}", f"from {i}"))
    registry = AgentRegistry.load(
        tmp_path / "proj",
        home=tmp_path / "home",
        extra_dirs=[tmp_path / "extra1", tmp_path / "extra2"],
    )
    shared = registry.get("shared")
    assert shared is not None
    assert shared.description == "from 6"
    assert shared.source == str(tmp_path / "extra2" / "shared.md")
    for i in range(len(SOURCES)):
        assert registry.get(f"only-{i}") is not None
    overrides = [d for d in registry.diagnostics if "overrides" in d.message]
    assert [str(d) for d in overrides] == [
        f"{tmp_path / SOURCES[i]}/shared.md: agent 'shared' from "
        f"{tmp_path / SOURCES[i]}/shared.md overrides the one from "
        f"{tmp_path / SOURCES[i - 1]}/shared.md"
        for i in range(1, len(SOURCES))
    ]
    assert all(d.level == "info" for d in overrides)
    assert registry.names()[:3] == ["general-purpose", "Explore", "Plan"]
    assert registry.names()[3:] == sorted(registry.names()[3:])


def test_file_overrides_a_builtin(tmp_path: Path) -> None:
    write(tmp_path / "proj/.claude/agents/plan.md", agent("Plan", "my planner"))
    registry = AgentRegistry.load(tmp_path / "proj", home=tmp_path / "home")
    plan = registry.get("Plan")
    assert plan is not None
    assert plan.description == "my planner"
    assert registry.names() == ["general-purpose", "Explore", "Plan"]  # keeps its place
    [d] = registry.diagnostics
    assert "agent 'Plan' from" in d.message
    assert d.message.endswith("overrides the one from builtin")


def test_same_name_twice_in_one_folder(tmp_path: Path) -> None:
    folder = tmp_path / "proj/.claude/agents"
    write(folder / "z" / "expert.md", agent("expert", "z"))
    write(folder / "a" / "expert.md", agent("expert", "a"))
    registry = AgentRegistry.load(tmp_path / "proj", home=tmp_path / "home")
    winner = registry.get("expert")
    assert winner is not None
    assert winner.description == "z"  # the later path in sorted order
    [d] = registry.diagnostics
    assert d.level == "warning"
    assert "same folder" in d.message
    assert d.path == str(folder / "z" / "expert.md")


def test_missing_dirs_are_silent(tmp_path: Path) -> None:
    registry = AgentRegistry.load(tmp_path / "proj", home=tmp_path / "home")
    assert registry.diagnostics == []
    assert registry.names() == ["general-purpose", "Explore", "Plan"]


def test_project_in_home_reads_each_folder_once(tmp_path: Path) -> None:
    write(tmp_path / ".claude/agents/mine.md", agent("mine"))
    registry = AgentRegistry.load(tmp_path, home=tmp_path, extra_dirs=[tmp_path / ".claude/agents"])
    assert registry.get("mine") is not None
    assert registry.diagnostics == []


def test_missing_agents_dir_flag_is_reported(tmp_path: Path) -> None:
    registry = AgentRegistry.load(
        tmp_path / "proj", home=tmp_path / "home", extra_dirs=[tmp_path / "typo"]
    )
    [d] = registry.diagnostics
    assert d.path == str(tmp_path / "typo")
    assert "--agents-dir" in d.message


def test_bad_files_do_not_stop_the_registry(tmp_path: Path) -> None:
    folder = tmp_path / "proj/.agentcell/agents"
    write(folder / "good.md", agent("good"))
    write(folder / "bad.md", "---\nname: bad\nmaxTurns: many\n---\n")
    write(folder / "README.md", "# about\n")
    registry = AgentRegistry.load(tmp_path / "proj", home=tmp_path / "home")
    assert registry.get("good") is not None
    assert registry.get("bad") is None
    assert {Path(d.path).name for d in registry.diagnostics} == {"bad.md"}
    assert [Path(p).name for p in registry.no_frontmatter] == ["README.md"]


def test_programmatic_add_overrides_and_is_reported() -> None:
    registry = AgentRegistry.builtin()
    mine = AgentDefinition(name="general-purpose", description="custom")
    registry.add(mine)
    assert registry.get("general-purpose") is mine
    [d] = registry.diagnostics
    assert str(d) == (
        "programmatic: agent 'general-purpose' from programmatic overrides the one from builtin"
    )
    registry.add(AgentDefinition(name="zed"))
    registry.add(AgentDefinition(name="alpha"))
    assert registry.names() == ["general-purpose", "Explore", "Plan", "alpha", "zed"]
    assert len(registry) == 5


# -- as Claude Code reads them ---------------------------------------------------------------


@pytest.mark.parametrize("closing", ["----", "-----", "------  ", "----------------"])
def test_frontmatter_closed_by_more_than_three_dashes(tmp_path: Path, closing: str) -> None:
    d = load_one(tmp_path, f"---\nname: t\ndescription: x\n{closing}\nBody\n\n----\nMore\n")
    assert (d.name, d.description) == ("t", "x")
    assert d.system_prompt == "Body\n\n----\nMore"  # only the first such line closes it


def test_two_dashes_do_not_close(tmp_path: Path) -> None:
    [diagnostic] = skipped(tmp_path, "---\nname: t\ndescription: x\n--\nBody\n")
    assert "no closing '---'" in diagnostic.message


def test_name_with_spaces_capitals_and_slashes_loads_under_its_slug(tmp_path: Path) -> None:
    path = write(
        tmp_path / "devops.md",
        "---\nname: Python DevOps/CI-CD Expert\ndescription: Ships things\n---\nBody\n",
    )
    result = load_agent_file(path)
    [d] = result.definitions
    assert d.name == "python-devops-ci-cd-expert"
    [warning] = result.diagnostics  # exactly one line about it
    assert warning.level == "warning"
    assert "'Python DevOps/CI-CD Expert' is not an agent name" in warning.message
    assert "loaded as 'python-devops-ci-cd-expert'" in warning.message


def test_a_name_that_is_fine_is_kept_as_written(tmp_path: Path) -> None:
    path = write(tmp_path / "e.md", "---\nname: Explore_2.0\ndescription: x\n---\n")
    result = load_agent_file(path)
    assert [d.name for d in result.definitions] == ["Explore_2.0"]
    assert result.diagnostics == []


def test_the_registry_finds_an_agent_by_either_spelling(tmp_path: Path) -> None:
    folder = tmp_path / "agents"
    write(folder / "devops.md", agent("Python DevOps/CI-CD Expert"))
    registry = AgentRegistry.load(tmp_path / "p", home=tmp_path / "h", extra_dirs=[folder])
    found = registry.get("python-devops-ci-cd-expert")
    assert found is not None and found.source.endswith("devops.md")
    for spelling in (
        "Python DevOps/CI-CD Expert",
        "python devops ci cd expert",
        "PYTHON_DEVOPS-CI/CD-EXPERT",
    ):
        assert registry.get(spelling) is found, spelling
    assert registry.get("python-devops") is None
    assert "python-devops-ci-cd-expert" in registry.names()


def test_two_spellings_of_one_name_are_one_agent(tmp_path: Path) -> None:
    folder = tmp_path / "agents"
    write(folder / "a.md", agent("Code Reviewer", "first"))
    write(folder / "b.md", agent("code-reviewer", "second"))
    registry = AgentRegistry.load(tmp_path / "p", home=tmp_path / "h", extra_dirs=[folder])
    assert [d.description for d in registry.definitions() if d.name == "code-reviewer"] == [
        "second"
    ]
    [override] = [d for d in registry.diagnostics if "overrides" in d.message]
    assert override.level == "warning" and "a.md" in override.message


def test_tolerant_parser_keeps_paragraphs_and_prose_lines(tmp_path: Path) -> None:
    text = (
        "---\n"
        "name: reviewer\n"
        "description: Reviews code: carefully.\n"
        "  Second line of the first paragraph.\n"
        "\n"
        "  A second paragraph.\n"
        "Examples:\n"
        "  - user: 'check my diff'\n"
        "Note: it is slow\n"
        "tools: Read, Grep\n"
        "color: blue\n"
        "---\n"
        "Body\n"
    )
    result = load_agent_file(write(tmp_path / "r.md", text))
    [d] = result.definitions
    assert any("tolerant parser" in m for m in messages(result))
    assert d.description == (
        "Reviews code: carefully. Second line of the first paragraph.\n\n"
        "A second paragraph. Examples: - user: 'check my diff' Note: it is slow"
    )
    assert d.tools == ["read_file", "grep"]
    assert d.color == "blue" and d.extra == {}  # lower-case keys still start entries


def test_task_entry_with_agent_types_is_one_entry(tmp_path: Path) -> None:
    for line in (
        "tools: Read, Task(code-reviewer, Test Runner), Grep",
        "tools: [Read, 'Agent(code-reviewer, Test Runner)', Grep]",
        "tools:\n  - Read\n  - Agent(code-reviewer, Test Runner)\n  - Grep",
    ):
        result = load_agent_file(
            write(tmp_path / "t.md", f"---\nname: t\ndescription: x\n{line}\n---\n")
        )
        [d] = result.definitions
        assert d.tools == ["read_file", "task", "grep"], line
        assert d.task_agents == ["code-reviewer", "Test Runner"], line
        assert d.unknown_tools == [], line
        assert not [x for x in result.diagnostics if x.level != "info"], line


def test_task_entry_in_disallowed_tools_denies_only_those_types(tmp_path: Path) -> None:
    text = "---\nname: t\ndescription: x\ndisallowedTools: Bash, Agent(Plan)\n---\n"
    d = load_one(tmp_path, text)
    assert d.disallowed_tools == ["bash"]  # task itself stays allowed
    assert d.denied_task_agents == ["Plan"]
    assert d.may_start("Explore") and not d.may_start("plan")


def test_entries_and_models_that_can_never_run_are_named_at_load(tmp_path: Path) -> None:
    # `agents validate` used to pass these; the run then refused the agent at its start.
    text = (
        "---\nname: fetcher\ndescription: d\nmodel: foo:bar\n"
        'network: ["http://bad/url", "github.com:99999", "pypi.org"]\n---\nBody.\n'
    )
    result = load_agent_file(write(tmp_path / "fetcher.md", text))
    [definition] = result.definitions  # loaded, as given
    assert definition.model == "foo:bar"
    found = [(d.level, d.message) for d in result.diagnostics]
    assert (
        "warning",
        "model 'foo:bar' names no provider agentcell has (openai, anthropic, scripted); it is "
        "kept as given and must be configured as a model alias to run",
    ) in found
    assert (
        "warning",
        "network: entry 'http://bad/url' is a URL or a path: write its host, or host:port "
        "(github.com, github.com:443): the agent is refused at its start until it is fixed",
    ) in found
    assert len(found) == 2  # the first bad entry is the one named, as at the start
    fine = load_agent_file(
        write(tmp_path / "ok.md", text.replace("foo:bar", "openai:x").split("network")[0] + "---\n")
    )
    assert [d for d in fine.diagnostics if d.level != "info"] == []
