"""resolve_tools: a sub-agent's tools never exceed its parent's, and the denylist wins."""

from __future__ import annotations

from agentcell.orchestrator.definitions._tool_policy import (
    BUILTIN_TOOLS,
    COORDINATION_TOOLS,
    KNOWN_TOOLS,
    is_mcp_tool,
    map_tool_name,
    means_all_tools,
    resolve_tools,
)
from hypothesis import given
from hypothesis import strategies as st

# Names from every family: ours, coordination, Claude spellings, custom/MCP tools a parent
# may have, names nobody has, and the "every tool" words.
NAMES = [
    *BUILTIN_TOOLS,
    *sorted(COORDINATION_TOOLS),
    "Read",
    "Write",
    "Edit",
    "MultiEdit",
    "Bash",
    "LS",
    "Task",
    "Agent",
    "READ_FILE",
    "mcp__db__query",
    "custom_tool",
    "WebFetch",
    "NotebookEdit",
    "nonexistent",
    "*",
    "all",
]
name = st.sampled_from(NAMES)
names = st.lists(name, max_size=8)
# A parent's tools are canonical names: ours, coordination, and custom ones.
parent_tools = st.lists(
    st.sampled_from([*BUILTIN_TOOLS, *sorted(COORDINATION_TOOLS), "mcp__db__query", "custom_tool"]),
    max_size=12,
)
allowlists = st.none() | names


def canonical(items: list[str]) -> set[str]:
    return {map_tool_name(item) for item in items}


@given(allowlists, names, parent_tools)
def test_result_is_a_subset_of_the_parent(
    allow: list[str] | None, deny: list[str], parent: list[str]
) -> None:
    result = resolve_tools(allow, deny, parent)
    assert set(result.tools) <= set(parent)
    assert len(result.tools) == len(set(result.tools))
    # In the parent's order.
    order = [t for t in dict.fromkeys(parent) if t in set(result.tools)]
    assert result.tools == order


@given(allowlists, names, parent_tools)
def test_never_a_coordination_tool(
    allow: list[str] | None, deny: list[str], parent: list[str]
) -> None:
    assert not set(resolve_tools(allow, deny, parent).tools) & COORDINATION_TOOLS


@given(allowlists, names, parent_tools)
def test_deny_wins(allow: list[str] | None, deny: list[str], parent: list[str]) -> None:
    result = resolve_tools(allow, deny, parent)
    assert not set(result.tools) & canonical(deny)
    assert not set(result.tools) & set(deny)


@given(names, names, names, parent_tools)
def test_monotone_in_the_allowlist(
    allow: list[str], more: list[str], deny: list[str], parent: list[str]
) -> None:
    small = resolve_tools(allow, deny, parent).tools
    big = resolve_tools(allow + more, deny, parent).tools
    everything = resolve_tools(None, deny, parent).tools
    assert set(small) <= set(big) <= set(everything)


@given(allowlists, names, names, parent_tools)
def test_anti_monotone_in_the_denylist(
    allow: list[str] | None, deny: list[str], more: list[str], parent: list[str]
) -> None:
    few = resolve_tools(allow, deny, parent).tools
    many = resolve_tools(allow, deny + more, parent).tools
    assert set(many) <= set(few)


@given(names, parent_tools)
def test_none_means_everything_the_parent_has(deny: list[str], parent: list[str]) -> None:
    expected = [
        t for t in dict.fromkeys(parent) if t not in canonical(deny) and t not in COORDINATION_TOOLS
    ]
    if any(means_all_tools(n) for n in deny):
        expected = []
    assert resolve_tools(None, deny, parent).tools == expected


@given(allowlists, names, parent_tools)
def test_unknown_names_reported_and_never_granted(
    allow: list[str] | None, deny: list[str], parent: list[str]
) -> None:
    result = resolve_tools(allow, deny, parent)
    mentioned = canonical(allow or []) | canonical(deny)
    expected = {
        n
        for n in mentioned
        if n not in set(parent)
        and n not in KNOWN_TOOLS
        and not means_all_tools(n)
        and not is_mcp_tool(n)  # provided by the servers the agent names
    }
    assert set(result.unknown) == expected
    assert len(result.unknown) == len(set(result.unknown))
    assert not set(result.unknown) & set(result.tools)


@given(names, parent_tools)
def test_empty_allowlist_grants_nothing(deny: list[str], parent: list[str]) -> None:
    assert resolve_tools([], deny, parent).tools == []


# -- examples ----------------------------------------------------------------------------

PARENT = ["read_file", "write_file", "edit_file", "glob", "grep", "bash", "task", "task_status"]


def test_read_only_allowlist() -> None:
    result = resolve_tools(["Read", "Grep", "Glob"], [], PARENT)
    assert result.tools == ["read_file", "glob", "grep"]
    assert result.unknown == []


def test_inherit_all_drops_coordination() -> None:
    assert resolve_tools(None, [], PARENT).tools == PARENT[:6]


def test_deny_beats_allow() -> None:
    assert resolve_tools(["Bash", "Read"], ["bash"], PARENT).tools == ["read_file"]
    assert resolve_tools(None, ["Write", "Edit"], PARENT).tools == [
        "read_file",
        "glob",
        "grep",
        "bash",
    ]


def test_allowing_task_does_not_grant_it() -> None:
    assert resolve_tools(["Task", "Read"], [], PARENT).tools == ["read_file"]


def test_allowlist_cannot_widen_the_parent() -> None:
    result = resolve_tools(["bash", "KillShell"], [], ["read_file"])
    assert result.tools == []
    assert result.unknown == ["KillShell"]  # bash is a known tool, just not the parent's


def test_custom_parent_tools_pass_through() -> None:
    parent = ["read_file", "mcp__db__query"]
    result = resolve_tools(["mcp__db__query", "mcp__other__x"], [], parent)
    assert result.tools == ["mcp__db__query"]
    assert result.unknown == []  # an MCP name: its server, once named, provides it


def test_star_words() -> None:
    assert resolve_tools(["*"], [], PARENT).tools == PARENT[:6]
    assert resolve_tools(None, ["*"], PARENT).tools == []
    assert resolve_tools(None, ["ALL"], PARENT).tools == []
    assert resolve_tools(["all"], ["*"], PARENT).unknown == []


def test_duplicate_parent_tools() -> None:
    assert resolve_tools(None, [], ["grep", "grep", "glob"]).tools == ["grep", "glob"]
