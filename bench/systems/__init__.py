"""The systems under test, one module each, behind one small interface (``System``).

Modules import their framework lazily (in ``open``), so that a runner process pays for
and carries in memory only the framework it measures.
"""

from __future__ import annotations

import importlib

from bench.systems._base import Options, Outcome, System

__all__ = ["SYSTEMS", "Options", "Outcome", "System", "load"]

#: name → "module:class". The order is the order of the tables.
SYSTEMS = {
    "agentcell": "bench.systems.agentcell:Agentcell",
    "agentcell (ray)": "bench.systems.agentcell_ray:AgentcellRay",
    "in-process engine": "bench.systems.inprocess:InProcessEngine",
    "ProcessPoolExecutor": "bench.systems.procpool:ProcessPool",
    "raw floor": "bench.systems.floor:RawFloor",
    "deepagents": "bench.systems.deepagents_peer:DeepAgents",
    "openai-agents": "bench.systems.openai_agents_peer:OpenAIAgents",
    "pydantic-ai": "bench.systems.pydantic_ai_peer:PydanticAI",
}


def load(name: str) -> System:
    module, _, cls = SYSTEMS[name].partition(":")
    system: System = getattr(importlib.import_module(module), cls)()
    return system
