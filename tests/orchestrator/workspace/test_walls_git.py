"""git run by the parent never runs what an agent, or a repository, planted.

The parent runs git unsandboxed, as the user, on trees a sub-agent wrote. Each attack here
plants a program where git would run it (a hook, ``core.fsmonitor``, a filter or diff
driver named in ``.gitattributes``, a pager, an editor, a transport's helper), each trap
writing a marker into the test's own folder, outside every workdir: none may appear.
The end-to-end attacks run from a real ``isolation: worktree`` sub-agent's bash; the
table runs each trap on a hostile folder against the git runner directly, and runs it
with plain git too (as the parent ran git before), so every trap is shown to be live.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pty
import shutil
import subprocess
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from agentcell.orchestrator import AgentDefinition, Orchestrator, Settings
from agentcell.orchestrator.workspace._safe_git import SafeGit, discover
from agentcell.orchestrator.workspace._worktree import (
    WorktreeError,
    create_worktree,
    finish_worktree,
)
from agentcell.protocol import RunStatus
from conftest import SpawnRecorder
from model_servers import Call, ModelServer, Reply

# -- hostile folders -----------------------------------------------------------------------


@pytest.fixture(autouse=True)
def own_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A home of the test's own: its ~/.gitconfig is the user's global config here."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    for name in [k for k in os.environ if k.startswith("GIT_")]:
        monkeypatch.delenv(name)
    git(home, "config", "--global", "user.name", "t")
    git(home, "config", "--global", "user.email", "t@t")
    git(home, "config", "--global", "init.defaultBranch", "main")
    return home


@pytest.fixture
def markers(tmp_path: Path) -> Path:
    folder = tmp_path / "markers"
    folder.mkdir()
    return folder


def git(cwd: Path, *args: str, check: bool = True) -> str:
    """Plain git, as a person (or the parent, before) runs it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env["GIT_TERMINAL_PROMPT"] = "0"
    done = subprocess.run(
        ["git", *args], cwd=cwd, env=env, capture_output=True, text=True, check=False
    )
    if check and done.returncode != 0:
        raise AssertionError(f"git {' '.join(args)}: {done.stdout}{done.stderr}")
    return done.stdout.strip()


def git_repo(path: Path) -> Path:
    path.mkdir(parents=True)
    git(path, "init", "-q")
    (path / "README.md").write_text("hello\n")
    git(path, "add", ".")
    git(path, "commit", "-qm", "init")
    return path


def trap(markers: Path, name: str, then: str = "cat") -> str:
    """A shell command for git config: leaves ``markers/name``, then does ``then``."""
    return f"touch {markers}/{name}; {then}"


