"""``python -m bench.wall_cost`` still runs: every variant of walls put up from a copy of
the real fork server, two children each; only the result's shape is checked."""

from __future__ import annotations

from pathlib import Path

import pytest
from agentcell.worker import probe_sandbox
from conftest import SpawnRecorder

from bench import wall_cost
from bench.wall_probe import VARIANTS

CAPS = probe_sandbox()


@pytest.mark.skipif(not CAPS["landlock_scopes"], reason="needs Landlock ABI 6")
async def test_every_variant_of_walls_is_measured(spawned: SpawnRecorder, tmp_path: Path) -> None:
    result = await wall_cost.amain(str(tmp_path.resolve()), 2, 1)
    assert list(result) == list(VARIANTS)
    for name, row in result.items():
        assert row["life_cpu_ms"] > 0 and row["life_faults"] > 0, (name, row)
    assert "| fork + exit, no walls |" in wall_cost.render(result, 2, 1)
