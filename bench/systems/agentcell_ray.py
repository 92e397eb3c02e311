"""agentcell with ``backend = "ray"``: one Ray actor per sub-agent on a local Ray head.

The head is started once by ``bench.run`` before any timed region (its address comes in
``AGENTCELL_BENCH_RAY_ADDRESS``); the orchestrator's Ray driver connects in ``open``,
also outside the clock. What a run measures is placing an actor per sub-agent, its
process dialling back, and the run itself.
"""

from __future__ import annotations

import os

from agentcell.orchestrator import Settings

from bench.systems._base import Options
from bench.systems.agentcell import Agentcell

ADDRESS_ENV = "AGENTCELL_BENCH_RAY_ADDRESS"


class AgentcellRay(Agentcell):
    name = "agentcell (ray)"
    packages = ("agentcell", "ray", "msgspec", "httpx")

    def available(self) -> str:
        if not os.environ.get(ADDRESS_ENV):
            return "no Ray head for the bench (bench.run starts one when this system runs)"
        return super().available()

    def settings(self, n: int, options: Options) -> Settings:
        settings = super().settings(n, options)
        settings.backend = "ray"
        settings.ray.address = os.environ[ADDRESS_ENV]
        settings.warm_spares = 0  # no spare processes on a cluster: one actor per run
        return settings

    async def warm_up(self, settings: Settings) -> None:
        return None  # the runner's untimed warm-up run places the first actors
