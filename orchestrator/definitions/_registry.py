"""The agents a main agent can delegate to: the built-ins, then definition files.

Sources, in increasing precedence (a later one overrides an agent of the same name):

1. the built-ins: general-purpose, Explore, Plan
2. ~/.claude/agents/          5. <project>/.harness9/agents/
3. ~/.agentcell/agents/       6. <project>/.agentcell/agents/
4. <project>/.claude/agents/  7. each extra --agents-dir, in the order given

A missing standard folder is silent; a missing --agents-dir is a warning (someone typed it).
Every override is reported by ``agents validate`` (not by each run: a collection copied
whole overrides dozens), so nobody wonders which `code-reviewer` runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from agentcell.orchestrator.definitions._loader import (
    Diagnostic,
    LoadResult,
    load_agent_file,
    load_agents_dir,
)
from agentcell.orchestrator.definitions._model import AgentDefinition, agent_slug
from agentcell.orchestrator.definitions._tool_policy import READ_ONLY_TOOLS

_GENERAL_PURPOSE = """\
You are a general-purpose agent that another agent has delegated a task to. Work on the
task on your own from start to finish: research, read and change files, and run commands
as the task needs, using your tools. Search broadly when you do not know where something
is, and check your work before you finish.

Only your final message goes back to the agent that called you; it does not see your
tool calls or their output. So finish with a concise report: what you did, what you
found, the files you changed (with paths), and anything left undone or uncertain."""

_EXPLORE = """\
You are a fast, read-only codebase explorer. Find what the caller asks for: files,
definitions, call sites, conventions, how something works. You can read files, glob and
grep; you cannot change anything. Be quick: start broad (glob, grep), then read only the
parts that matter, and run independent searches together.

Only your final message goes back to the caller. Answer with the facts it needs: exact
file paths with line numbers, short relevant excerpts, and a direct answer to the
question. Say plainly what you could not find."""

_PLAN = """\
You are a software architect who plans, read-only. Study the relevant code (read, glob,
grep; you cannot change anything) and design how to carry out the caller's task: follow
the existing patterns, and weigh the trade-offs where there is a real choice.

