"""An orchestrator whose children's model requests go through the parent, and the record of
what each child was started with."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from agentcell.orchestrator import AgentDefinition, Orchestrator, Settings
from agentcell.orchestrator.delegation import _prepare
from agentcell.protocol import Start

KEY = "sk-relay-test-key-0042"


def orchestrator(
    workdir: Path, *agents: AgentDefinition, tools: Any = (), **settings: Any
) -> Orchestrator:
    defaults: dict[str, Any] = {"model": "openai:test", "approval": "allow", "max_workers": 2}
    return Orchestrator(
        settings=Settings(**(defaults | {"warm_spares": 0} | settings)),
        workdir=workdir,
        agents=list(agents),
        tools=list(tools),
        load_agent_files=False,
        record=False,
    )


def recorded_starts(monkeypatch: pytest.MonkeyPatch) -> list[Start]:
    """Every Start the parent makes from now on (what a child is handed), in order."""
    starts: list[Start] = []
    original = _prepare.Preparer.start

    def recording(self: _prepare.Preparer, prepared: Any) -> Start:
        starts.append(original(self, prepared))
        return starts[-1]

    monkeypatch.setattr(_prepare.Preparer, "start", recording)
    return starts
