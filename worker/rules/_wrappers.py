"""Wrappers that run their argument as the command: what a bash rule is matched against.

Claude Code strips a fixed set before matching a ``Bash(...)`` rule (its permissions
page, "Wrappers"): ``timeout``, ``time``, ``nice``, ``nohup``, ``stdbuf``, ``command``,
``builtin``, ``noglob`` (with their own options), and a bare ``xargs``; ``command -v`` /
``command -V`` look a name up and are left as they are. So ``Bash(npm test *)`` also
covers ``timeout 30 npm test``, and a deny rule ``Bash(rm *)`` must catch
``nohup rm -rf build``.

Two readings, one per kind of rule:

* allow rules (``stripped``): exactly the wrappers and option forms above; anything else
  stays as written and is not proved plain. Bare ``xargs`` is not stripped there, on
  purpose: it appends words read from stdin (``-c core.pager=…`` to a ``git``), so a rule
  could not know what the line runs (narrower than Claude Code, which is safe for allow).
* deny and ask rules (``inner_commands``): generous. After any program that runs another
  one (the allow side's list, ``xargs`` with flags, ``sudo``, ``env``, ``watch``, …) every
  later word that is not an option is tried as the start of the command, so
  ``xargs -n1 rm`` and ``sudo -u x rm`` are caught without knowing each option's arity.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True, slots=True)
class _Wrapper:
    flags: frozenset[str] = frozenset()  # options without a value
    valued: frozenset[str] = frozenset()  # options that take one (``-s KILL``, ``-o0``)
    operands: int = 0  # words before the command (``timeout``'s duration)
    numeric_flag: bool = False  # ``nice -10``


#: What Claude Code strips, with the options each one takes (GNU coreutils, bash).
STRIPPED: dict[str, _Wrapper] = {
    "timeout": _Wrapper(
        flags=frozenset({"--preserve-status", "--foreground", "-v", "--verbose"}),
        valued=frozenset({"-s", "--signal", "-k", "--kill-after"}),
        operands=1,
    ),
    "time": _Wrapper(flags=frozenset({"-p"})),
    "nice": _Wrapper(valued=frozenset({"-n", "--adjustment"}), numeric_flag=True),
    "nohup": _Wrapper(),
    "stdbuf": _Wrapper(valued=frozenset({"-i", "-o", "-e", "--input", "--output", "--error"})),
    "command": _Wrapper(flags=frozenset({"-p"})),
    "builtin": _Wrapper(),
    "noglob": _Wrapper(),
}
#: Programs that run a command named in their arguments, for deny and ask rules.
RUNS_ITS_ARGUMENTS = frozenset(STRIPPED) | {
    "xargs", "sudo", "doas", "env", "exec", "watch", "setsid", "flock", "ionice", "taskset",
    "chroot", "nsenter", "unshare", "strace", "unbuffer", "parallel", "busybox", "su",
}  # fmt: skip


def stripped(words: list[str], *, keep: frozenset[str] = frozenset()) -> list[str]:
    """``words`` with every leading wrapper Claude Code strips taken off (nested ones
    too). A wrapper whose options are not the documented ones, a ``command -v`` lookup,
    or one named in ``keep``, stays: the words are then returned from it on."""
    while words and words[0] not in keep:
        inner = _strip_one(words)
        if inner is None:
            break
        words = inner
    return words


def _strip_one(words: list[str]) -> list[str] | None:
    """The command one wrapper runs, or None when ``words`` is not a stripped wrapper."""
    spec = STRIPPED.get(words[0])
    if spec is None:
        return None
    rest = words[1:]
    while rest and rest[0].startswith("-") and rest[0] != "-":
        option = rest.pop(0)
        if option == "--":
            break
        taken = _option_words(option, spec)
        if taken is None:
            return None  # an option we do not know (``command -v``): not a wrapper here
        if taken:
            if not rest:
                return None
            rest.pop(0)
    if len(rest) <= spec.operands:
        return None  # nothing left to run
    return rest[spec.operands :]


def _option_words(option: str, spec: _Wrapper) -> int | None:
    """How many more words ``option`` takes (0 or 1), or None if it is not one of the
    wrapper's options."""
    name = option.split("=", 1)[0]
    if option in spec.flags:
        return 0
    if name in spec.valued:
        return 0 if "=" in option else 1
    if option[:2] in spec.valued and len(option) > 2 and not option.startswith("--"):
        return 0  # a value glued on: ``-o0``, ``-sKILL``
    if spec.numeric_flag and option[1:].isdigit():
        return 0
    return None


#: The words of a line that runs another program past which its pieces are not listed:
#: every later word starts one, so they cost the square of the count (a 16 MiB
#: ``env a a a …`` line would hold a process for minutes). Such a line is judged whole.
MAX_WRAPPED_WORDS = 1024


def too_long_to_unwrap(words: list[str]) -> bool:
    """A line that runs another program through more than ``MAX_WRAPPED_WORDS`` words."""
    return len(words) > MAX_WRAPPED_WORDS and _program(words[0]) in RUNS_ITS_ARGUMENTS


def inner_commands(words: list[str]) -> list[list[str]]:
    """For deny and ask rules: every command a line may run through its wrappers, the
    line itself first. Over-approximates (``timeout 5 foo rm`` yields ``rm`` too)."""
    found = [words]
    if not words or _program(words[0]) not in RUNS_ITS_ARGUMENTS:
        return found
    for start in range(1, len(words)):
        word = words[start]
        if not word.startswith("-") and "=" not in word:
            found.append([_program(word), *words[start + 1 :]])
    return found


def _program(word: str) -> str:
    """``/usr/bin/rm`` → ``rm``: rules name programs, lines may name them by path."""
    return word.rsplit("/", 1)[-1]
