"""Hardening II (issue 16): what a determined attacker or a hostile model server broke.

Each test here failed on the code before its fix; the process-level ones are in
test_hardening_processes.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from agentcell.worker.tools import ToolContext
from agentcell.worker.tools._base import truncate_output

# --- 4. a model-chosen tool-call id never becomes a path part -------------------------


@pytest.mark.parametrize(
    "call_id", ["x/../../../escaped", "../escaped", "/tmp/escaped", "a\x00b", "..", "é" * 300]
)
def test_a_hostile_call_id_cannot_place_the_spill_file(tmp_path: Path, call_id: str) -> None:
    workdir = tmp_path / "work"
    run_dir = workdir / "run"
    workdir.mkdir()
    ctx = ToolContext(workdir=workdir, run_dir=run_dir, call_id=call_id, max_output_chars=100)
    out = truncate_output("x" * 5000, ctx)
    spilled = list((run_dir / "tool-outputs").iterdir())
    assert len(spilled) == 1, spilled
    assert spilled[0].read_text() == "x" * 5000
    assert spilled[0].name.startswith("main-") and "/" not in spilled[0].name[5:]
    assert len(spilled[0].name) <= 100
    assert not any(p.name.startswith("escaped") for p in tmp_path.rglob("*") if p != spilled[0])
    assert spilled[0].name in out


def test_two_hostile_ids_that_sanitise_alike_do_not_overwrite_each_other(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    for call_id in ("a/b", "a.b"):
        ctx = ToolContext(workdir=tmp_path, run_dir=run_dir, call_id=call_id, max_output_chars=10)
        truncate_output(call_id * 1000, ctx)
    assert len(list((run_dir / "tool-outputs").iterdir())) == 2


# --- 10. bad input: alias bombs, FIFOs, absurd numbers --------------------------------

_ALIAS_BOMB = "\n".join(
    ["---", "name: bomb", "a: &a [x, x, x, x, x, x, x, x, x, x]"]
    + [
        f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, "
        f"*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, "
        f"*{chr(97 + i)}, *{chr(97 + i)}]"
        for i in range(8)
    ]
    + ["description: *i", "---", "body"]
)


def test_a_yaml_alias_in_an_agent_file_is_refused_with_a_line() -> None:
    from agentcell.orchestrator.definitions._loader import parse_agent_text

    loaded = parse_agent_text(_ALIAS_BOMB, path="bomb.md")
    assert loaded.definitions == []
    [diagnostic] = loaded.diagnostics
    assert "alias" in diagnostic.message and "file skipped" in diagnostic.message


def test_an_alias_is_refused_by_the_tolerant_parser_too() -> None:
    from agentcell.orchestrator.definitions._loader import parse_agent_text

    # Not strict YAML (the colon in the description), so the tolerant parser reads it
    # entry by entry: an alias in one entry must not expand there either.
    text = "---\nname: t\ndescription: Triggers on: 'x'\ntools: &t [Read]\nx: *t\n---\nbody\n"
    loaded = parse_agent_text(text, path="t.md")
    assert loaded.definitions == []
    assert any("alias" in d.message for d in loaded.diagnostics)


def test_a_fifo_or_other_non_regular_file_in_an_agents_folder_is_skipped(tmp_path: Path) -> None:
    import os

    from agentcell.orchestrator.definitions import load_agents_dir

    (tmp_path / "good.md").write_text("---\nname: good\ndescription: d\n---\nbody\n")
    os.mkfifo(tmp_path / "fifo.md")  # nobody ever writes to it: reading it would hang
    loaded = load_agents_dir(tmp_path)
    assert [d.name for d in loaded.definitions] == ["good"]
    [diagnostic] = loaded.diagnostics
    assert diagnostic.path.endswith("fifo.md") and "not a regular file" in diagnostic.message


def test_a_huge_agent_file_is_skipped_not_read_whole(tmp_path: Path) -> None:
    from agentcell.orchestrator.definitions import load_agents_dir

    with open(tmp_path / "big.md", "wb") as f:
        f.truncate(64 * 2**20)  # sparse: costs nothing on disk
    loaded = load_agents_dir(tmp_path)
    assert loaded.definitions == []
    assert "too large" in loaded.diagnostics[0].message


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("heartbeat_timeout_s", 1e-9),
        ("heartbeat_timeout_s", 1e12),
        ("max_workers", 10**9),
        ("subagent_timeout_s", 1e300),
        ("subagent_max_turns", 10**15),
        ("timeout_grace_s", 1e9),
        ("background_wait_s", 1e12),
        ("max_depth", 10**6),
        ("warm_spares", 10**6),
    ],
)
def test_absurd_settings_are_refused(field: str, value: float) -> None:
    from agentcell.orchestrator import Settings
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match=field):
        Settings(**{field: value})


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("memoryLimitMb", "100000000000000000000000"),
        ("maxTurns", 10**12),
        ("timeout_s", 1e300),
        ("cpu_limit_s", 10**12),
        ("max_tool_calls", 10**15),
        ("max_tool_output_bytes", 2**40),
        ("max_depth", 10**6),
    ],
)
def test_absurd_definition_numbers_are_refused_with_a_line(key: str, value: object) -> None:
    from agentcell.orchestrator.definitions._loader import parse_agent_text

    loaded = parse_agent_text(f"---\nname: t\n{key}: {value}\n---\nbody\n", path="t.md")
    assert loaded.definitions == [], loaded.definitions
    assert any("at most" in d.message for d in loaded.diagnostics), loaded.diagnostics


def test_sane_numbers_still_load() -> None:
    from agentcell.orchestrator import Settings
    from agentcell.orchestrator.definitions._loader import parse_agent_text

    Settings(heartbeat_timeout_s=30, max_workers=200, subagent_timeout_s=3600)
    text = "---\nname: t\nmaxTurns: 500\nmemoryLimitMb: 4096\ntimeout_s: 7200\n---\nbody\n"
    [definition] = parse_agent_text(text, path="t.md").definitions
    assert (definition.max_turns, definition.memory_limit_mb) == (500, 4096)
