"""AgentDefinition validation, model strings, and Claude Code tool-name mapping."""

from __future__ import annotations

from typing import Any

import pytest
from agentcell.orchestrator.definitions._model import (
    AgentDefinition,
    model_problem,
    normalize_model,
    resolve_model_alias,
    validation_messages,
)
from agentcell.orchestrator.definitions._tool_policy import map_tool_name, normalize_tool_names
from pydantic import ValidationError


def make(**fields: Any) -> AgentDefinition:
    # model_validate takes loose values (strings for numbers, ...) as a frontmatter would.
    fields.setdefault("name", "a")
    return AgentDefinition.model_validate(fields)


def messages(**fields: Any) -> list[str]:
    with pytest.raises(ValidationError) as info:
        make(**fields)
    return validation_messages(info.value)


# -- validation ------------------------------------------------------------------------


def test_defaults() -> None:
    d = make()
    assert d.tools is None
    assert d.disallowed_tools == []
    assert d.model == "inherit"
    assert (d.context, d.isolation, d.background) == ("fresh", "none", False)
    assert d.extra == {}
    assert d.source == "programmatic"
    assert d.unknown_tools == []


def test_frozen() -> None:
    d = make()
    with pytest.raises(ValidationError):
        setattr(d, "name", "b")  # noqa: B010 - the assignment is what is under test


@pytest.mark.parametrize(
    ("value", "expected"),
    [(10, 10), ("10", 10), (3.0, 3), (" 7 ", 7)],
)
def test_max_turns_accepts_whole_numbers(value: object, expected: int) -> None:
    assert make(max_turns=value).max_turns == expected


def test_max_turns_message_names_field_and_fix() -> None:
    assert messages(max_turns="ten") == ["max_turns must be a whole number ≥ 1, got 'ten'"]
    assert messages(max_turns=0) == ["max_turns must be a whole number ≥ 1, got 0"]
    assert messages(max_turns=True) == ["max_turns must be a whole number ≥ 1, got True"]
    assert messages(max_turns=2.5) == ["max_turns must be a whole number ≥ 1, got 2.5"]


def test_one_line_per_problem() -> None:
    lines = messages(max_turns="x", timeout_s=-1, context="shared", isolation="docker")
    assert lines == [
        "max_turns must be a whole number ≥ 1, got 'x'",
        "timeout_s must be a number of seconds > 0, got -1",
        "context must be 'fresh' or 'fork', got 'shared'",
        "isolation must be 'none' or 'worktree', got 'docker'",
    ]
    assert all("\n" not in line and "Traceback" not in line for line in lines)


def test_key_spelling_in_messages() -> None:
    with pytest.raises(ValidationError) as info:
        make(max_turns="ten")
    assert validation_messages(info.value, keys={"max_turns": "maxTurns"}) == [
        "maxTurns must be a whole number ≥ 1, got 'ten'"
    ]


def test_unknown_field_in_code_is_an_error() -> None:
    assert messages(colour="red") == ["colour is not a field of an agent definition: remove it"]


@pytest.mark.parametrize(
    "field", ["memory_limit_mb", "cpu_limit_s", "max_tool_calls", "max_tool_output_bytes"]
)
def test_positive_limits(field: str) -> None:
    assert getattr(make(**{field: 5}), field) == 5
    assert messages(**{field: 0}) == [f"{field} must be a whole number ≥ 1, got 0"]


def test_max_depth_may_be_zero() -> None:
    assert make(max_depth=0).max_depth == 0
    assert messages(max_depth=-1) == ["max_depth must be a whole number ≥ 0, got -1"]


def test_timeout() -> None:
    assert make(timeout_s=90).timeout_s == 90.0
    assert make(timeout_s="2.5").timeout_s == 2.5
    assert make(timeout_s="30s").timeout_s == 30.0
    assert messages(timeout_s="soon") == ["timeout_s must be a number of seconds > 0, got 'soon'"]
    assert messages(timeout_s=float("inf"))[0].startswith("timeout_s must be")


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("acceptEdits", "accept_edits"),
        ("bypassPermissions", "bypass"),
        ("plan", "plan"),
        ("default", "default"),
        ("accept_edits", "accept_edits"),
        (None, None),
    ],
)
def test_permission_mode_normalised(value: str | None, expected: str | None) -> None:
    assert make(permission_mode=value).permission_mode == expected


