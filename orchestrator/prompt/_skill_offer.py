"""The skills of one sub-agent run: the preloaded ones (``skills:``), the ones its
``skill`` tool may load, the folders its sandbox lets it read and run, and the lines
its result carries (a skill not found, a skill folder refused)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from agentcell.orchestrator.definitions._model import AgentDefinition
from agentcell.orchestrator.definitions._skills import Skill, load_skills, skill_offer, with_skills


@dataclasses.dataclass(slots=True)
class RunSkills:
    preloaded: list[Skill]
    listing: str  # the available skills, by name and description ('' without the tool)
    index: dict[str, str]  # for the skill tool: name -> SKILL.md
    read_paths: list[str]  # skill folders: readable and runnable under the sandbox
    warnings: list[str]

    @property
    def disallowed_tools(self) -> list[str]:
        """What the preloaded skills take away (their ``disallowed-tools``): they are
        active for the whole run, so the run never has those tools."""
        return [tool for skill in self.preloaded for tool in skill.disallowed_tools]


def skills_for(definition: AgentDefinition, project_dir: Path) -> RunSkills:
    preloaded, missing = load_skills(definition.skills, project_dir)
    offer = skill_offer(
        preloaded,
        project_dir,
        tools=definition.tools,
        disallowed=definition.disallowed_tools,
    )
    return RunSkills(
        preloaded=preloaded,
        listing=offer.listing,
        index=offer.index,
        read_paths=offer.read_paths,
        warnings=[*missing, *offer.warnings],
    )


def skilled_prompt(system_prompt: str, skills: RunSkills) -> str:
    """The system prompt with the preloaded skills, then the listing of the others."""
    prompt = with_skills(system_prompt, skills.preloaded)
    return f"{prompt}\n\n{skills.listing}" if skills.listing else prompt
