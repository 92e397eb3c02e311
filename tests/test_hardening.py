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
