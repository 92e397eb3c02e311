"""Definitions given on the command line (``--agents '<json>'``) for one run.

The shape is the Claude Agent SDK's ``agents`` option: an object from agent name to an
``AgentDefinition`` (``description``, ``prompt``, ``tools``, ``model``, and any other
frontmatter key in either spelling)::

    {"reviewer": {"description": "Reviews diffs", "prompt": "You review...",
                  "tools": ["Read", "Grep"], "model": "sonnet"}}
"""

from __future__ import annotations

import json
import logging
from typing import Any

from agentcell.orchestrator.definitions._claude_compat import claude_notes
from agentcell.orchestrator.definitions._loader import field_for_key
from agentcell.orchestrator.definitions._model import AgentDefinition, validation_messages
from pydantic import ValidationError

SOURCE = "--agents"
log = logging.getLogger("agentcell.definitions")


def definitions_from_json(text: str) -> list[AgentDefinition]:
    """Every definition ``text`` names; ``ValueError`` with one line per problem."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"{SOURCE}: not valid JSON ({exc}): give an object of agents") from None
    if not isinstance(data, dict) or not data:
        raise ValueError(
            f"{SOURCE}: give a JSON object from agent name to definition, e.g. "
            f'\'{{"reviewer": {{"description": "...", "prompt": "..."}}}}\''
        )
    definitions, problems = [], []
    for name, spec in data.items():
        if not isinstance(spec, dict):
            problems.append(f"{SOURCE} {name}: a definition is an object, got {spec!r}")
            continue
        values: dict[str, Any] = {"name": name, "source": SOURCE}
        extra: dict[str, Any] = {}
        spelled: dict[str, str] = {}
        for key, value in spec.items():
            field = "system_prompt" if key == "prompt" else field_for_key(key)
            if field is None or field == "name":
                extra[key] = value
                continue
            values[field] = value
            spelled[field] = key
        values["extra"] = extra
        try:
            definitions.append(AgentDefinition(**values))
        except ValidationError as exc:
            problems += [f"{SOURCE} {name}: {m}" for m in validation_messages(exc, keys=spelled)]
            continue
        for _field, note in claude_notes(values, spelled):  # Claude Code values approximated
            log.warning("%s %s: %s", SOURCE, name, note)
    if problems:
        raise ValueError("\n".join(problems))
    return definitions
