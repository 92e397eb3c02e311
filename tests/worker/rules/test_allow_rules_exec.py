"""A wildcard allow rule never auto-allows a line that makes its program run another
program (issue 21, item 6). ``bash(git *)`` allowed ``git config alias.zz '!touch …' &&
git zz`` and ``git clone -u '<cmd>' …``: on the main agent, which has no OS sandbox, that
is code execution without approval.

The property test runs what a rule allows against a real git in a scratch repository,
with trap programs on PATH (and as the alias, upload-pack, fsmonitor, … targets) that
leave a marker: no marker may appear."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from agentcell.protocol import ToolCall
from agentcell.worker import Rule
from agentcell.worker.tools._bash import BashArgs
from hypothesis import given
from hypothesis import strategies as st

GIT = Rule.parse("bash(git *)")
GIT_BIN = shutil.which("git")
pytestmark = pytest.mark.skipif(GIT_BIN is None, reason="git is not installed")


def allowed(command: str, rule: Rule = GIT) -> bool:
    return rule.allows(ToolCall(id="c", name="bash", arguments="{}"), BashArgs(command=command))


# Each runs a program of the line's choosing ("evil", a trap) through git; {R} is a
# file:// URL of a repository, {X} a folder holding git-foo (a trap), hostile/ a
# repository whose config names the trap as its fsmonitor.
HOSTILE_GIT = [
    "git config alias.zz '!evil' && git zz",
    "git config --add alias.zz '!evil' && git zz",
    "git config ALIAS.zz '!evil' && git zz",
    "git config --global alias.zz '!evil' && git zz",
    "git config -f .git/config alias.zz '!evil' && git zz",
    "git config --file=.git/config alias.zz '!evil' && git zz",
    "git config include.path ../evil.cfg && git zz",
    "git config core.fsmonitor evil && git status",
    "git config core.fsmonitor evil && git add -A",
    "git config core.attributesFile attrs && git config filter.x.clean evil && git add -A",
    "git config filter.x.clean evil && git config core.attributesFile attrs && git add a.txt",
    "git config core.attributesFile attrs && git config diff.x.textconv evil && git log -p",
    "git config diff.external evil && git diff HEAD~1 --ext-diff",
    "git -c alias.zz='!evil' zz",
    "git -c core.fsmonitor=evil status",
    "git --config-env=core.fsmonitor=EVILCMD status",
    "git --exec-path={X} foo",
    "git --git-dir=hostile/.git --work-tree=hostile status",
    "git -C hostile status",
    "git clone -q -u evil {R} d1",
    "git clone -qu evil {R} d1",
    "git clone -uevil {R} d1",
    "git clone --upload-pack=evil {R} d1",
    "git clone --upload-pack evil {R} d1",
    "git clone --upl=evil {R} d1",
    "git clone -c core.fsmonitor=evil {R} d1 && cd d1 && git status",
    "git clone --config=alias.zz=!evil {R} d1 && cd d1 && git zz",
    "git clone --template=tmpl {R} d1",
    "git fetch --upload-pack=evil {R}",
    "git ls-remote --upload-pack=evil {R}",
    "git push --receive-pack=evil {R} HEAD:refs/heads/x",
    "git push --exec=evil {R} HEAD:refs/heads/x",
    "git archive --remote={R} --exec=evil HEAD",
    "git submodule foreach evil",
    "git bisect start HEAD HEAD~1 && git bisect run evil",
    "git rebase -x evil HEAD~1",
    "git rebase --exec=evil HEAD~1",
    "git rebase --exe evil HEAD~1",
    "git difftool -y -x evil HEAD~1",
    "git difftool -y --extcmd=evil HEAD~1",
    "git difftool -y HEAD~1",
    "git grep -Oevil a",
    "git grep --open-files-in-pager=evil a",
    "git commit -q -S -m signed --allow-empty",
    "git filter-branch -f --tree-filter evil HEAD",
]

#: Forms git itself rejects or that run nothing here, refused all the same.
REFUSED_GIT = [
    "git -calias.zz=!evil zz",
    "git --exec-path {X} foo",
    "git -Chostile status",
    "git ls-remote -u evil {R}",
    "git --exec-path",
    "git --work-tree=.. status",
    "git --namespace=x log",
    "git log --textconv -p",
    "git clone --recurse-submodules {R} d1",
    "git config --edit",
    "git config core.editor evil",
    "git config core.pager evil",
    "git config core.sshCommand evil",
    "git config core.hooksPath .husky",
    "git config pager.log evil",
    "git config sequence.editor evil",
    "git config gpg.program evil",
    "git config credential.helper evil",
    "git config remote.origin.uploadpack evil",
    "git config submodule.x.update '!evil'",
    "git config url.ext::evil.insteadOf https://",
    "git config protocol.ext.allow always",
    "git config init.templateDir tmpl",
    "git config merge.x.driver evil",
    "git config --rename-section alias x",
    "git mergetool",
    "git send-email x.patch",
    "git instaweb",
    "git verify-commit HEAD",
    "git log --show-signature",
    "git tag -s v1 -m x",
    "git clone --u=evil {R} d1",
    "git clone -q --upload=evil {R} d1",
    "git -ccore.fsmonitor=evil status",
    "git -c",
    "git submodule --quiet foreach evil",
    "git rebase -ix evil HEAD~1",
    "git config --add --global alias.zz '!evil'",
    "git config -- alias.zz '!evil'",
    "git config Include.Path ../evil.cfg",
    "git log '*.c' --show-signature",
    "git config --glo user.name x",
]

#: Other programs whose options run a command (each names the trap).
HOSTILE_OTHER = [
    "find . -name a.txt -exec evil {} ;",
    "find . -name a.txt -execdir evil ;",
    "find . -name a.txt -ok evil ;",
    "tar -cf out.tar --to-command=evil a.txt",
    "tar -c -f out.tar -I evil a.txt",
    "tar -cf out.tar --use-compress-program=evil a.txt",
    "tar -cf out.tar --checkpoint=1 --checkpoint-action=exec=evil a.txt",
    "tar cIf evil out.tar a.txt",
    "rsync -e evil a.txt host:x",
    "rsync -avzeevil a.txt b.txt",
    "rsync --rsync-path=evil a.txt b.txt",
    "ssh -oProxyCommand=evil host",
    "ssh -o ProxyCommand=evil host",
    "awk 'BEGIN { system(\"evil\") }'",
    "awk 'BEGIN { print | \"evil\" }'",
    "sed -n '1e evil' a.txt",
    "sed 's/a/evil/e' a.txt",
    "sed -e 's/x/y/w out' a.txt",
    "sed 'w out' a.txt",
    "sed 'p;e evil' a.txt",
    "sed 'p\ne evil' a.txt",
    "sed '/x/e evil' a.txt",
    "sed '/a/,/b/s/x/y/e' a.txt",
    "sed 's|a|b|e' a.txt",
    "sed -n -e p -e '1e evil' a.txt",
    "sed --expression='1e evil' a.txt",
    "sed -f script.sed a.txt",
    "sed -i.bak 's/a/b/e' a.txt",
    "sed s a.txt",
    "sed 's/a/b' a.txt",
    "sed '1{e evil' a.txt",
    "sed",
    "tar -cf out.tar -Ievil a.txt",
    "tar -cFevil -f out.tar a.txt",
    "rsync -a a.txt host:x",
    "scp a.txt host:x",
    "ssh -oProxyCommand=evil host",
    "awk -f prog.awk a.txt",
    "awk -fprog.awk a.txt",
    "gawk '@load \"x\"; BEGIN {}'",
    "awk 'BEGIN { \"evil\" | getline x }'",
    "find . -okdir evil ;",
    "rg --pre evil a",
]


@pytest.mark.parametrize("line", HOSTILE_GIT + REFUSED_GIT + HOSTILE_OTHER)
def test_a_line_that_runs_another_program_is_never_auto_allowed(line: str) -> None:
    program = line.split(maxsplit=1)[0]
    assert not allowed(line, Rule.parse(f"bash({program} *)")), line
    assert not allowed(line, Rule.parse("bash(*)")), line


@pytest.mark.parametrize(
    "line",
    [
        "git status",
        "git log --oneline -n 3",
        "git add -u",
        "git add -A && git commit -qm 'fix: thing' && git log --stat",
        "git config user.name 'A B'",
        "git config --get user.email",
        "git diff HEAD~1 --stat",
        "git clone -q file:///tmp/r d1",
        "git branch -d old",
        "find . -name '*.py' -type f",
        "tar -czf out.tgz src",
        "tar xzf out.tgz",
        "rsync -a src/ dst/",
        "awk '{print $1}' a.txt",
        "sed -n 1,10p a.txt",
        "sed 's/old/new/g' a.txt",
        "sed -n '/start/,/end/p' a.txt",
        "sed 's|a|b|g' a.txt",
        "sed 's//b/g' a.txt",
        "sed '//d' a.txt",
        "sed -i 's/old/new/2' a.txt",
        "sed '1,$d;y/abc/xyz/' a.txt",
        "sed 's/a/b/;s/c/d/' a.txt",
        "git --version",
        "git add core.py alias.txt",
        "git diff HEAD -- alias.py filter.c",
        "git checkout -",
        "git config -- user.name x",
        "git clone --quiet file:///tmp/repo cloned",
        "git clone -q file:///tmp/repo cloned",
        "git diff -- --config",
        "git log --oneline -- a.txt",
        "rg Foo src",
        "wc FILES.txt",
        "tar --exclude=Icon -cf a.tar src",
        "tar --checkpoint=10 -cf a.tar src",
        "find . -executable -type f",
        "rsync -av --delete src/ dst/",
        "scp -r a b",
        "awk -F, '{print $2}' a.csv",
        "ssh-keygen -l -f key.pub",
    ],
)
def test_plain_lines_of_those_programs_are_still_allowed(line: str) -> None:
    program = line.split(maxsplit=1)[0]
    assert allowed(line, Rule.parse(f"bash({program} *)")), line


# -- against a real git ----------------------------------------------------------------------

TRAPS = ("evil", "ssh", "gpg", "vi", "vim", "less", "more", "vimdiff", "meld", "opendiff")


def _git(cwd: Path, *args: str, env: dict[str, str]) -> None:
    subprocess.run([GIT_BIN or "git", *args], cwd=cwd, env=env, check=True, capture_output=True)


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A template: bin/ (traps), execdir/git-foo, remote.git, and work/ (a repository
    with two commits, an attributes file naming driver x, a template with a
    post-checkout hook, hostile/ whose config names the trap as fsmonitor)."""
    root = tmp_path_factory.mktemp("git-traps")
    for folder in ("bin", "execdir", "marks", "home"):
        (root / folder).mkdir()
    marks = root / "marks"
    for name in TRAPS:
        _trap(root / "bin" / name, marks)
    _trap(root / "execdir" / "git-foo", marks)
    env = _env(root)
    work = root / "work"
    work.mkdir()
    _git(work, "init", "-q", "-b", "main", env=env)
    (work / "a.txt").write_text("a\n")
    (work / "attrs").write_text("* filter=x diff=x\n")
    _git(work, "add", "a.txt", env=env)
    _git(work, "commit", "-qm", "one", env=env)
    (work / "a.txt").write_text("a\nb\n")
    _git(work, "commit", "-qam", "two", env=env)
    (work / "evil.cfg").write_text("[alias]\n\tzz = !evil\n")
    hooks = work / "tmpl" / "hooks"
    hooks.mkdir(parents=True)
    _trap(hooks / "post-checkout", marks)
    hostile = work / "hostile"
    hostile.mkdir()
    _git(hostile, "init", "-q", env=env)
    _git(hostile, "config", "core.fsmonitor", "evil", env=env)
    _git(root, "clone", "-q", "--bare", str(work), "remote.git", env=env)
    sub = ("-c", "protocol.file.allow=always", "submodule", "add", "-q")
    _git(work, *sub, f"file://{root / 'remote.git'}", "sub", env=env)
    _git(work, "commit", "-qm", "three", env=env)
    return root