def hook(folder: Path, name: str, markers: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / name
    script.write_text(f"#!/bin/sh\ntouch {markers}/{name}\nexit 0\n")
    script.chmod(0o755)


def left(markers: Path) -> list[str]:
    return sorted(p.name for p in markers.iterdir())


# -- end to end: a real worktree sub-agent ------------------------------------------------


@pytest.fixture
def served(model_server: ModelServer, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModelServer]:
    monkeypatch.setenv("OPENAI_BASE_URL", model_server.openai_base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-walls-git-key")
    yield model_server


def bash_then_answer(command: str) -> Any:
    """A responder: one bash call, then its output as the answer."""

    def respond(body: dict[str, Any], api: str) -> Reply:
        outputs = [m["content"] for m in body["messages"] if m["role"] == "tool"]
        if not outputs:
            return Reply(tool_calls=[Call("bash", {"command": command, "timeout_s": 30})])
        return Reply(text=outputs[0])

    return respond


async def delegate_in_worktree(repo: Path, run_dir: Path, sandbox: str = "workspace") -> Any:
    """``sandbox="off"`` takes away the first wall (the mount namespace that keeps a
    worktree's ``.git`` read-only to bash, ``test_walls_paths.py``) to test the second:
    the parent's own git, which must run nothing an agent planted even then."""
    worker = AgentDefinition(
        name="worker",
        description="worker",
        tools=["bash"],
        model="openai:test",
        source="test",
        isolation="worktree",
    )
    orch = Orchestrator(
        settings=Settings(
            model="openai:test", approval="allow", max_workers=2, warm_spares=0, sandbox=sandbox
        ),
        workdir=repo,
        agents=[worker],
        load_agent_files=False,
        run_dir=run_dir,
    )
    async with orch:
        return await asyncio.wait_for(orch.delegate("worker", "go"), 90)


def assert_handed_back(repo: Path, result: Any, files: dict[str, str]) -> None:
    assert result.status is RunStatus.COMPLETED, result
    assert result.branch and result.commit == git(repo, "rev-parse", result.branch)
    assert git(repo, "rev-parse", f"{result.branch}~1") == git(repo, "rev-parse", "main")
    for name, text in files.items():
        assert git(repo, "show", f"{result.branch}:{name}") == text
    tree = Path(result.worktree)
    assert (tree / ".git").is_file()
    assert (tree / ".git").read_text().startswith("gitdir: ")


async def test_a_worktree_agent_that_replaced_its_git_runs_nothing_in_the_parent(
    spawned: SpawnRecorder, tmp_path: Path, served: ModelServer, markers: Path
) -> None:
    # The attack of issue 21: the agent's .git becomes a repository of its own whose config
    # names an fsmonitor and a filter driver (used by .gitattributes) and has a post-commit
    # hook. The parent used to run all three, as the user, and say `completed`.
    repo = git_repo(tmp_path / "repo")
    served.responder = bash_then_answer(
        "set -e; rm .git; git init -q .; "
        f"git config core.fsmonitor '{trap(markers, 'fsmonitor', 'false')}'; "
        f"git config filter.x.clean '{trap(markers, 'filter-clean')}'; "
        f"git config filter.x.smudge '{trap(markers, 'filter-smudge')}'; "
        f"printf '#!/bin/sh\\ntouch {markers}/post-commit\\n' > .git/hooks/post-commit; "
        "chmod +x .git/hooks/post-commit; "
        "echo '* filter=x' > .gitattributes; echo 'made by the agent' > new.txt; echo planted"
    )
    result = await delegate_in_worktree(repo, tmp_path / "run", sandbox="off")
    assert result.text == "planted", result.text
    assert left(markers) == []
    assert_handed_back(
        repo, result, {"new.txt": "made by the agent", ".gitattributes": "* filter=x"}
    )
    assert f"{result.worktree}/.git" in result.diff_stat  # said, and put back
    assert "2 files changed" in result.diff_stat
    # The kept worktree is the repository's again: your own git there runs nothing planted.
    assert git(Path(result.worktree), "status", "--porcelain") == ""
    assert left(markers) == []


async def test_a_worktree_agent_cannot_steer_git_through_its_admin_folder(
    spawned: SpawnRecorder, tmp_path: Path, served: ModelServer, markers: Path
) -> None:
    # With worktree config on (sparse checkouts use it), git reads the admin folder's
    # config.worktree, which the agent may write; and its HEAD says which branch a commit
    # moves: pointed at main, the parent's commit used to land on the user's branch.
    repo = git_repo(tmp_path / "repo")
    git(repo, "config", "extensions.worktreeConfig", "true")
    main_before = git(repo, "rev-parse", "main")
    served.responder = bash_then_answer(
        "set -e; A=$(git rev-parse --absolute-git-dir); "
        f"git config --worktree core.fsmonitor '{trap(markers, 'fsmonitor', 'false')}'; "
        f"git config --worktree filter.x.clean '{trap(markers, 'filter-clean')}'; "
        "echo '* filter=x' > .gitattributes; echo 'by the agent' > new.txt; "
        'echo "ref: refs/heads/main" > "$A/HEAD"; echo planted'
    )
    result = await delegate_in_worktree(repo, tmp_path / "run")
    assert result.text == "planted", result.text
    assert left(markers) == []
    assert git(repo, "rev-parse", "main") == main_before  # the user's branch did not move
    assert_handed_back(repo, result, {"new.txt": "by the agent"})
    admin = Path(git(Path(result.worktree), "rev-parse", "--absolute-git-dir"))
    assert not (admin / "config.worktree").exists() and "config.worktree" in result.diff_stat
    assert (admin / "HEAD").read_text() == f"ref: refs/heads/{result.branch}\n"
    assert git(Path(result.worktree), "status", "--porcelain") == ""
    assert left(markers) == []


async def test_hooks_and_filters_planted_in_the_users_repository_do_not_run_on_worktree_add(
    spawned: SpawnRecorder, tmp_path: Path, served: ModelServer, markers: Path
) -> None:
    # What a plain sub-agent (or a cloned repository's tooling) could leave in .git: a
    # post-checkout hook and a smudge filter for a committed .gitattributes. `git worktree
    # add`, which the parent runs for the next worktree sub-agent, used to run both.
    repo = git_repo(tmp_path / "repo")
    (repo / ".gitattributes").write_text("*.txt filter=x\n")
    (repo / "data.txt").write_text("data\n")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "attributes")
    hook(repo / ".git" / "hooks", "post-checkout", markers)
    git(repo, "config", "filter.x.smudge", trap(markers, "filter-smudge"))
    git(repo, "config", "core.fsmonitor", trap(markers, "fsmonitor", "false"))
    served.responder = bash_then_answer("cat data.txt; echo more >> data.txt; echo n > new.md")
    result = await delegate_in_worktree(repo, tmp_path / "run")
    assert result.text == "data", result.text
    assert left(markers) == []
    assert_handed_back(repo, result, {"new.md": "n", "data.txt": "data"})
    # The filter's file is left for you: the repository's filter never ran in the parent.
    assert "(not committed: data.txt: its filter is defined only in" in result.diff_stat
    assert (Path(result.worktree) / "data.txt").read_text() == "data\nmore\n"


# -- the worktree's git files, rewritten (a hostile folder) --------------------------------


async def test_a_rewritten_commondir_and_gitdir_are_not_followed_and_are_put_back(
    tmp_path: Path, markers: Path
) -> None:
    repo = git_repo(tmp_path / "repo")
    tree = await create_worktree(repo, tmp_path / "run", "a1", "agentcell/r/a1")
    admin = Path(git(tree.path, "rev-parse", "--absolute-git-dir"))
    commondir = (admin / "commondir").read_bytes()
    # What the agent could write in its admin folder: commondir naming a repository of its
    # own (hooks, fsmonitor), gitdir naming some other place.
    fake = tmp_path / "fake.git"
    git(tmp_path, "init", "-q", "--bare", str(fake))
    git(fake, "config", "core.fsmonitor", trap(markers, "fsmonitor", "false"))
    hook(fake / "hooks", "post-commit", markers)
    hook(fake / "hooks", "post-index-change", markers)
    (admin / "commondir").write_text(f"{fake}\n")
    (admin / "gitdir").write_text(f"{tmp_path / 'elsewhere'}/.git\n")
    (tree.workdir / "new.txt").write_text("new\n")
    kept = await finish_worktree(tree, "agentcell: a1")
    assert left(markers) == []
    assert kept is not None and kept.commit_error == ""
    assert kept.commit == git(repo, "rev-parse", "agentcell/r/a1")
    assert git(repo, "show", "agentcell/r/a1:new.txt") == "new"
    assert f"{admin}/commondir" in kept.diff_stat and f"{admin}/gitdir" in kept.diff_stat
    assert (admin / "commondir").read_bytes() == commondir
    assert (admin / "gitdir").read_text() == f"{tree.path}/.git\n"
    assert git(tree.path, "status", "--porcelain") == ""


async def test_a_repository_the_agent_made_in_its_worktree_is_not_committed(
    tmp_path: Path, markers: Path
) -> None:
    # A repository of the agent's inside its worktree, dirty, with an fsmonitor, a filter
    # and hooks. Committed as a gitlink, it made *your* `git status` in the kept worktree
    # run git inside it (its config, its hooks); left untracked, git never enters it.
    repo = git_repo(tmp_path / "repo")
    tree = await create_worktree(repo, tmp_path / "run", "a1", "agentcell/r/a1")
    sub = git_repo(tree.path / "sub")
    (sub / ".gitattributes").write_text("* filter=y\n")
    git(sub, "config", "core.fsmonitor", trap(markers, "fsmonitor", "false"))
    git(sub, "config", "filter.y.clean", trap(markers, "filter-clean"))
    hook(sub / ".git" / "hooks", "post-index-change", markers)
    (sub / "README.md").write_text("dirty\n")
    (tree.workdir / "top.txt").write_text("top\n")
    kept = await finish_worktree(tree, "agentcell: a1")
    assert left(markers) == []
    assert kept is not None and kept.commit_error == ""
    assert git(repo, "ls-tree", "--name-only", "agentcell/r/a1").split() == ["README.md", "top.txt"]
    assert "(not committed: sub: a git repository of the sub-agent's own" in kept.diff_stat
    assert git(tree.path, "status", "--porcelain") == "?? sub/"
    assert left(markers) == []


async def test_a_replaced_worktree_folder_is_refused_in_one_line(tmp_path: Path) -> None:
    repo = git_repo(tmp_path / "repo")
    tree = await create_worktree(repo, tmp_path / "run", "a1", "agentcell/r/a1")
    shutil.move(tree.path, tmp_path / "moved")
    tree.path.symlink_to(tmp_path / "moved")
    kept = await finish_worktree(tree)
    assert kept is not None and kept.commit == ""
    assert kept.commit_error == (
        f"agentcell ran no git there: {tree.path} was replaced or removed during the run"
    )


async def test_a_repository_git_cannot_read_is_one_line(tmp_path: Path) -> None:
    repo = git_repo(tmp_path / "repo")
    with (repo / ".git" / "config").open("a") as config:
        config.write("[core\n")
    with pytest.raises(WorktreeError) as caught:
        await create_worktree(repo, tmp_path / "run", "a1", "agentcell/r/a1")
    message = str(caught.value)
    assert message.startswith(f"isolation: git cannot read the repository at {repo}: ")
    assert "bad config line" in message and "\n" not in message


# -- the table: one trap per key, against the runner directly -----------------------------


class Http401(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(401)
        self.send_header("WWW-Authenticate", 'Basic realm="x"')
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def asks_for_a_password() -> Iterator[str]:
    """An HTTP server on 127.0.0.1 that asks for credentials (where helpers would run)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), Http401)
    # a short poll interval: shutdown() waits for the loop's next poll (0.5 s by default)
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True
    )
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/repo.git"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


Plant = Callable[[Path, Path], list[str]]  # (repo, markers) -> the git command to run


def _config(repo: Path, *pairs: tuple[str, str]) -> None:
    for key, value in pairs:
        git(repo, "config", key, value)


def _modify(repo: Path) -> None:
    (repo / "README.md").write_text("changed\n")


def plant_hook(name: str, *command: str) -> Plant:
    def plant(repo: Path, markers: Path) -> list[str]:
        hook(repo / ".git" / "hooks", name, markers)
        _modify(repo)
        git(repo, "add", ".")  # staged, for a commit (before the hook exists for add)
        return list(command)

    return plant


def plant_husky(repo: Path, markers: Path) -> list[str]:
    hook(repo / ".husky", "pre-commit", markers)  # a tracked hooks folder
    git(repo, "add", ".husky")
    _config(repo, ("core.hooksPath", ".husky"))
    return ["commit", "-qm", "x"]


def plant_index_change(repo: Path, markers: Path) -> list[str]:
    hook(repo / ".git" / "hooks", "post-index-change", markers)
    _modify(repo)
    return ["add", "--all"]


def plant_fsmonitor(repo: Path, markers: Path) -> list[str]:
    _config(repo, ("core.fsmonitor", trap(markers, "fsmonitor", "false")))
    return ["status", "--porcelain"]


def plant_filter(leaf: str) -> Plant:
    def plant(repo: Path, markers: Path) -> list[str]:
        (repo / ".gitattributes").write_text("*.md filter=x\n")
        then = "exit 1" if leaf == "process" else "cat"
        _config(repo, (f"filter.x.{leaf}", trap(markers, f"filter-{leaf}", then)))
        _modify(repo)
        if leaf == "smudge":
            return ["checkout", "-q", "--", "README.md"]
        return ["add", "--all"]

    return plant


def plant_diff(key: str) -> Plant:
    def plant(repo: Path, markers: Path) -> list[str]:
        (repo / ".gitattributes").write_text("*.md diff=x\n")
        _config(repo, (key, trap(markers, key, "true")))
        _modify(repo)
        return ["diff"]

    return plant


def plant_editor(key: str, *command: str) -> Plant:
    def plant(repo: Path, markers: Path) -> list[str]:
        _config(repo, (key, trap(markers, key, "true")))
        _modify(repo)
        git(repo, "commit", "-qam", "second")
        if command == ("commit",):  # something to commit, and no message
            (repo / "more.txt").write_text("more\n")
            git(repo, "add", ".")
        return list(command)

    return plant


def plant_signing(what: str) -> Plant:
    def plant(repo: Path, markers: Path) -> list[str]:
        hook(repo / ".git", "gpg", markers)  # gpg.program is run as a program, not by a shell
        _config(repo, (f"{what}.gpgSign", "true"), ("gpg.program", str(repo / ".git" / "gpg")))
        _modify(repo)
        git(repo, "add", ".")
        return ["commit", "-qm", "signed?"] if what == "commit" else ["tag", "-m", "v", "v1"]

    return plant


def plant_transport(url: str, *pairs: tuple[str, str]) -> Plant:
    """``ls-remote url`` with ``pairs`` configured; MARK in either is the markers folder,
    PROGRAM a trap script (for keys git runs as a program, not through a shell)."""

    def plant(repo: Path, markers: Path) -> list[str]:
        hook(repo / ".git", "program", markers)
        mark = str(markers)
        program = str(repo / ".git" / "program")
        for key, value in pairs:
            _config(repo, (key, value.replace("MARK", mark).replace("PROGRAM", program)))
        return ["ls-remote", url.replace("MARK", mark)]

    return plant


TRAPS: dict[str, Plant] = {
    "core.hooksPath: pre-commit (skipped by --no-verify)": plant_hook(
        "pre-commit", "commit", "-qm", "x"
    ),
    "core.hooksPath: prepare-commit-msg survives --no-verify": plant_hook(
        "prepare-commit-msg", "commit", "--no-verify", "-qm", "x"
    ),
    "core.hooksPath: post-commit survives --no-verify": plant_hook(
        "post-commit", "commit", "--no-verify", "-qm", "x"
    ),
    "core.hooksPath: reference-transaction": plant_hook("reference-transaction", "branch", "b"),
    "core.hooksPath: post-checkout": plant_hook("post-checkout", "checkout", "-q", "-b", "b"),
    "core.hooksPath: post-index-change": plant_index_change,
    "core.hooksPath: a tracked .husky": plant_husky,
    "core.fsmonitor": plant_fsmonitor,
    "filter.<x>.clean": plant_filter("clean"),
    "filter.<x>.smudge": plant_filter("smudge"),
    "filter.<x>.process": plant_filter("process"),
    "diff.<x>.textconv": plant_diff("diff.x.textconv"),
    "diff.<x>.command": plant_diff("diff.x.command"),
    "diff.external": plant_diff("diff.external"),
    "core.editor": plant_editor("core.editor", "commit"),
    "sequence.editor": plant_editor("sequence.editor", "rebase", "-q", "-i", "HEAD~1"),
    "commit.gpgSign / gpg.program": plant_signing("commit"),
    "tag.gpgSign / gpg.program": plant_signing("tag"),
    "core.sshCommand": plant_transport(
        "ssh://git.invalid/x", ("core.sshCommand", "touch MARK/ssh; false")
    ),
    "core.gitProxy": plant_transport("git://git.invalid/x", ("core.gitProxy", "PROGRAM")),
    "protocol.ext.allow: ext::": plant_transport(
        "ext::sh -c touch% MARK/ext", ("protocol.ext.allow", "always")
    ),
}


@pytest.mark.parametrize("plant", list(TRAPS.values()), ids=list(TRAPS))
async def test_each_key_runs_nothing_through_the_runner(
    tmp_path: Path, markers: Path, plant: Plant
) -> None:
    live = markers / "plain"
    live.mkdir()
    plain_repo = git_repo(tmp_path / "plain")
    git(plain_repo, *plant(plain_repo, live), check=False)
    assert left(live), "the trap did not fire under plain git: the test proves nothing"

    safe = markers / "safe"
    safe.mkdir()
    repo = git_repo(tmp_path / "safe")
    args = plant(repo, safe)
    place = await discover(repo)
    assert place is not None
    await (await SafeGit.open(place)).run(*args)
    assert left(safe) == []


@pytest.mark.parametrize("key", ["credential.helper", "core.askPass"])
async def test_credential_programs_never_run(
    tmp_path: Path, markers: Path, key: str, asks_for_a_password: str
) -> None:
    program = f"!{trap(markers, 'x', 'true')}" if key == "credential.helper" else ""
    askpass = tmp_path / "askpass"
    askpass.write_text(f"#!/bin/sh\n{trap(markers, 'x', 'echo secret')}\n")
    askpass.chmod(0o755)
    value = program or str(askpass)
    plain_repo = git_repo(tmp_path / "plain")
    git(plain_repo, "config", key, value)
    git(plain_repo, "ls-remote", asks_for_a_password, check=False)
    assert left(markers) == ["x"], "the trap did not fire under plain git"
    (markers / "x").unlink()

    repo = git_repo(tmp_path / "safe")
    git(repo, "config", key, value)
    place = await discover(repo)
    assert place is not None
    code, out = await (await SafeGit.open(place)).run("ls-remote", asks_for_a_password)
    assert code != 0 and "not allowed" in out
    assert left(markers) == []


def two_packs(repo: Path) -> Path:
    """Two packs and a repository that consolidates at two: the next commit's automatic
    maintenance repacks (in the foreground)."""
    git(repo, "repack", "-q")
    (repo / "second.txt").write_text("2\n")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "second")
    git(repo, "repack", "-q")
    git(repo, "config", "gc.autoPackLimit", "1")
    git(repo, "config", "gc.autoDetach", "false")
    (repo / "third.txt").write_text("3\n")
    git(repo, "add", ".")
    packs = repo / ".git" / "objects" / "pack"
    assert len(list(packs.glob("*.pack"))) == 2
    return packs


async def test_no_automatic_maintenance_runs_after_the_parents_commit(tmp_path: Path) -> None:
    plain = two_packs(git_repo(tmp_path / "plain"))
    git(tmp_path / "plain", "commit", "-qm", "third")
    assert len(list(plain.glob("*.pack"))) == 1, "plain git did not repack: proves nothing"

    repo = git_repo(tmp_path / "safe")
    packs = two_packs(repo)
    place = await discover(repo)
    assert place is not None
    code, out = await (await SafeGit.open(place)).run("commit", "-qm", "third")
    assert code == 0, out
    assert len(list(packs.glob("*.pack"))) == 2  # gc.auto=0, maintenance.auto=false


def _on_a_terminal(argv: list[str], env: dict[str, str], cwd: Path) -> None:
    main, side = pty.openpty()
    try:
        subprocess.run(
            argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=side, stderr=side, timeout=60
        )
    finally:
        os.close(side)
        with contextlib.suppress(OSError):
            while os.read(main, 4096):
                pass
        os.close(main)


@pytest.mark.parametrize("key", ["core.pager", "pager.diff"])
async def test_no_pager_runs_even_on_a_terminal(tmp_path: Path, markers: Path, key: str) -> None:
    plain_repo = git_repo(tmp_path / "plain")
    git(plain_repo, "config", key, trap(markers, "pager"))
    _modify(plain_repo)
    plain_env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    plain_env.pop("PAGER", None)
    _on_a_terminal(["git", "diff"], plain_env, plain_repo)
    assert left(markers) == ["pager"], "the pager did not run under plain git on a terminal"
    (markers / "pager").unlink()

    repo = git_repo(tmp_path / "safe")
    git(repo, "config", key, trap(markers, "pager"))
    _modify(repo)
    place = await discover(repo)
    assert place is not None
    argv, env = (await SafeGit.open(place)).command("diff")
    _on_a_terminal(argv, env, repo)
    assert left(markers) == []


# -- drivers from your own config keep working --------------------------------------------


@pytest.mark.parametrize(
    ("leaf", "then", "committed"),
    [("clean", "cat", "SHOUT"), ("process", "exit 1", "")],
    ids=["redefined: yours runs", "a process added: off, the file left uncommitted"],
)
async def test_a_filter_from_your_own_config_runs_and_a_repository_cannot_change_it(
    tmp_path: Path, markers: Path, own_home: Path, leaf: str, then: str, committed: str
) -> None:
    git(own_home, "config", "--global", "filter.upper.clean", "tr a-z A-Z")
    repo = git_repo(tmp_path / "repo")
    (repo / ".gitattributes").write_text("*.txt filter=upper\n")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "attributes")
    # The repository's config (which a sub-agent may write) redefines it, or adds a key
    # (git then runs the process and never the clean command).
    git(repo, "config", f"filter.upper.{leaf}", trap(markers, "local", then))
    tree = await create_worktree(repo, tmp_path / "run", "a1", "agentcell/r/a1")
    (tree.workdir / "a.txt").write_text("shout\n")
    kept = await finish_worktree(tree)
    assert kept is not None and kept.commit_error == ""
    assert left(markers) == []  # the repository's program never ran
    if committed:
        assert git(repo, "show", "agentcell/r/a1:a.txt") == committed
    else:  # your filter is off: the file is left for you to commit
        assert "(not committed: a.txt: its filter is defined only in" in kept.diff_stat


async def test_a_file_under_a_filter_only_the_repository_defines_is_left_uncommitted(
    tmp_path: Path, markers: Path
) -> None:
    # git-crypt's way: the filter lives in the repository's own config. Not run by the
    # parent (a sub-agent may write that config), and not committed as the plain bytes the
    # agent wrote either: left for you to commit with your git.
    repo = git_repo(tmp_path / "repo")
    git(repo, "config", "filter.crypt.clean", f"touch {markers}/clean; tr a-z n-za-m")
    git(repo, "config", "filter.crypt.smudge", f"touch {markers}/smudge; tr a-z n-za-m")
    (repo / ".gitattributes").write_text("secret.txt filter=crypt\n")
    (repo / "secret.txt").write_text("old secret\n")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "crypt")
    for name in left(markers):
        (markers / name).unlink()
    tree = await create_worktree(repo, tmp_path / "run", "a1", "agentcell/r/a1")
    assert (tree.path / "secret.txt").read_text() == "byq frperg\n"  # as stored: not run
    (tree.workdir / "secret.txt").write_text("new secret\n")
    (tree.workdir / "other.txt").write_text("other\n")
    kept = await finish_worktree(tree, "agentcell: a1")
    assert left(markers) == []
    assert kept is not None and kept.commit_error == ""
    assert git(repo, "show", "agentcell/r/a1:other.txt") == "other"
    assert git(repo, "show", "agentcell/r/a1:secret.txt") == "byq frperg"  # not the plain one
    assert "(not committed: secret.txt: its filter is defined only in the" in kept.diff_stat
    assert (tree.path / "secret.txt").read_text() == "new secret\n"  # still there for you


async def test_a_file_your_config_includes_from_the_repository_is_not_yours(
    tmp_path: Path, markers: Path, own_home: Path
) -> None:
    # ~/.gitconfig includes a file inside the project (a common way to share settings):
    # whatever a sub-agent writes there defines no driver the parent runs.
    repo = git_repo(tmp_path / "repo")
    shared = repo / ".gitconfig-shared"
    git(own_home, "config", "--global", "include.path", str(shared))
    shared.write_text(f'[filter "x"]\n\tclean = "{trap(markers, "included")}"\n')
    (repo / ".gitattributes").write_text("*.txt filter=x\n")
    (repo / "a.txt").write_text("a\n")
    git(repo, "add", "a.txt")
    assert left(markers) == ["included"], "plain git did not run it: proves nothing"
    (markers / "included").unlink()
    git(repo, "reset", "-q")

    place = await discover(repo)
    assert place is not None
    await (await SafeGit.open(place)).run("add", "--all")
    assert left(markers) == []


@pytest.mark.skipif(shutil.which("git-lfs") is None, reason="git-lfs is not installed")
async def test_git_lfs_repositories_keep_working(tmp_path: Path, own_home: Path) -> None:
    git(own_home, "lfs", "install", "--skip-repo")  # filter.lfs.* in your ~/.gitconfig
    repo = git_repo(tmp_path / "repo")
    (repo / ".gitattributes").write_text("*.bin filter=lfs diff=lfs merge=lfs -text\n")
    (repo / "old.bin").write_bytes(b"old large data\n")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "lfs")
    assert git(repo, "cat-file", "-p", "HEAD:old.bin").startswith("version https://git-lfs")
    tree = await create_worktree(repo, tmp_path / "run", "a1", "agentcell/r/a1")
    assert (tree.path / "old.bin").read_bytes() == b"old large data\n"  # smudged on checkout
    (tree.workdir / "new.bin").write_bytes(b"new large data\n")
    kept = await finish_worktree(tree)
    assert kept is not None and kept.commit_error == ""
    pointer = git(repo, "cat-file", "-p", "agentcell/r/a1:new.bin")
    assert pointer.startswith("version https://git-lfs.github.com/spec/v1"), pointer
    oid = next(line for line in pointer.splitlines() if line.startswith("oid sha256:"))[11:]
    stored = repo / ".git" / "lfs" / "objects" / oid[:2] / oid[2:4] / oid
    assert stored.read_bytes() == b"new large data\n"  # in the repository, not a temp folder
    assert git(tree.path, "status", "--porcelain") == ""
