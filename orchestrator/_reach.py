"""Which models a run cannot reach, known before it starts.

A model "cannot be reached" when no alias maps its name (``model: sonnet`` with the
alias removed) or its provider's key variable is unset where the provider's official
API is used (``ANTHROPIC_API_KEY`` for ``sonnet`` → ``anthropic:claude-sonnet-4-5``). No
request is sent to find out: the check is the one a first call would meet.

The command line surveys the loaded agents before a run (``survey``): each agent whose
model cannot be reached is named once, in one line per model with the fix
(``--model-alias sonnet=…`` or the key's variable), and left out of ``task``'s list
(``Reach.left_out``); a call that names one anyway is refused with that line. The main
agent's own model is checked by ``Orchestrator.check_setup`` (``UnreachableModel``). The
survey runs before the orchestrator opens: keys leave the environment then.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence

from agentcell.orchestrator.config._settings import Settings
from agentcell.orchestrator.definitions._model import (
    INHERIT,
    AgentDefinition,
    normalize_model,
    resolve_model_alias,
)
from agentcell.orchestrator.delegation._results import SubAgentResult
from agentcell.worker.models import Model, ModelError, resolve_model

#: Providers whose models need a key on their official API (the others run locally).
_KEYED = ("openai", "anthropic")
#: Agents a model's line names before "and N more".
NAMED_AGENTS = 6


class UnreachableModel(ModelError):
    """The main agent's model cannot be reached (its key variable is unset)."""


@dataclasses.dataclass
class Reach:
    """What the survey found: ``models``: model string → why it cannot be reached;
    ``left_out``: agent name → the line that says so and how to fix it; ``asked``: the
    left-out agents a ``task`` call named anyway."""

    models: dict[str, str] = dataclasses.field(default_factory=dict)
    left_out: dict[str, str] = dataclasses.field(default_factory=dict)
    asked: list[str] = dataclasses.field(default_factory=list)
    by_model: dict[str, str] = dataclasses.field(default_factory=dict)  # its one line

    def lines(self) -> list[str]:
        """One line per unreachable model, naming the agents left out for it (the first
        few: a collection may have a hundred on one alias)."""
        return list(self.by_model.values())

    def failures(self, subagents: Iterable[SubAgentResult]) -> list[str]:
        """Why the run failed for want of a model: each left-out agent asked for, each
        sub-agent that failed on a model that cannot be reached (a model override)."""
        found = [
            f"{name} was asked for, {self.left_out[name]}" for name in dict.fromkeys(self.asked)
        ]
        for result in subagents:
            why = self.models.get(result.model)
            if not result.ok and why is not None:
                found.append(f"sub-agent {result.agent_id} ({result.agent_type}) failed: {why}")
        return found


async def survey(
    reach: Reach,
    definitions: Sequence[AgentDefinition],
    settings: Settings,
    *,
    main_model: str | None,
    model_objects: dict[str, Model],
) -> list[str]:
    """Into ``reach``: the agents of ``definitions`` whose model cannot be reached, and
    why; returns its lines (one per model)."""
    aliases = settings.aliases
    names = [*(normalize_model(d.model) for d in definitions), *aliases]
    by_model: dict[str, list[str]] = {}
    fixes: dict[str, str] = {}
    for name in dict.fromkeys(names):
        if name == INHERIT:
            continue  # the main agent's model: checked on its own
        try:
            resolved = resolve_model_alias(
                name, parent_model=main_model or INHERIT, aliases=aliases
            )
        except ValueError:
            fixes[name] = (
                f"no model alias maps {name!r}: pass --model-alias {name}=PROVIDER:NAME"
                + (f" (e.g. {name}={main_model})" if main_model else "")
            )
            continue
        if resolved in model_objects:
            continue
        if (why := await _key_missing(resolved, settings)) is not None:
            reach.models[resolved] = why
            alias = (
                f" --model-alias {name}={main_model or 'PROVIDER:NAME'}" if name != resolved else ""
            )
            fixes[name] = f"{name} is {resolved}: {why}" + (f", or pass{alias}" if alias else "")
    for definition in definitions:
        name = normalize_model(definition.model)
        if name in fixes:
            by_model.setdefault(name, []).append(definition.name)
    for name, agents in by_model.items():
        said = f"left out of this run (model {name} cannot be reached): "
        named = ", ".join(agents[:NAMED_AGENTS])
        if len(agents) > NAMED_AGENTS:
            named += f" and {len(agents) - NAMED_AGENTS} more"
        reach.by_model[name] = f"{said}{named}; {fixes[name]}"
        for agent in agents:  # what a call naming it is told: of itself alone
            reach.left_out[agent] = f"{said}{agent}; {fixes[name]}"
    return reach.lines()


async def _key_missing(model: str, settings: Settings) -> str | None:
    """Why ``model``'s provider cannot be called for want of its key, or None."""
    provider = model.partition(":")[0]
    if provider not in _KEYED:
        return None
    try:
        built = resolve_model(model, settings.model_options.get(provider))
    except ModelError:
        return None  # another problem: a run that uses it says which
    try:
        check = getattr(built, "check_ready", None)
        if check is not None:
            check()
    except ModelError:
        key = getattr(built, "key_env", "its API key")
        return f"{key} is not set: export it"
    finally:
        await built.aclose()
    return None