def _trap(path: Path, marks: Path) -> None:
    path.write_text(f'#!/bin/sh\ntouch "{marks}/$(basename "$0")"\nexit 0\n')
    path.chmod(0o755)


def _env(root: Path) -> dict[str, str]:
    return {
        "PATH": f"{root / 'bin'}:/usr/local/bin:/usr/bin:/bin",
        "HOME": str(root / "home"),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.com",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.com",
        "EVILCMD": "evil",
        "LANG": "C",
        # filter-branch otherwise sleeps 10 s after its deprecation notice.
        "FILTER_BRANCH_SQUELCH_WARNING": "1",
    }


def run_line(scratch: Path, line: str, tmp: Path) -> list[str]:
    """Run ``line`` in a fresh copy of the scratch repository; the traps that ran."""
    if tmp.exists():
        shutil.rmtree(tmp)
    shutil.copytree(scratch, tmp, symlinks=True)
    for trap in [*TRAPS, "git-foo"]:  # the traps write into this copy's marks/
        folder = "execdir" if trap == "git-foo" else "bin"
        _trap(tmp / folder / trap, tmp / "marks")
    _trap(tmp / "work" / "tmpl" / "hooks" / "post-checkout", tmp / "marks")
    line = line.format(R=f"file://{tmp / 'remote.git'}", X=tmp / "execdir")
    subprocess.run(
        ["/bin/bash", "-c", line],
        cwd=tmp / "work",
        env=_env(tmp),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=60,
    )
    return sorted(p.name for p in (tmp / "marks").iterdir())


