"""Usage accounting across the main agent and every sub-agent, and run-wide budgets.

Everything here runs on the parent's event loop, so each check-and-update is atomic:
parallel children cannot both squeeze under a limit.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from agentcell.orchestrator.config._settings import Budgets, Price
from agentcell.protocol import Usage


class BudgetExceeded(Exception):
    """A run-wide budget is used up."""


@dataclasses.dataclass(slots=True)
class AgentUsage:
    agent_id: str
    agent_type: str
    model: str = ""
    usage: Usage = dataclasses.field(default_factory=Usage)
    turns: int = 0
    cost_usd: float | None = None


class UsageLedger:
    """Usage of one run (with its budgets), or of an orchestrator's whole life.

    A run's ledger forwards everything to its ``parent`` (the orchestrator's lifetime
    ledger), so totals over hours are kept without keeping every run. ``max_rows`` bounds
    the per-agent rows: beyond it the oldest rows are folded into ``folded`` (their
    tokens, turns and cost stay in the totals).
    """

    def __init__(
        self,
        *,
        prices: dict[str, Price] | None = None,
        budgets: Budgets | None = None,
        on_exceeded: Callable[[str], None] | None = None,
        parent: UsageLedger | None = None,
        max_rows: int | None = None,
    ) -> None:
        self.prices = prices or {}
        # No budget unless one is given (a run's own account): a lifetime ledger counts only.
        self.budgets = budgets or Budgets(max_subagents=None)
        self.on_exceeded = on_exceeded
        self.parent = parent
        self.max_rows = max_rows
        self.agents: dict[str, AgentUsage] = {}
        self.folded = AgentUsage("(earlier agents)", "")
        self.total = Usage()
        self.turns = 0
        self.subagents = 0
        self.exceeded: str | None = None
        self._cost: float | None = None

    def agent(self, agent_id: str, agent_type: str, model: str = "") -> AgentUsage:
        entry = self.agents.get(agent_id)
        if entry is None:
            entry = self.agents[agent_id] = AgentUsage(agent_id, agent_type, model)
            if self.max_rows is not None and len(self.agents) > self.max_rows:
                self._fold(next(iter(self.agents)))
        return entry

    def reserve_subagent(self) -> None:
        """Count one more sub-agent, or raise if that would break the budget."""
        self._raise_if_exceeded()
        limit = self.budgets.max_subagents
        if limit is not None and self.subagents >= limit:
            raise BudgetExceeded(f"sub-agent budget used up: max_subagents is {limit}")
        self.subagents += 1
        if self.parent is not None:
            self.parent.reserve_subagent()

    def subagents_left(self) -> int | None:
        """How many more sub-agents the budgets here and above allow (None: no limit)."""
        limit = self.budgets.max_subagents
        left = None if limit is None else max(0, limit - self.subagents)
        above = self.parent.subagents_left() if self.parent is not None else None
        if left is None or above is None:
            return above if left is None else left
        return min(left, above)

    def tokens_left(self) -> int | None:
        """How many more tokens the budgets here and above allow (None: no limit)."""
        limit = self.budgets.max_tokens
        left = None if limit is None else max(0, limit - self.total.total_tokens)
        above = self.parent.tokens_left() if self.parent is not None else None
        if left is None or above is None:
            return above if left is None else left
        return min(left, above)

    def add_turn(self, agent_id: str, agent_type: str) -> None:
        self.agent(agent_id, agent_type).turns += 1
        self.turns += 1
        if self.parent is not None:
            self.parent.add_turn(agent_id, agent_type)
        limit = self.budgets.max_turns
        if limit is not None and self.turns > limit:
            self._exceed(f"turn budget exceeded: {self.turns} turns, max_turns is {limit}")

    def add_usage(self, agent_id: str, agent_type: str, model: str, usage: Usage) -> None:
        entry = self.agent(agent_id, agent_type, model)
        entry.model = model or entry.model
        entry.usage = entry.usage + usage
        cost = self.cost(model, usage)
        if cost is not None:
            entry.cost_usd = (entry.cost_usd or 0.0) + cost
            self._cost = (self._cost or 0.0) + cost
        self.total = self.total + usage
        if self.parent is not None:
            self.parent.add_usage(agent_id, agent_type, model, usage)
        limit = self.budgets.max_tokens
        if limit is not None and self.total.total_tokens > limit:
            self._exceed(
                f"token budget exceeded: {self.total.total_tokens} tokens, max_tokens is {limit}"
            )

    def cost(self, model: str, usage: Usage) -> float | None:
        price = self.price_of(model)
        if price is None:
            return None
        # input_tokens counts every prompt token, the cached ones too: each is billed once
        read_rate, write_rate = price.cache_rates(model)
        cached = usage.cache_read_tokens + usage.cache_write_tokens
        return (
            max(usage.input_tokens - cached, 0) * price.input
            + usage.output_tokens * price.output
            + usage.cache_read_tokens * read_rate
            + usage.cache_write_tokens * write_rate
        ) / 1_000_000

    def price_of(self, model: str) -> Price | None:
        """``model``'s price: by its own name, its name without the provider, or (a name
        the API reported, without one) the ``provider:name`` entry of that name."""
        price = self.prices.get(model) or self.prices.get(model.partition(":")[2])
        if price is None and ":" not in model:
            price = next((p for k, p in self.prices.items() if k.partition(":")[2] == model), None)
        return price

    @property
    def cost_usd(self) -> float | None:
        """Dollars over everything this ledger saw (None while nothing was priced)."""
        return self._cost

    def _fold(self, agent_id: str) -> None:
        entry = self.agents.pop(agent_id)
        folded = self.folded
        folded.usage = folded.usage + entry.usage
        folded.turns += entry.turns
        if entry.cost_usd is not None:
            folded.cost_usd = (folded.cost_usd or 0.0) + entry.cost_usd

    def _raise_if_exceeded(self) -> None:
        if self.exceeded is not None:
            raise BudgetExceeded(self.exceeded)

    def _exceed(self, why: str) -> None:
        if self.exceeded is None:
            self.exceeded = why
            if self.on_exceeded is not None:
                self.on_exceeded(why)
