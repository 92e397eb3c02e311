"""The main agent's MCP server that fails leaves its output in the run's record folder
(``.agentcell/mcp-logs/NAME.log`` for a shared server, ``<run>/main.mcp-NAME.log`` for
one configured ``shared = false``), as a sub-agent's does, never a temp file per run."""

from __future__ import annotations

import asyncio
import sys
import tempfile
import uuid
from pathlib import Path

import pytest
from agentcell.orchestrator import Orchestrator, Settings
from agentcell.orchestrator.config._mcp import McpServerConfig

from agentcell.testing import FunctionModel


@pytest.mark.parametrize("shared", [True, False])
async def test_a_failing_main_server_logs_into_the_run_folder(tmp_path: Path, shared: bool) -> None:
    name = f"broken-{uuid.uuid4().hex[:8]}"
    said = f"{name} cannot start: no such database"
    server = McpServerConfig(
        command=sys.executable,
        args=["-c", f"import sys; print({said!r}, file=sys.stderr); sys.exit(3)"],
        shared=shared,
    )
    orch = Orchestrator(
        model=FunctionModel(lambda messages, tools: "done", name="function:main"),
        settings=Settings(mcp_servers={name: server}, main_mcp_servers=[name], warm_spares=0),
        workdir=tmp_path,
        load_agent_files=False,
    )
    async with orch:
        report = await asyncio.wait_for(orch.run("go"), 60)
    assert report.final_text == "done"
    folder = Path(report.run_dir)
    log = (
        tmp_path / ".agentcell/mcp-logs" / f"{name}.log"
        if shared
        else folder / f"main.mcp-{name}.log"
    )
    assert said in log.read_text()
    assert not list(Path(tempfile.gettempdir()).glob(f"agentcell-mcp-{name}-*.log"))
