"""File-system isolation: a fresh git worktree (and branch) per sub-agent.

The child works in ``<root>/worktrees/<agent-id>`` on branch ``agentcell/<run>/<agent-id>``.
When it ends with nothing changed, the worktree and the branch are removed; otherwise
what it left is committed on that branch (a message naming the agent and its task), both
are kept, and the result says where, on which branch and commit, and what changed — work
is never silently lost, and ``git merge <branch>`` takes it. Git commands on one
repository are serialised: concurrent ``git worktree add`` calls contend for the same
administrative files.

Every git command here goes through :mod:`._safe_git`, and none trusts a file the agent
could write: its worktree (``.git`` included) and its admin folder
(``<common>/worktrees/<name>/``: ``HEAD``, ``index``, ``commondir``, ``gitdir``,
``config.worktree``) are the agent's. What agentcell records when it makes the worktree
(before the agent starts) is what it uses after: the commit is made in a private git
folder of the parent's (``HEAD`` naming the agent's branch, a fresh index built from that
branch and the files as they are), with ``GIT_COMMON_DIR`` the repository agentcell found
in your folder. Then the admin folder gets the new index and ``HEAD``, and the ``.git``
file, ``commondir`` and ``gitdir`` are put back as git wrote them (a ``config.worktree``
the agent left is removed), so a later ``git`` of yours in the kept worktree reads nothing
the agent planted there.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import secrets
import shutil
import stat
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agentcell.orchestrator.workspace._safe_git import GitError, GitPlace, SafeGit, discover
from agentcell.worker import remove_protection_placeholders


class WorktreeError(Exception):
    """The worktree could not be made; the message says why and what to do."""


@dataclasses.dataclass(slots=True)
class Worktree:
    repo: Path  # the repository's top level
    path: Path  # the new worktree
    branch: str
    base: str  # the commit it branched from
    workdir: Path  # where the child works: the same place inside the worktree
    home: GitPlace  # the repository as found from your folder
    admin: Path  # git's admin folder of this worktree (the agent's to write)
    marks: dict[str, bytes]  # the .git file, commondir and gitdir as git wrote them
    ids: dict[str, tuple[int, int]]  # (device, inode) of each folder trusted at creation


@dataclasses.dataclass(frozen=True, slots=True)
class KeptWorktree:
    path: str
    branch: str
    diff_stat: str
    commit: str  # the branch's head after the agent's changes were committed
    commit_error: str = ""  # why the changes are left uncommitted (staged), if they are


#: Who commits an agent's work when the repository names nobody.
_FALLBACK_IDENTITY = (("user.name", "agentcell"), ("user.email", "agentcell@localhost"))

#: The files git writes into a new worktree's admin folder that say where things are.
_MARKED = ("commondir", "gitdir")


_locks: dict[tuple[int, Path], asyncio.Lock] = {}


def _lock(repo: Path) -> asyncio.Lock:
    # One lock per repository and event loop (an asyncio lock belongs to one loop).
    key = (id(asyncio.get_running_loop()), repo)
    lock = _locks.get(key)
    if lock is None:
        lock = _locks[key] = asyncio.Lock()
    return lock


async def create_worktree(workdir: Path, root: Path, name: str, branch: str) -> Worktree:
    try:
        home = await discover(workdir)
    except GitError as exc:
        raise WorktreeError(f"isolation: {exc}") from None
    if home is None:
        raise WorktreeError(
            f"isolation: worktree needs a git repository, and {workdir} is not inside one "
            "(run `git init` and commit, or drop the isolation setting)"
        )
    try:
        git = await SafeGit.open(home)
    except GitError as exc:
        raise WorktreeError(f"isolation: {exc}") from None
    code, base = await git.run("rev-parse", "--verify", "HEAD^{commit}")
    if code != 0:
        raise WorktreeError(
            f"isolation: worktree needs a commit to branch from, and {home.work_tree} has "
            "none yet (commit once first)"
        )
    path = root / "worktrees" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    async with _lock(home.work_tree):
        code, out = await git.run("worktree", "add", "--quiet", "-b", branch, str(path), base)
    if code != 0:
        raise WorktreeError(f"isolation: git could not add a worktree at {path}: {out}")
    inside = _inside(workdir, home.work_tree)
    admin, marks = _recorded(path, home)
    return Worktree(
        repo=home.work_tree,
        path=path,
        branch=branch,
        base=base,
        workdir=path / inside,
        home=home,
        admin=admin,
        marks=marks,
        ids={
            "worktree": _identity_of(path),
            "admin": _identity_of(admin),
            "common": _identity_of(home.common_dir),
        },
    )


def _inside(workdir: Path, top: Path) -> Path:
    """Where the workdir sits inside the repository."""
    return Path(os.path.relpath(os.path.realpath(workdir), top))


def _recorded(path: Path, home: GitPlace) -> tuple[Path, dict[str, bytes]]:
    """What git just wrote (no agent has run yet): where the admin folder is, and the
    bytes of the files that name it, which the finish trusts and puts back."""
    marker = (path / ".git").read_bytes()
    text = marker.decode(errors="replace").strip()
    admin = Path(os.path.realpath(path / text.removeprefix("gitdir:").strip()))
    if not text.startswith("gitdir:") or admin.parent != home.common_dir / "worktrees":
        raise WorktreeError(f"isolation: git made an unexpected worktree at {path}: {text}")
    return admin, {".git": marker} | {name: (admin / name).read_bytes() for name in _MARKED}


def _identity_of(path: Path) -> tuple[int, int]:
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode):
        raise OSError(f"{path} is not a folder")
    return info.st_dev, info.st_ino


def replaced(tree: Worktree, when: str = "during the run") -> str:
    """Which trusted folder is no longer the one recorded ("" if none): git is then not
    run there at all."""
    places = {"common": tree.home.common_dir, "admin": tree.admin, "worktree": tree.path}
    for what, path in places.items():
        try:
            same = _identity_of(path) == tree.ids[what]
        except OSError:
            same = False
        if not same:
            return f"{path} was replaced or removed {when}"
    return ""


def journaled_worktree(tree: Worktree) -> dict[str, Any]:
    """What a run's journal keeps of a worktree it made (before its agent starts), for a
    resume of the run to go on in it: what the finish trusts, as recorded then."""
    home = tree.home
    return {
        "path": str(tree.path),
        "branch": tree.branch,
        "base": tree.base,
        "workdir": str(tree.workdir),
        "admin": str(tree.admin),
        "home": [str(home.git_dir), str(home.common_dir), str(home.work_tree)],
        "marks": dict(tree.marks),
        "ids": {what: list(pair) for what, pair in tree.ids.items()},
    }


def adopt_worktree(journaled: dict[str, Any]) -> Worktree:
    """A killed run's worktree, for its resumed sub-agent to go on in, as the killed run's
    journal recorded it — only while the worktree, its admin folder and the repository
    are the very folders recorded (device and inode, none a link: a folder planted in the
    run folder since is refused); git's marks are put back as git wrote them and a
    planted ``config.worktree`` is removed, as the finish does. WorktreeError: why not."""
    try:
        git_dir, common, top = (Path(str(place)) for place in journaled["home"])
        tree = Worktree(
            repo=top,
            path=Path(str(journaled["path"])),
            branch=str(journaled["branch"]),
            base=str(journaled["base"]),
            workdir=Path(str(journaled["workdir"])),
            home=GitPlace(git_dir=git_dir, common_dir=common, work_tree=top),
            admin=Path(str(journaled["admin"])),
            marks={name: bytes(journaled["marks"][name]) for name in (".git", *_MARKED)},
            ids={
                what: (int(journaled["ids"][what][0]), int(journaled["ids"][what][1]))
                for what in ("worktree", "admin", "common")
            },
        )
    except (KeyError, IndexError, TypeError, ValueError) as exc:
        raise WorktreeError(f"its journaled worktree does not read ({exc!r})") from None
    if not tree.workdir.is_relative_to(tree.path):
        raise WorktreeError(f"its journaled workdir {tree.workdir} is not in {tree.path}")
    refused = replaced(tree, "since the killed run")
    if refused:
        raise WorktreeError(refused)
    try:
        _repair(tree, None)
    except OSError as exc:
        raise WorktreeError(f"{tree.path} cannot be made ready again: {exc}") from None
    return tree


async def finish_worktree(
    tree: Worktree,
    message: str = "agentcell: sub-agent changes",
    hooks_wrote: Sequence[str] = (),
) -> KeptWorktree | None:
    """Remove the worktree if nothing changed; otherwise commit what the agent left on its
    branch (with ``message``), keep both, and describe the changes since the base.
    ``hooks_wrote``: paths its hooks changed (``_hook_writes``), never committed."""
    remove_protection_placeholders(tree.path)  # never committed: they stand for "absent"
    refused = replaced(tree)
    if refused:
        return _untouched(tree, refused)
    with tempfile.TemporaryDirectory(prefix="agentcell-git-") as private:
        try:
            git = await SafeGit.open(private_view(tree, Path(private)))
        except GitError as exc:
            return _untouched(tree, str(exc))
        repositories = await _stage(git, tree.branch)
        await _unstage(git, tree.branch, hooks_wrote)
        held = await _unfiltered(git, tree.branch)
        changed, _ = await git.run("diff", "--cached", "--quiet", tree.branch)
        _, ahead = await git.run("rev-list", "--count", f"{tree.base}..{tree.branch}")
        if not changed and not repositories and not held and ahead.strip() in ("", "0"):
            await _remove(tree)
            return None
        commit_error = ""
        if changed:
            identity = await _identity(git)
            code, out = await git.run(*_COMMIT, "-m", message, config=identity)
            if code != 0:  # left staged, and the result says why
                commit_error = " ".join(out.split())
        _, head = await git.run("rev-parse", "HEAD")
        # Against the index: the commit when it worked, the staged changes when it did not.
        _, stat_text = await git.run("diff", "--cached", "--stat", tree.base)
        try:
            repaired = _repair(tree, Path(private) / "index")
        except OSError as exc:  # the folders changed under it: say so, keep the commit
            repaired = [f"nothing: {exc} (run no git in that worktree)"]
    return KeptWorktree(
        path=str(tree.path),
        branch=tree.branch,
        diff_stat=_notes(repaired, repositories, held, hooks_wrote) + stat_text,
        commit=head.strip(),
        commit_error=commit_error,
    )


def _notes(
    repaired: list[str], repositories: list[str], held: list[str], hooks_wrote: Sequence[str]
) -> str:
    notes = ""
    if hooks_wrote:
        named = ", ".join(hooks_wrote[:_NAMED])
        more = f" and {len(hooks_wrote) - _NAMED} more" if len(hooks_wrote) > _NAMED else ""
        notes += (
            f"(not committed: {named}{more}: a hook wrote them while it ran, not the "
            "sub-agent; left in the worktree as they are)\n"
        )
    if repaired:
        notes += f"(agentcell put back what the sub-agent changed in: {', '.join(repaired)})\n"
    if repositories:
        notes += (
            f"(not committed: {', '.join(repositories)}: a git repository of the sub-agent's "
            "own; agentcell commits files, not repositories — review it before you run git "
            "inside it)\n"
        )
    if held:
        notes += (
            f"(not committed: {', '.join(held)}: its filter is defined only in the "
            "repository's own config, which agentcell does not run — commit it yourself)\n"
        )
    return notes


async def _stage(git: SafeGit, branch: str) -> list[str]:
    """Stage the files as they are (a fresh index from the branch, not the agent's), then
    unstage every repository the agent made or moved (a gitlink: your ``git status`` in
    the kept worktree would run git inside it, with its config and hooks). Returns those."""
    await git.run("read-tree", branch)
    await git.run("add", "--all")
    _, raw = await git.run("diff", "--cached", "--raw", "-z", "--no-abbrev", branch, strip=False)
    fields = raw.split("\0")
    links = [
        path
        for info, path in zip(fields[::2], fields[1::2], strict=False)
        if info.split(" ")[1:2] == ["160000"]
    ]
    if links:
        await git.run("reset", "-q", branch, "--", *links)
    return links


#: How many of the hooks' paths a result names.
_NAMED = 5


async def _unstage(git: SafeGit, branch: str, paths: Sequence[str]) -> None:
    """Put ``paths`` back as the branch has them in the index (a new file: not in it)."""
    for start in range(0, len(paths), 1000):  # a command line has a length limit
        await git.run("reset", "-q", branch, "--", *paths[start : start + 1000])


async def _unfiltered(git: SafeGit, branch: str) -> list[str]:
    """Unstage the changed files whose filter the runner did not run (one only your
    repository's config defines, git-crypt's say): committed, they would go in as the
    bytes the agent wrote, unencrypted. Returns them, for you to commit yourself."""
    if not git.blanked:
        return []
    _, names = await git.run("diff", "--cached", "--name-only", "-z", branch, strip=False)
    paths = [path for path in names.split("\0") if path]
    if not paths:
        return []
    _, attributes = await git.run("check-attr", "-z", "filter", "--", *paths, strip=False)
    fields = attributes.split("\0")
    held = [
        path for path, value in zip(fields[::3], fields[2::3], strict=False) if value in git.blanked
    ]
    if held:
        await git.run("reset", "-q", branch, "--", *held)
    return held


def _untouched(tree: Worktree, why: str) -> KeptWorktree:
    """The worktree kept as the agent left it, nothing committed, and why."""
    return KeptWorktree(
        path=str(tree.path),
        branch=tree.branch,
        diff_stat="",
        commit="",
        commit_error=f"agentcell ran no git there: {why}",
    )


def private_view(tree: Worktree, private: Path) -> GitPlace:
    """A git folder of the parent's own for this worktree: ``HEAD`` names the agent's
    branch, ``commondir`` the repository (git's ref store reads that file, not
    ``GIT_COMMON_DIR``), and no ``config.worktree``, index or per-worktree ref of the
    agent's."""
    common = tree.home.common_dir
    (private / "HEAD").write_text(f"ref: refs/heads/{tree.branch}\n")
    (private / "commondir").write_text(f"{common}\n")
    return GitPlace(git_dir=private, common_dir=common, work_tree=tree.path)


async def _remove(tree: Worktree) -> None:
    """What ``git worktree remove --force`` does, without git reading the admin folders'
    ``gitdir`` files (the agent's) to find which one to take away."""
    async with _lock(tree.repo):
        shutil.rmtree(tree.path, ignore_errors=True)  # never follows a link out
        shutil.rmtree(tree.admin, ignore_errors=True)
        with contextlib.suppress(GitError):  # the branch stays: it holds nothing new
            await (await SafeGit.open(tree.home)).run("branch", "-D", tree.branch)


def _repair(tree: Worktree, index: Path | None) -> list[str]:
    """Give the admin folder the new index (if any) and ``HEAD``; put back the ``.git`` file,
    ``commondir`` and ``gitdir`` as git wrote them and remove a planted
    ``config.worktree``. Returns what had been changed. All through folder descriptors
    opened without following a link, so nothing is written outside those two folders."""
    changed: list[str] = []
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    admin_fd = os.open(tree.admin, flags)
    tree_fd = os.open(tree.path, flags)
    try:
        if (os.fstat(admin_fd).st_dev, os.fstat(admin_fd).st_ino) != tree.ids["admin"]:
            return ["the admin folder (replaced; left as it is)"]
        if index is not None and index.is_file():  # git made one (it may have failed)
            _put(admin_fd, "index", index.read_bytes())
        _put(admin_fd, "HEAD", f"ref: refs/heads/{tree.branch}\n".encode())
        for name in _MARKED:
            if _put_back(admin_fd, name, tree.marks[name]):
                changed.append(f"{tree.admin}/{name}")
        with contextlib.suppress(FileNotFoundError):
            _discard(admin_fd, "config.worktree")
            changed.append(f"{tree.admin}/config.worktree (removed)")
        if _put_back(tree_fd, ".git", tree.marks[".git"]):
            changed.append(f"{tree.path}/.git")
    finally:
        os.close(admin_fd)
        os.close(tree_fd)
    return changed


def _put_back(folder: int, name: str, data: bytes) -> bool:
    """Make ``name`` the regular file ``data`` again; True if it was anything else."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=folder)
    except OSError:
        fd = -1
    if fd >= 0:
        try:
            same = stat.S_ISREG(os.fstat(fd).st_mode) and os.read(fd, len(data) + 1) == data
        finally:
            os.close(fd)
        if same:
            return False
    with contextlib.suppress(FileNotFoundError):
        _discard(folder, name)
    _put(folder, name, data)
    return True


def _discard(folder: int, name: str) -> None:
    """Remove ``name`` (a file, a link, or a whole tree, never following a link)."""
    info = os.stat(name, dir_fd=folder, follow_symlinks=False)
    if stat.S_ISDIR(info.st_mode):
        shutil.rmtree(name, dir_fd=folder)
    else:
        os.unlink(name, dir_fd=folder)


def _put(folder: int, name: str, data: bytes) -> None:
    """Write ``name`` in ``folder`` through a new file renamed over it (a link planted
    under that name is replaced, not followed)."""
    temporary = f".{name}.agentcell-{secrets.token_hex(6)}"
    fd = os.open(
        temporary,
        os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
        0o644,
        dir_fd=folder,
    )
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
    os.replace(temporary, name, src_dir_fd=folder, dst_dir_fd=folder)


# No hooks (the repository's pre-commit checks are for people, and could run anything in
# the parent: the runner turns every hook off) and no signing (gpg would wait for a
# passphrase nobody types).
_COMMIT = ("commit", "--quiet", "--no-verify")


async def _identity(git: SafeGit) -> tuple[tuple[str, str], ...]:
    """The repository's own author when it has one, else agentcell's."""
    code, email = await git.run("config", "--get", "user.email")
    return () if code == 0 and email.strip() else _FALLBACK_IDENTITY
