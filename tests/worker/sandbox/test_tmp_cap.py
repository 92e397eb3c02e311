"""The private temp folder has a cap (issue 27 item 4): a tmpfs in the sub-agent's mount
namespace. Before, it was on the host's root disk with no cap (1 GiB in 13 s)."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import pytest
from agentcell.worker.sandbox._apply import remove_stale_tmps
from agentcell.worker.sandbox._spare import private_tmp
from agents import agent
from conftest import SpawnRecorder
from model_servers import Call, ModelServer, Reply
from sandbox_util import CAPS, orchestrator, served

__all__ = ["served"]  # the fixture, shared with test_sandbox

pytestmark = [
    pytest.mark.skipif(not CAPS["landlock_files"], reason="needs Landlock"),
    pytest.mark.skipif(CAPS["mount_namespace"] is None, reason="needs a mount namespace"),
]

FILL = (
    'df -k "$TMPDIR" | tail -1; '
    'dd if=/dev/zero of="$TMPDIR/big" bs=1M count=40 2>&1 | grep -i "space" | head -1; '
    'echo "dd exit ${PIPESTATUS[0]}"; rm -f "$TMPDIR/big"; '
    'for i in $(seq 3000); do : > "$TMPDIR/f$i" 2>/dev/null || { echo "file $i refused"; '
    "break; }; done"
)


def _filler_and_sibling(body: dict[str, Any], api: str) -> Reply:
    outputs = [m["content"] for m in body["messages"] if m["role"] == "tool"]
    prompt = next(m["content"] for m in body["messages"] if m["role"] == "user")
    if prompt == "sibling":
        return Reply(text="sibling done")
    if not outputs:
        return Reply(tool_calls=[Call("bash", {"command": FILL, "timeout_s": 60})])
    return Reply(text=outputs[0])


async def test_a_child_filling_its_temp_folder_gets_enospc_and_the_rest_go_on(
    spawned: SpawnRecorder, served: ModelServer, tmp_path: Path
) -> None:
    served.responder = _filler_and_sibling
    orch = orchestrator(tmp_path, agent("worker", ["bash"]), tmp_size_mb=8)
    async with orch:
        filler, sibling = await asyncio.wait_for(
            asyncio.gather(orch.delegate("worker", "fill"), orch.delegate("worker", "sibling")),
            120,
        )
        after = await orch.delegate("worker", "sibling")  # the parent serves on
    assert filler.status.value == "completed", filler.error
    said = filler.text
    # Its $TMPDIR is a tmpfs of 8 MiB (8,192 KiB), 40 MiB do not fit, nor 3,000 files.
    assert said.startswith("tmpfs") and " 8192 " in said, said
    assert "No space left on device" in said and "dd exit 1" in said, said
    refused = re.search(r"file (\d+) refused", said)
    assert refused is not None and int(refused.group(1)) <= 1024, said
    assert "tmp capped at 8 MiB (1024 inodes, tmpfs)" in filler.sandbox, filler.sandbox
    assert sibling.status.value == "completed" and sibling.text == "sibling done"
    assert after.status.value == "completed"
    # What it wrote went with its namespace; the folder on the host is gone, and the
    # sweep finds nothing of it.
    assert filler.pid is not None and not private_tmp(filler.pid).exists()
    assert filler.pid not in remove_stale_tmps()


def test_sandbox_output_says_the_temp_folder_is_uncapped_without_a_mount_namespace(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import json

    from agentcell.orchestrator.cli import _sandbox_cmd
    from agentcell.orchestrator.cli._main import cli as command
    from agentcell.worker.sandbox._tmpcap import MISSING
    from click.testing import CliRunner

    here = json.loads(CliRunner().invoke(command, ["sandbox", "--json"]).output)
    holds = " ".join(here["modes"]["workspace"]["enforced"])
    assert "private temp folder is a tmpfs of tmp_size_mb" in holds
    assert MISSING not in here["modes"]["workspace"]["missing"]
    bare = {**CAPS, "mount_namespace": None}
    monkeypatch.setattr(_sandbox_cmd, "probe_sandbox", lambda: bare)
    there = json.loads(CliRunner().invoke(command, ["sandbox", "--json"]).output)
    assert MISSING in there["modes"]["workspace"]["missing"]
    assert "tmpfs" not in " ".join(there["modes"]["workspace"]["enforced"])
