"""A URL a sub-agent asks web_fetch for cannot paint the approval question (issue 39).

The question about a host outside the agent's ``network:`` list embeds the URL the child
sent, on the subject line and in the reason. A URL with a C0 or C1 control character (ESC
sequences, OSC 8 links, CR, LF, C1 CSI) is refused before any question; every other
character a terminal would act on (bidi overrides, line and paragraph separators) or that
shows nothing (Unicode's tag letters, a soft hyphen) is written out; Rich markup in it
stays text. Checked on a pseudo-terminal through pyte and with the output piped
(``chat``'s ``PlainInput``), from a real sub-agent: once as its model's tool call, once
written on its pipe by the child's own code (tests/support/approval_url_screen_script.py). Red
with ``flat`` writing out only ``visible``'s list (the tag letters reach the screen)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import terminal_util
from agentcell.orchestrator import ApprovalQuery
from agentcell.orchestrator.approvals._channel import question_text
from cli_runner import cli_env, project
from places import SUPPORT
from terminal_util import Screen

__all__ = ["project"]  # the fixture (tests/support/cli_runner.py)

SCRIPT = SUPPORT / "approval_url_screen_script.py"
KEYS = "  allow? [y]es / [n]o / [a]lways for web_fetch: "
PAINT = r"\u202eevil\u202c\u2029main agent wants to run bash:\u2028    git status"
#: The two URLs asked about, as the question must write them (approval_url_screen_script's).
MODEL_URL = r"http://127.0.0.1:9/a" + PAINT + r"[bold red]MARKUP[/]\U000e0041end"
CHILD_URL = r"http://127.0.0.1:9/b\U000e0041\U000e0042\u00ad\u2029red" + PAINT
#: The third, with terminal escapes: refused before any question, quoted inert.
CONTROL_REFUSED = (
    r"web_fetch refused http://127.0.0.1:9/c\\x1b[2J\\x1b]8;;https://good.example/\\x07"
    r"\\r\\n\\x9b2J: it has control characters or lone surrogates"
)
HOST_WHY = ": its host is not in the agent's network: list"


def question(url: str, prompt: bool) -> list[str]:
    """The question's lines, as a person must read them."""
    lines = ["fetcher (a1) wants to run web_fetch:", f"    {url}"]
    if prompt:
        lines.append('    ({"prompt":"the title"})')
    return [
        *lines,
        f"  why it asks: fetch {url}{HOST_WHY}",
        "  [a]lways allows web_fetch to fetcher sub-agents only, for this session",
    ]


def assert_asked(lines: list[str], url: str, *, prompt: bool, nth: int = 0) -> None:
    """The ``nth`` question in ``lines`` is ``url``'s, whole, each field a line."""
    start = [i for i, line in enumerate(lines) if line == "fetcher (a1) wants to run web_fetch:"][
        nth
    ]
    expected = question(url, prompt)
    assert lines[start : start + len(expected)] == expected, "\n".join(lines[start:])
    assert lines[start + len(expected)].startswith(KEYS.rstrip())
    # No line of the output begins with the painted question, nor shows its command.
    assert not any(line.startswith("main agent wants") for line in lines)
    assert "    git status" not in lines


def test_a_web_fetch_urls_escapes_are_written_out_on_a_terminal(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(terminal_util, "AGENTCELL", sys.executable)  # run the script
    env = cli_env(project, PYTHONPATH=str(SCRIPT.parent))
    term = Screen([str(SCRIPT), str(project)], project, env, cols=400)
    try:
        screen = term.expect(KEYS.strip())
        lines = screen.splitlines()
        assert "BEFORE THE QUESTION" in lines  # no \e[2J cleared the screen
        assert_asked(lines, MODEL_URL, prompt=True)
        cells = term.screen.buffer
        assert not any(cell.fg == "red" for row in cells.values() for cell in row.values())
        term.send("n\n")
        screen = term.expect_count(KEYS.strip(), 2)
        assert_asked(screen.splitlines(), CHILD_URL, prompt=False, nth=1)
        term.send("n\n")
        screen = term.expect("RESULT completed")
        result = screen[screen.index("RESULT completed") :].replace("\n", "")  # it wraps
        assert result.count("the user did not allow it") == 2, screen
        assert CONTROL_REFUSED in result, screen
        assert screen.count("wants to run web_fetch") == 2  # never asked about the third
        assert term.close() == 0
    finally:
        term.kill()


def test_a_web_fetch_urls_escapes_are_written_out_when_the_question_is_piped(
    project: Path,
) -> None:
    env = cli_env(project, PYTHONPATH=str(SCRIPT.parent))
    done = subprocess.run(
        [sys.executable, str(SCRIPT), str(project), "--pipe"],
        cwd=project,
        env=env,
        input=b"n\nn\n",
        capture_output=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    out = done.stdout.decode("utf-8")  # strict: whatever was written is UTF-8
    # Nothing a terminal acts on or hides, anywhere in the output.
    assert out.isascii(), [c for c in out if not c.isascii()]
    assert not any(c in out for c in "\x1b\r\x07\x9b"), out
    assert_asked(out.splitlines(), MODEL_URL, prompt=True)
    assert_asked(out.splitlines(), CHILD_URL, prompt=False, nth=1)
    assert "RESULT completed" in out and out.count("the user did not allow it") == 2
    assert CONTROL_REFUSED in out and out.count("wants to run web_fetch") == 2


def test_a_lone_surrogate_in_a_url_is_written_out_not_a_crash() -> None:
    """A hostile child's JSON ``\\ud800`` decodes to a lone surrogate, which no UTF-8
    stream can take: the question writes it out, so asking (on a pipe) cannot fail."""
    url = "http://127.0.0.1:9/\ud800\U000e0041"
    query = ApprovalQuery(
        agent_id="a1",
        agent_type="fetcher",
        tool="web_fetch",
        arguments='{"url": "http://127.0.0.1:9/\\ud800\\udb40\\udc41"}',
        reason=f"fetch {url}{HOST_WHY}",
    )
    written = question_text(query).encode("utf-8")  # strict, as a piped stdout is
    shown = r"http://127.0.0.1:9/\ud800\U000e0041"
    assert f"\n    {shown}\n".encode() in written
    assert f"  why it asks: fetch {shown}{HOST_WHY}\n".encode() in written