@pytest.mark.parametrize("line", HOSTILE_GIT)
def test_each_hostile_git_line_does_run_the_trap_when_run_unguarded(
    scratch: Path, tmp_path: Path, line: str
) -> None:
    """The oracle has teeth: every hostile line, run as it is, sets off a trap."""
    assert run_line(scratch, line, tmp_path / "copy") != [], line


BENIGN = [
    "git status",
    "git log --oneline",
    "git add -A",
    "git commit -qm msg --allow-empty",
    "git diff HEAD~1",
    "git branch b2",
    "git tag v1",
    "git config user.name x",
    "git stash list",
    "git show HEAD --stat",
]

pieces = st.sampled_from(HOSTILE_GIT + BENIGN)
git_lines = st.lists(pieces, min_size=1, max_size=3).map(" && ".join)


@given(line=git_lines)
def test_an_allowed_git_line_runs_no_program_but_git(
    scratch: Path, tmp_path_factory: pytest.TempPathFactory, line: str
) -> None:
    if not allowed(line.format(R="file:///r", X="/x")):
        return
    ran = run_line(scratch, line, tmp_path_factory.getbasetemp() / "allowed-copy")
    assert ran == [], (line, ran)


def test_the_property_test_does_run_allowed_lines(scratch: Path, tmp_path: Path) -> None:
    # Benign lines are allowed and run: the property is not vacuous.
    line = " && ".join(BENIGN)
    assert allowed(line)
    assert run_line(scratch, line, tmp_path / "copy") == []
    assert os.path.isdir(tmp_path / "copy" / "work" / ".git")
