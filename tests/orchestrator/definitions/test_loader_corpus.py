"""The loader against 499 real agent files from six public repositories.

The corpus lives outside the project (../shared/agents-corpus relative to the repository
root) and is never copied in; every test here skips when it is absent. MANIFEST.tsv says,
per file, what strict YAML makes of it and what the frontmatter holds; the tests check the
loader against it, and against PyYAML itself for every file strict YAML accepts.
"""

from __future__ import annotations

import csv
import dataclasses
from pathlib import Path
from typing import Any

import pytest
import yaml
from agentcell.orchestrator.definitions._loader import (
    UNSUPPORTED_KEYS,
    LoadResult,
    field_for_key,
    load_agents_dir,
)
from agentcell.orchestrator.definitions._model import (
    AgentDefinition,
    is_agent_name,
    normalize_model,
)
from agentcell.orchestrator.definitions._registry import AgentRegistry
from places import SHARED

CORPUS = SHARED / "agents-corpus"
LOADS = {"ok", "strict-yaml-error"}
SKIPPED = {"no-frontmatter", "no-closing-delim", "not-an-agent"}


@dataclasses.dataclass(frozen=True)
class Row:
    path: Path
    status: str
    name: str
    model: str
    tools_format: str
    desc_style: str
    keys: list[str]


@pytest.fixture(scope="module")
def corpus() -> Path:
    if not (CORPUS / "MANIFEST.tsv").is_file():
        pytest.skip(f"agent corpus not found at {CORPUS} (it is not part of the repository)")
    return CORPUS


@pytest.fixture(scope="module")
def manifest(corpus: Path) -> list[Row]:
    with (corpus / "MANIFEST.tsv").open(encoding="utf-8", newline="") as f:
        return [
            Row(
                path=corpus / r["repo_dir"] / r["path"],
                status=r["status"],
                name=r["name"],
                model=r["model"],
                tools_format=r["tools_format"],
                desc_style=r["desc_style"],
                keys=r["frontmatter_keys"].split(),
            )
            for r in csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
        ]


@pytest.fixture(scope="module")
def loaded(corpus: Path) -> LoadResult:
    # Every corpus file goes through the directory loader, the way a registry reads them.
    return load_agents_dir(corpus)


@pytest.fixture(scope="module")
def by_source(loaded: LoadResult) -> dict[str, AgentDefinition]:
    return {d.source: d for d in loaded.definitions}


def diagnostics_for(loaded: LoadResult, path: Path) -> list[str]:
    return [d.message for d in loaded.diagnostics if d.path == str(path)]


def strict_frontmatter(path: Path) -> dict[str, Any]:
    """The oracle: PyYAML on the text between the first two '---' lines."""
    lines = path.read_text(encoding="utf-8-sig").splitlines()
    end = lines.index("---", 1)
    data = yaml.safe_load("\n".join(lines[1:end]) + "\n")
    assert isinstance(data, dict)
    return data


def test_manifest_matches_the_files(corpus: Path, manifest: list[Row]) -> None:
    on_disk = {p for p in corpus.rglob("*.md") if p != corpus / "README.md"}
    assert {row.path for row in manifest} == on_disk
    assert {row.status for row in manifest} <= LOADS | SKIPPED


def test_every_agent_file_loads(manifest: list[Row], by_source: dict[str, AgentDefinition]) -> None:
    failed = [str(r.path) for r in manifest if r.status in LOADS and str(r.path) not in by_source]
    assert failed == []
    assert len(by_source) == sum(r.status in LOADS for r in manifest)


def test_every_file_with_frontmatter_loads(corpus: Path, by_source: dict[str, Any]) -> None:
    with_frontmatter = [
        p
        for p in sorted(corpus.rglob("*.md"))
        if p.read_text(encoding="utf-8-sig").lstrip().startswith("---")
    ]
    assert [str(p) for p in with_frontmatter if str(p) not in by_source] == []


def test_no_errors_and_no_tracebacks(loaded: LoadResult) -> None:
    assert [str(d) for d in loaded.diagnostics if d.level == "error"] == []
    for d in loaded.diagnostics:
        assert "\n" not in str(d)
        assert "Traceback" not in str(d)