def test_permission_mode_message() -> None:
    [line] = messages(permission_mode="yolo")
    assert line.startswith("permission_mode must be one of default, accept_edits, bypass, plan")
    assert line.endswith("got 'yolo'")


def test_background_flag() -> None:
    assert make(background=True).background is True
    assert make(background="yes").background is True
    assert make(background="False").background is False
    assert messages(background="maybe") == ["background must be true or false, got 'maybe'"]


def test_choices_case_insensitive() -> None:
    d = make(context="Fork", isolation="WorkTree")
    assert (d.context, d.isolation) == ("fork", "worktree")


# -- names -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name", ["code-reviewer", "Explore", "general-purpose", "powershell-5.1-expert", "c4_code", "7"]
)
def test_good_names(name: str) -> None:
    assert make(name=name).name == name


def test_int_name_is_text() -> None:
    assert make(name=404).name == "404"


def test_name_with_space_suggests_a_fix() -> None:
    [line] = messages(name="Code Reviewer")
    assert "got 'Code Reviewer'" in line
    assert line.endswith("try 'code-reviewer'")


@pytest.mark.parametrize("name", ["", "  ", "-lead", "a/b", "x" * 65, None, ["a"]])
def test_bad_names(name: object) -> None:
    [line] = messages(name=name)
    assert line.startswith("name must be")


def test_text_fields() -> None:
    assert make(description=None).description == ""
    assert messages(description=["a", "b"]) == ["description must be text, got list ['a', 'b']"]


def test_extra_kept() -> None:
    d = make(extra={"color": "red", 3: "x"})
    assert d.extra == {"color": "red", "3": "x"}


# -- tools -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("claude", "ours"),
    [
        ("Read", "read_file"),
        ("Write", "write_file"),
        ("Edit", "edit_file"),
        ("MultiEdit", "edit_file"),
        ("Glob", "glob"),
        ("LS", "glob"),
        ("Grep", "grep"),
        ("Bash", "bash"),
        ("Task", "task"),
        ("Agent", "task"),
        ("read_file", "read_file"),
        ("READ_FILE", "read_file"),
        ("Bash ", "bash"),
        ("Task_Status", "task_status"),
    ],
)
def test_tool_name_mapping(claude: str, ours: str) -> None:
    assert map_tool_name(claude) == ours


@pytest.mark.parametrize(
    "name",
    ["NotebookEdit", "KillShell", "mcp__ctx__query", "read", "multiedit", "webfetch"],
)
def test_unmapped_names_kept_as_given(name: str) -> None:
    # Claude names are case-sensitive: "read" and "multiedit" are not Claude Code's names.
    assert map_tool_name(name) == name


def test_duplicates_removed_keeping_first_place() -> None:
    assert normalize_tool_names(["Edit", "Read", "MultiEdit", "edit_file", "Read", " "]) == [
        "edit_file",
        "read_file",
    ]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("Read, Grep, Glob", ["read_file", "grep", "glob"]),
        (["Read", "Bash"], ["read_file", "bash"]),
        ("Read,,Read", ["read_file"]),
        ([], []),
        ("", []),
        (None, None),
        ("*", None),
        (["*"], None),
        ("all", None),
        ("ALL", None),
    ],
)
def test_tools_forms(value: object, expected: list[str] | None) -> None:
    assert make(tools=value).tools == expected


def test_empty_tools_list_means_no_tools_not_inherit() -> None:
    assert make(tools=[]).tools == []


def test_star_must_stand_alone() -> None:
    [line] = messages(tools="Read, *")
    assert line.startswith("tools '*' means all of the parent's tools and must stand alone")


