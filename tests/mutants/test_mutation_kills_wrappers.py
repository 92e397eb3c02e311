"""The wrappers' readings at their edges (``make mutants MUTANTS=wrappers``): each case
is one a mutant of ``worker/rules/_wrappers.py`` survived in the rules' own tests."""

from __future__ import annotations

import pytest
from agentcell.worker.rules._wrappers import inner_commands, stripped


@pytest.mark.parametrize(
    ("words", "left"),
    [
        # ``--`` ends the options; the command after it is what runs.
        (["nohup", "--", "rm"], ["rm"]),
        # A lone "-" is no option: the wrapper runs it (a program named "-").
        (["nohup", "-", "x"], ["-", "x"]),
        # A wrapper with nothing to run is left as it is, not emptied.
        (["timeout"], ["timeout"]),
        (["timeout", "5"], ["timeout", "5"]),
        # A value glued on with "=" takes no word; one apart takes the next.
        (["timeout", "--signal=KILL", "5", "npm", "test"], ["npm", "test"]),
        (["timeout", "-s", "KILL", "5", "npm", "test"], ["npm", "test"]),
        (["stdbuf", "-o0", "npm", "test"], ["npm", "test"]),
        # nice's numeric form, one digit or more; no other wrapper has one.
        (["nice", "-5", "npm", "test"], ["npm", "test"]),
        (["nice", "-10", "npm", "test"], ["npm", "test"]),
        (["nohup", "-5", "npm", "test"], ["nohup", "-5", "npm", "test"]),
        (["command", "-v", "npm"], ["command", "-v", "npm"]),
        # A flag takes no word; an option a wrapper does not have leaves the line as it is.
        (["timeout", "--foreground", "5", "npm", "test"], ["npm", "test"]),
        (["time", "-p", "npm", "test"], ["npm", "test"]),
        (["nohup", "--", "-x"], ["-x"]),
        (["nohup", "-+x", "rm"], ["nohup", "-+x", "rm"]),
        (["nohup", "-xyz", "rm"], ["nohup", "-xyz", "rm"]),
    ],
)
def test_stripped_at_the_edges(words: list[str], left: list[str]) -> None:
    assert stripped(words) == left


def test_inner_commands_at_the_edges() -> None:
    assert inner_commands([]) == [[]]
    # Only a program that runs another one is looked into.
    assert inner_commands(["echo", "rm", "x"]) == [["echo", "rm", "x"]]
    # Each later word that is no option starts a command, the words after it its own.
    assert inner_commands(["nohup", "rm", "-rf", "x"]) == [
        ["nohup", "rm", "-rf", "x"],
        ["rm", "-rf", "x"],
        ["x"],
    ]
    assert inner_commands(["/usr/bin/env", "A=1", "/bin/rm", "y"]) == [
        ["/usr/bin/env", "A=1", "/bin/rm", "y"],
        ["rm", "y"],
        ["y"],
    ]