def test_skipped_rows_get_a_diagnostic_naming_the_file(
    manifest: list[Row], loaded: LoadResult, by_source: dict[str, AgentDefinition]
) -> None:
    for row in manifest:
        if row.status in SKIPPED:
            assert str(row.path) not in by_source
            assert diagnostics_for(loaded, row.path), row.path


def test_the_corpus_readme_is_not_an_agent(corpus: Path, loaded: LoadResult) -> None:
    assert diagnostics_for(loaded, corpus / "README.md") == []  # nothing to say about it
    assert loaded.no_frontmatter == [str(corpus / "README.md")]


def test_names_and_models_as_in_the_manifest(
    manifest: list[Row], by_source: dict[str, AgentDefinition]
) -> None:
    wrong = []
    for row in manifest:
        d = by_source.get(str(row.path))
        if d is None:
            continue
        if row.name and d.name != row.name:
            wrong.append(f"{row.path}: name {d.name!r} != {row.name!r}")
        if d.model != normalize_model(row.model or None):
            wrong.append(f"{row.path}: model {d.model!r} != {row.model!r}")
    assert wrong == []


def test_tools_format_as_in_the_manifest(
    manifest: list[Row], by_source: dict[str, AgentDefinition]
) -> None:
    for row in manifest:
        d = by_source[str(row.path)]
        if row.tools_format == "absent":
            assert d.tools is None, row.path
        elif row.tools_format in ("comma-string", "single-string"):
            assert d.tools, row.path
        else:
            assert d.tools is not None, row.path
        assert len(set(d.tools or [])) == len(d.tools or [])


def test_strict_yaml_files_agree_with_pyyaml(
    manifest: list[Row], by_source: dict[str, AgentDefinition]
) -> None:
    for row in manifest:
        if row.status != "ok":
            continue
        expected = strict_frontmatter(row.path)
        d = by_source[str(row.path)]
        assert d.name == expected["name"]
        assert d.description == expected["description"].replace("\\n", "\n")
        assert d.extra == {k: v for k, v in expected.items() if field_for_key(k) is None}
        assert list(expected) == row.keys


def test_fallback_exactly_for_strict_yaml_errors(manifest: list[Row], loaded: LoadResult) -> None:
    for row in manifest:
        notes = [m for m in diagnostics_for(loaded, row.path) if "tolerant parser" in m]
        assert len(notes) == (row.status == "strict-yaml-error"), row.path


def test_fallback_files_keep_the_whole_description(
    manifest: list[Row], by_source: dict[str, AgentDefinition]
) -> None:
    rows = [r for r in manifest if r.status == "strict-yaml-error"]
    assert rows
    for row in rows:
        d = by_source[str(row.path)]
        raw = next(
            line
            for line in row.path.read_text(encoding="utf-8").splitlines()
            if line.startswith("description: ")
        )
        assert d.description == raw.removeprefix("description: ").strip()
        assert "Triggers on: '" in d.description
        assert d.tools and d.system_prompt


# -- the README's example rows ------------------------------------------------------------


def get(by_source: dict[str, AgentDefinition], corpus: Path, rel: str) -> AgentDefinition:
    return by_source[str(corpus / rel)]


def test_tools_as_a_comma_string(corpus: Path, by_source: dict[str, AgentDefinition]) -> None:
    d = get(by_source, corpus, "lst97__claude-code-sub-agents/agents/development/python-pro.md")
    assert d.tools is not None
    assert d.tools[:6] == ["read_file", "write_file", "edit_file", "grep", "glob", "bash"]
    assert d.tools.count("edit_file") == 1  # Edit and MultiEdit
    assert d.tools.count("glob") == 1  # Glob and LS
    assert "task" in d.tools
    assert "mcp__context7__resolve-library-id" in d.tools  # granted by a named server
    assert "mcp__context7__resolve-library-id" not in d.unknown_tools
    assert "web_fetch" in d.tools and "WebFetch" not in d.unknown_tools  # issue 24


def test_tools_as_a_flow_list(corpus: Path, by_source: dict[str, AgentDefinition]) -> None:
    d = get(by_source, corpus, "affaan-m__everything-claude-code/agents/a11y-architect.md")
    assert d.tools == ["read_file", "write_file", "edit_file", "grep", "glob"]


