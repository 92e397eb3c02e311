"""Claude Code's permission modes, as agentcell runs them: the same mode, or the nearest
one that is never looser, with the line that says so. Agent files' ``permissionMode`` and
settings files' ``defaultMode`` both read it, so one written for Claude Code never fails
to load, nor runs looser than its author meant.
"""

from __future__ import annotations

# Claude Code's permission modes agentcell has no mode of, by their folded spelling:
# (the agentcell mode to run in, why it is that one; '' when it is the same mode).
_MODE_STAND_INS: dict[str, tuple[str, str]] = {
    # Claude Code's own alias for default (permission-modes.md): exact, nothing to say.
    "manual": ("default", ""),
    # auto runs everything past a classifier agentcell does not have; default asks
    # instead, so nothing runs that a person has not approved.
    "auto": (
        "default",
        "Claude Code's auto mode (a classifier approves actions) is not available in "
        "agentcell: the agent runs in default mode, where changes ask for approval",
    ),
    # dontAsk denies whatever would be asked. agentcell has no deny-instead-of-ask mode,
    # and default would ask a person instead of denying; plan denies every change (even
    # what allow rules permit): stricter, never looser.
    "dontask": (
        "plan",
        "agentcell has no mode that denies instead of asking (Claude Code's dontAsk): "
        "the agent runs in plan mode, where every change is denied, even one allow rules "
        "permit; write permissionMode: default to be asked instead",
    ),
}


def _folded(value: str) -> str:
    return value.strip().lower().replace("-", "").replace("_", "")


def claude_mode_stand_in(value: object) -> tuple[object, str]:
    """The permission mode to validate for Claude Code's ``value`` (an agent file's
    ``permissionMode``, a settings file's ``defaultMode``), and the line saying what was
    approximated ('' when nothing was). Anything not Claude Code's is returned as given."""
    if not isinstance(value, str):
        return value, ""
    return _MODE_STAND_INS.get(_folded(value), (value, ""))
