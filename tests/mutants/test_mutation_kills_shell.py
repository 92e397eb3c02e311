"""Tests that kill the mutants of worker/rules/_shell.py that the rest of its test selection
lets live (issue 21, item 9): the longest line parsed, loops, every redirection of a line,
and lines a rule with a wildcard program would match (``bash(* --help)``), where the
wrapper, shell and path checks are all that stands between the rule and another program.
In-process and fast: ``make mutants`` runs them first for each of the module's mutants."""

from __future__ import annotations

import pytest
from agentcell.protocol import ToolCall
from agentcell.worker import Rule
from agentcell.worker.tools._bash import BashArgs

#: The longest line parsed (``_shell.MAX_LINE``, written out: a mutant changes the name's value).
LONGEST = 8192


def allowed(command: str, rule: str = "bash(git *)") -> bool:
    call = ToolCall(id="c", name="bash", arguments="{}")
    return Rule.parse(rule).allows(call, BashArgs(command=command))


def test_a_line_of_the_longest_length_is_parsed_and_one_more_asks() -> None:
    head = "git log "
    assert allowed(head + "a" * (LONGEST - len(head)))
    assert not allowed(head + "a" * (LONGEST - len(head) + 1))
    assert not allowed(head + "a" * (LONGEST - len(head) + 2))


@pytest.mark.parametrize(
    "line", ["while true; do git status; done", "until git status; do git log; done"]
)
def test_a_loop_is_never_allowed(line: str) -> None:
    assert not allowed(line)


@pytest.mark.parametrize(
    "line",
    [
        "git log > $HOME/.bashrc",  # a target that expands: where it goes is not in the line
        "git log > $X",
        "git log > ok 2> /etc/cron.d/x",  # every redirection is checked, not the first only
        "git log 2>&1 > /tmp/x",
        "git log > ok status > ../x",
    ],
)
def test_each_redirection_of_a_line_stays_in_the_workdir(line: str) -> None:
    assert not allowed(line)


@pytest.mark.parametrize(
    "line",
    [
        "env rm -rf x --help",
        "ionice rm -rf x --help",
        "xargs rm -rf --help",
        "sudo rm -rf x --help",
        "sh -c 'rm -rf x' --help",
        "bash -c 'rm -rf x' --help",
        "./evil --help",
        "PATH=. evil --help",
    ],
)
def test_a_wildcard_program_rule_never_allows_a_wrapper_a_shell_or_a_path(line: str) -> None:
    assert not allowed(line, "bash(* --help)")


def test_a_wildcard_program_rule_still_allows_a_plain_program() -> None:
    assert allowed("rm --help", "bash(* --help)")
    assert allowed("(git --help) > out.txt 2>&1", "bash(* --help)")
