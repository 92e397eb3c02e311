"""``Orchestrator.delegate`` and ``map``: sub-agents the caller runs directly, with no
main model.

Each call is recorded and budgeted as one (``Calls``); every run it starts has a
``RunHandle``, held both by the call (a crossed budget cancels the call's runs) and here
(``Orchestrator.cancel`` and closing the orchestrator cancel them all).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from pathlib import Path

from agentcell.orchestrator._calls import Calls
from agentcell.orchestrator.delegation._request import (
    DelegationRequest,
    RunAccount,
    RunHandle,
    Scope,
)
from agentcell.orchestrator.delegation._results import SubAgentResult
from agentcell.orchestrator.delegation._runner import Runner
from agentcell.orchestrator.records._disk import disk_full_result
from agentcell.protocol import RunStatus, gather_owned
from agentcell.worker.tools import Tool, builtin_tools


class DirectRuns:
    """The caller's own sub-agent runs: ``delegate`` (one) and ``map`` (one per prompt)."""

    def __init__(
        self, runner: Runner, calls: Calls, custom_tools: list[Tool], model_name: str | None
    ) -> None:
        self.runner = runner
        self.calls = calls
        self.custom_tools = custom_tools  # with the built-ins, what a direct run may narrow
        self.model_name = model_name  # what a definition's ``inherit`` means
        self.handles: set[RunHandle] = set()  # every direct run in flight

    async def delegate(
        self, agent: str, prompt: str, *, description: str, background: bool
    ) -> SubAgentResult:
        """One sub-agent, recorded and budgeted as one call (see ``Orchestrator.delegate``)."""
        started = time.perf_counter()
        if refusal := self.calls.refusal():
            return disk_full_result(refusal, agent, description)  # before any work or record
        run_dir = self.calls.run_dir()
        account, handles = self._account(run_dir)
        returned: list[SubAgentResult] = []
        try:
            result = await self._one(
                agent,
                prompt,
                description=description,
                background=background,
                account=account,
                handles=handles,
            )
            returned.append(result)
            return result
        finally:
            self.calls.write_summary(
                account, returned, run_dir, started, prompt=prompt, agent=agent, kind="delegate"
            )
            self.calls.finish(account, returned[0].status.value if returned else "cancelled")

    async def map(
        self, agent: str, prompts: Iterable[str], *, concurrency: int, description: str
    ) -> list[SubAgentResult]:
        """One sub-agent per prompt, at most ``concurrency`` at once, as one call (see
        ``Orchestrator.map``)."""
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        items = list(prompts)
        started = time.perf_counter()
        if refusal := self.calls.refusal():
            return [
                disk_full_result(refusal, agent, description or f"item {i}")
                for i in range(len(items))
            ]
        run_dir = self.calls.run_dir()
        account, handles = self._account(run_dir)
        gate = asyncio.Semaphore(concurrency)

        async def one(index: int, prompt: str) -> SubAgentResult:
            async with gate:
                return await self._one(
                    agent,
                    prompt,
                    description=description or f"item {index}",
                    background=False,
                    account=account,
                    handles=handles,
                )

        returned: list[SubAgentResult] = []
        try:
            returned += await gather_owned(*(one(i, p) for i, p in enumerate(items)))
            return list(returned)
        finally:
            self.calls.write_summary(
                account,
                returned,
                run_dir,
                started,
                prompt=f"{len(items)} prompts, e.g.: {items[0]}" if items else "no prompts",
                agent=agent,
                kind="map",
            )
            self.calls.finish(account, "completed" if len(returned) == len(items) else "cancelled")

    def cancel(self) -> None:
        """Cancel every direct run in flight (each ends with a ``cancelled`` result)."""
        for handle in list(self.handles):
            handle.cancel()

    def scope(self, account: RunAccount | None = None) -> Scope:
        """Who delegates a direct run: the user, with the built-in and custom tools."""
        names = [t.name for t in builtin_tools()] + [t.name for t in self.custom_tools]
        return Scope(
            agent_id="user", tools=names, model=self.model_name or "", depth=0, account=account
        )

    def _account(self, run_dir: Path | None) -> tuple[RunAccount, set[RunHandle]]:
        """The call's account, and its runs' handles: a crossed budget cancels them."""
        handles: set[RunHandle] = set()

        def stop(why: str, status: RunStatus) -> None:
            for handle in list(handles):
                handle.cancel(why, status)

        return self.calls.account(run_dir, [stop], kind="direct"), handles

    async def _one(
        self,
        agent: str,
        prompt: str,
        *,
        description: str,
        background: bool,
        account: RunAccount,
        handles: set[RunHandle],
    ) -> SubAgentResult:
        handle = RunHandle()
        self.handles.add(handle)
        handles.add(handle)
        try:
            return await self.runner.run(
                DelegationRequest(
                    agent_type=agent, prompt=prompt, description=description, background=background
                ),
                self.scope(account),
                handle=handle,
            )
        finally:
            self.handles.discard(handle)
            handles.discard(handle)