def test_star_is_not_a_denylist() -> None:
    [line] = messages(disallowed_tools="*")
    assert line.startswith("disallowed_tools cannot be '*'")
    assert "tools: []" in line


def test_tools_bad_type() -> None:
    assert messages(tools=5)[0].startswith("tools must be a comma-separated string")
    assert messages(tools=["Read", 3])[0].endswith("item 2 is 3")


def test_disallowed_tools_string_and_unknown_tools() -> None:
    d = make(
        tools="Read, KillShell, mcp__x__y, Read, WebFetch",
        disallowed_tools="Write, Edit, NotebookEdit",
    )
    assert d.tools == ["read_file", "KillShell", "mcp__x__y", "web_fetch"]
    assert d.disallowed_tools == ["write_file", "edit_file", "NotebookEdit"]
    assert d.unknown_tools == ["KillShell", "NotebookEdit"]  # MCP names come from servers


# -- models ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        (None, "inherit"),
        ("", "inherit"),
        ("inherit", "inherit"),
        ("Inherit", "inherit"),
        ("sonnet", "sonnet"),
        ("Opus", "opus"),
        ("HAIKU", "haiku"),
        ("claude-sonnet-4-5", "anthropic:claude-sonnet-4-5"),
        ("gpt-4o-mini", "openai:gpt-4o-mini"),
        ("chatgpt-4o-latest", "openai:chatgpt-4o-latest"),
        ("o1", "openai:o1"),
        ("o3-mini", "openai:o3-mini"),
        ("o4-mini", "openai:o4-mini"),
        ("openai:gpt-4o-mini", "openai:gpt-4o-mini"),
        ("scripted:echo", "scripted:echo"),
        (" anthropic:claude-opus-4 ", "anthropic:claude-opus-4"),
        ("fable", "fable"),
    ],
)
def test_normalize_model(given: str | None, expected: str) -> None:
    assert normalize_model(given) == expected


def test_model_field_normalised() -> None:
    assert make(model="claude-3-5-haiku").model == "anthropic:claude-3-5-haiku"
    assert make(model=None).model == "inherit"
    assert messages(model=4) == [
        "model must be a model name such as sonnet or openai:gpt-4o, got 4"
    ]


def test_model_problem() -> None:
    for fine in ("inherit", "sonnet", "fable", "openai:gpt-4o"):  # fable: Claude Code's too
        assert model_problem(fine) is None
    problem = model_problem("parable")
    assert problem is not None
    assert "'parable'" in problem
    assert "PROVIDER:NAME" in problem


ALIASES = {"sonnet": "anthropic:claude-sonnet-4-5", "fast": "gpt-4o-mini"}


def test_resolve_inherit_and_aliases() -> None:
    kw: dict[str, Any] = {"parent_model": "scripted:echo", "aliases": ALIASES}
    assert resolve_model_alias("inherit", **kw) == "scripted:echo"
    assert resolve_model_alias("sonnet", **kw) == "anthropic:claude-sonnet-4-5"
    assert resolve_model_alias("Sonnet", **kw) == "anthropic:claude-sonnet-4-5"
    assert resolve_model_alias("fast", **kw) == "openai:gpt-4o-mini"  # configured alias
    assert resolve_model_alias("openai:o3", **kw) == "openai:o3"
    assert resolve_model_alias("claude-x", **kw) == "anthropic:claude-x"


def test_resolve_inherit_of_an_alias_parent() -> None:
    assert (
        resolve_model_alias("inherit", parent_model="sonnet", aliases=ALIASES)
        == "anthropic:claude-sonnet-4-5"
    )


def test_unconfigured_alias_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match=r"model alias 'opus' is not configured") as info:
        resolve_model_alias("opus", parent_model="scripted:echo", aliases=ALIASES)
    assert "PROVIDER:NAME" in str(info.value)


def test_alias_to_alias_is_refused() -> None:
    with pytest.raises(ValueError, match="another alias"):
        resolve_model_alias("haiku", parent_model="x:y", aliases={"haiku": "sonnet"})