Only your final message goes back to the caller. Give a step-by-step implementation plan:
the files to change or create (exact paths), what changes in each and why, the order of
the steps, the risks and edge cases, and how to test the result."""

BUILTIN_AGENTS: tuple[AgentDefinition, ...] = (
    AgentDefinition(
        name="general-purpose",
        description=(
            "General-purpose agent for researching complex questions and carrying out "
            "multi-step tasks on its own. Has all of the caller's tools."
        ),
        system_prompt=_GENERAL_PURPOSE,
        tools=None,
        source="builtin",
    ),
    AgentDefinition(
        name="Explore",
        description=(
            "Fast read-only agent for exploring a codebase: find files, search code, answer "
            "questions about how it works. Cannot change files."
        ),
        system_prompt=_EXPLORE,
        tools=list(READ_ONLY_TOOLS),
        source="builtin",
    ),
    AgentDefinition(
        name="Plan",
        description=(
            "Read-only software architect: studies the code and returns a step-by-step "
            "implementation plan with the files to change, risks and tests."
        ),
        system_prompt=_PLAN,
        tools=list(READ_ONLY_TOOLS),
        source="builtin",
    ),
)


def agent_dirs(
    project_dir: Path, *, home: Path | None = None, extra_dirs: Sequence[Path] = ()
) -> list[Path]:
    """The definition folders, lowest precedence first."""
    home = Path.home() if home is None else home
    return [
        home / ".claude" / "agents",
        home / ".agentcell" / "agents",
        project_dir / ".claude" / "agents",
        project_dir / ".harness9" / "agents",
        project_dir / ".agentcell" / "agents",
        *extra_dirs,
    ]


class AgentRegistry:
    """Agent definitions by name; later additions override earlier ones (reported)."""

    def __init__(self) -> None:
        self._agents: dict[str, AgentDefinition] = {}
        self._builtin_names: list[str] = []
        self.diagnostics: list[Diagnostic] = []
        #: ``.md`` files read that have no frontmatter (not agent files), in load order.
        self.no_frontmatter: list[str] = []
        #: Every definition read from a file, in load order, overridden ones included.
        self.loaded: list[AgentDefinition] = []

    @classmethod
    def builtin(cls) -> AgentRegistry:
        """Only the built-in agents."""
        registry = cls()
        for definition in BUILTIN_AGENTS:
            registry._agents[definition.name] = definition
        registry._builtin_names = [d.name for d in BUILTIN_AGENTS]
        return registry

    @classmethod
    def load(
        cls,
        project_dir: Path,
        *,
        home: Path | None = None,
        extra_dirs: Sequence[Path] = (),
    ) -> AgentRegistry:
        """The built-ins, then every source folder in precedence order (see module doc)."""
        registry = cls.builtin()
        standard = [(folder, False) for folder in agent_dirs(project_dir, home=home)]
        done: set[Path] = set()
        home_folders = {folder for folder, _ in standard[:2]}  # the user's own
        for folder, explicit in [*standard, *((Path(d), True) for d in extra_dirs)]:
            # Run from ~ and the project's folders are the home ones: read each folder once.
            if folder.resolve() in done:
                continue
            done.add(folder.resolve())
            if not folder.is_dir():
                if explicit:
                    registry.diagnostics.append(
                        Diagnostic(
                            "warning",
                            str(folder),
                            "agents folder not found: check the --agents-dir path",
                            at_run=True,
                        )
                    )
                continue
            # A project's folders are read beneath the project: no link out of it.
            inside = folder.is_relative_to(project_dir) and folder not in home_folders
            registry._absorb(load_agents_dir(folder, root=project_dir if inside else None))
        return registry

    @classmethod
    def from_paths(cls, paths: Sequence[Path]) -> AgentRegistry:
        """The built-ins, then each file or folder in `paths`, in the order given (what
        ``agents validate PATH...`` checks); a missing path is an error diagnostic."""
        registry = cls.builtin()
        for path in paths:
            if path.is_dir():
                registry._absorb(load_agents_dir(path))
            elif path.exists():
                registry._absorb(load_agent_file(path))
            else:
                registry.diagnostics.append(
                    Diagnostic("error", str(path), "no such file or folder: check the path")
                )
        return registry

    def _absorb(self, loaded: LoadResult) -> None:
        """One source's definitions (a later one of a name overrides an earlier one)."""
        self.diagnostics.extend(loaded.diagnostics)
        self.no_frontmatter.extend(loaded.no_frontmatter)
        self.loaded.extend(loaded.definitions)
        seen_here: set[str] = set()
        for definition in loaded.definitions:
            self._put(definition, same_source=definition.name in seen_here)
            seen_here.add(definition.name)

    def add(self, definition: AgentDefinition) -> None:
        """Add an agent (e.g. one built in code); one of the same name is overridden."""
        self._put(definition, same_source=False)

    def _put(self, definition: AgentDefinition, *, same_source: bool) -> None:
        previous = self._agents.get(definition.name)
        if previous is not None:
            # Within one folder a duplicate is likely a mistake; across sources it is the
            # documented way to customise an agent.
            rule = " (same folder: the later path in sorted order wins)" if same_source else ""
            self.diagnostics.append(
                Diagnostic(
                    "warning" if same_source else "info",
                    definition.source,
                    f"agent {definition.name!r} from {definition.source} overrides the one "
                    f"from {previous.source}{rule}",
                )
            )
        else:
            key = agent_slug(definition.name)
            twins = [d for name, d in self._agents.items() if agent_slug(name) == key]
            for twin in twins:
                self.diagnostics.append(
                    Diagnostic(
                        "warning",
                        definition.source,
                        f"agent {definition.name!r} from {definition.source} and "
                        f"{twin.name!r} from {twin.source} differ only in case or "
                        "separators: only their exact names tell them apart; rename one",
                    )
                )
        self._agents[definition.name] = definition

    def get(self, name: str) -> AgentDefinition | None:
        """The agent called `name`; failing an exact match, the one whose name matches
        ignoring case and separators (`explore` finds `Explore`, "Python DevOps/CI-CD
        Expert" finds `python-devops-ci-cd-expert`) when only one does."""
        found = self._agents.get(name)
        if found is not None:
            return found
        key = agent_slug(name)
        folded = [d for known, d in self._agents.items() if key and agent_slug(known) == key]
        return folded[0] if len(folded) == 1 else None

    def names(self) -> list[str]:
        return [d.name for d in self.definitions()]

    def definitions(self) -> list[AgentDefinition]:
        """Built-in names first (whoever defines them now), then the rest by name."""
        first = [self._agents[name] for name in self._builtin_names if name in self._agents]
        rest = sorted(
            (d for name, d in self._agents.items() if name not in self._builtin_names),
            key=lambda d: (d.name.casefold(), d.name),
        )
        return [*first, *rest]

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.get(name) is not None

    def __len__(self) -> int:
        return len(self._agents)