def test_tools_as_a_block_list(corpus: Path, by_source: dict[str, AgentDefinition]) -> None:
    d = get(by_source, corpus, "izzzzzi__izteam/plugins/team/agents/coder.md")
    assert d.tools is not None
    assert d.tools[:3] == ["read_file", "grep", "glob"]
    assert d.unknown_tools == ["LSP"]
    assert {"send_message", "team_tasks"} <= set(d.tools)  # SendMessage, TaskList, …
    assert d.color == "green" and d.extra == {}


def test_empty_tools_list_means_no_tools(corpus: Path, by_source: dict[str, Any]) -> None:
    rel = "wshobson__agents/plugins/arm-cortex-microcontrollers/agents/arm-cortex-expert.md"
    assert get(by_source, corpus, rel).tools == []


def test_disallowed_tools_as_a_string(corpus: Path, by_source: dict[str, Any]) -> None:
    d = get(by_source, corpus, "Yeachan-Heo__oh-my-claudecode/agents/architect.md")
    assert d.tools is None
    assert d.disallowed_tools == ["write_file", "edit_file"]
    assert d.model == "opus"
    assert d.extra == {"level": 3}


def test_growth_loops_loads(corpus: Path, by_source: dict[str, AgentDefinition]) -> None:
    rel = "VoltAgent__awesome-claude-code-subagents/categories/08-business-product/growth-loops.md"
    d = get(by_source, corpus, rel)
    assert d.name == "growth-loops"
    assert d.description.startswith("Use when the user wants to design a growth loop")
    assert d.description.endswith("'how do we grow', 'word of mouth'.")
    assert d.tools == [
        "read_file",
        "write_file",
        "edit_file",
        "glob",
        "grep",
        "web_fetch",
        "web_search",
    ]


def test_long_block_descriptions_kept_whole(
    manifest: list[Row], by_source: dict[str, AgentDefinition]
) -> None:
    block = [r for r in manifest if r.desc_style.startswith("block")]
    assert block
    longest = max(len(by_source[str(r.path)].description) for r in block)
    assert longest > 1500
    for row in block:
        d = by_source[str(row.path)]
        if "<example>" in row.path.read_text(encoding="utf-8").split("\n---", 1)[0]:
            assert "<example>" in d.description
            assert d.description.rstrip().endswith(">")


def test_fable_is_claude_codes_alias_and_loads_quietly(
    manifest: list[Row], loaded: LoadResult
) -> None:
    fable = [r for r in manifest if r.model == "fable"]  # Claude Fable 5's alias (2026)
    assert fable
    for row in fable:
        assert not any("model 'fable'" in m for m in diagnostics_for(loaded, row.path))


def test_duplicate_names_within_a_source_are_reported(corpus: Path) -> None:
    registry = AgentRegistry.load(
        corpus / "no-project", home=corpus / "no-home", extra_dirs=[corpus / "izzzzzi__izteam"]
    )
    expert = registry.get("expert")
    assert expert is not None
    assert expert.source.endswith("plugins/think/agents/expert.md")  # later in sorted order
    [override] = [d for d in registry.diagnostics if "overrides" in d.message]
    assert override.level == "warning"
    assert "plugins/arena/agents/expert.md" in override.message


def test_loading_is_deterministic(corpus: Path, loaded: LoadResult) -> None:
    again = load_agents_dir(corpus)
    assert again.definitions == loaded.definitions
    assert again.diagnostics == loaded.diagnostics


def test_claude_code_readings_leave_the_corpus_as_it_was(loaded: LoadResult) -> None:
    # None of the 499 files has a name that needs a slug, a Task(...) limit or a key that
    # agentcell ignores: the new readings must not invent any of them.
    assert all(is_agent_name(d.name) for d in loaded.definitions)
    assert [d.name for d in loaded.definitions if d.task_agents or d.denied_task_agents] == []
    assert not [m for m in loaded.diagnostics if "not an agent name" in m.message]
    ignored = UNSUPPORTED_KEYS.values()
    assert not [m for m in loaded.diagnostics if any(note in m.message for note in ignored)]


def test_every_corpus_agent_is_found_by_another_spelling(corpus: Path) -> None:
    registry = AgentRegistry.load(
        corpus / "no-project", home=corpus / "no-home", extra_dirs=[corpus / "wshobson__agents"]
    )
    for name in registry.names():
        assert registry.get(name.upper().replace("-", " ")) is registry.get(name), name
