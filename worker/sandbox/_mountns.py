"""Protected paths inside the workdir: read-only, unrenamable, uncreatable for the agent.

The workdir is writable to a sub-agent under ``sandbox = "workspace"``, and so would be
what agentcell and Claude Code read from it later: ``.git`` (config, hooks), the
project's ``agentcell.toml``, ``.agentcell/`` (configs, agent files, other agents'
memory, sibling worktrees, every run's records), ``.claude/`` (settings, hooks, agents,
skills) and ``.mcp.json``. Landlock rules only *allow*, so a subtree of an allowed folder
cannot be taken out again; a mount can. Before its Landlock walls go up, the sub-agent
process moves into a private mount namespace (``unshare(CLONE_NEWNS)``, through a user
namespace where it is not root) and bind-mounts each protected path read-only onto itself:
writes fail (``EROFS``), and a mount point cannot be renamed, removed or replaced
(``EBUSY``). Mounts made here never reach the rest of the machine (the tree is made
private first), and Landlock refuses every later mount or unmount, so bash cannot undo
them. The agent's own memory folder (inside ``.agentcell``) is bound back read-write from
a descriptor opened before, and so is this run's tool-output folder; the run's record
files were opened before and stay writable through their descriptors only.

A protected path that does not exist yet cannot be a mount point, and an empty folder
in its place is bound read-only instead, so nothing can be created there. An empty folder
reads as "absent" everywhere that matters: git lists no empty folder (``git status`` stays
clean) and ignores a ``.git`` folder that is not a repository, and agentcell takes a
config path that is not a file for none. While agentcell runs, the user sees those empty
folders (``.mcp.json/`` …); the parent removes each one that is still an empty folder
when it closes, and before it commits a worktree, once no sub-agent holds the workdir
(``remove_placeholders``, ``_hold``). A placeholder carries a modification time no
folder of yours has (``PLACEHOLDER_MTIME_NS``), so an empty ``.claude`` or ``.git`` you
made yourself is never taken for one and stays.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import functools
import os
import stat
from collections.abc import Iterable
from operator import or_
from pathlib import Path

#: What a sub-agent may never write, rename or create, relative to its workdir.
PROTECTED = (".git", "agentcell.toml", ".agentcell", ".claude", ".mcp.json")

#: The modification time a placeholder is made with: 1970-01-01 00:00:06 UTC, whole
#: seconds (kept as is by file systems with coarse times), and none of the zeroed times
#: archives and reproducible builds give files (0, 1 s, 1980-01-01). Only an empty
#: folder with this time is removed as a placeholder.
PLACEHOLDER_MTIME_NS = 6_000_000_000

#: What ``agentcell sandbox`` and a result say where no mount namespace can be had.
MISSING = (
    "protected paths (no mount namespace: .git, agentcell.toml, .agentcell/, .claude/ and "
    ".mcp.json stay writable to bash like the rest of the workdir)"
)

_CLONE_NEWNS = 0x00020000
_CLONE_NEWUSER = 0x10000000
_PR_GET_DUMPABLE = 3
_MS_RDONLY = 1
_MS_NOSUID = 2
_MS_NODEV = 4
_MS_REMOUNT = 32
_MS_BIND = 4096
_MS_REC = 16384
_MS_PRIVATE = 1 << 18

_libc = ctypes.CDLL(None, use_errno=True)


class MountError(OSError):
    def __str__(self) -> str:
        return str(self.strerror)


def _mount(source: str | None, target: str, flags: int) -> None:
    src = None if source is None else os.fsencode(source)
    if _libc.mount(src, os.fsencode(target), None, ctypes.c_ulong(flags), None) != 0:
        code = ctypes.get_errno()
        raise MountError(code, f"mount {target}: {os.strerror(code)}")


_in_user_namespace = False  # set by prepare: this process made a user namespace
joined_shared = False  # ... by joining the fork server's (``_bash_userns.shared``)


def prepare(mode: str, shared: int | None = None) -> None:
    """At the start of a walled run, while the process still has one thread (a user
    namespace cannot be entered later, once a drain thread or an MCP server's reader
    runs): a user namespace of its own, with the same uid and gid, root or not. A user
    who is not root needs it for the mount namespace ``protect`` makes later; for every
    user it means the sub-agent holds no capability over anything of the machine's, and
    ``CAP_SETPCAP`` inside it, to drop every capability set once its set-up is done
    (``_capabilities``). Where the kernel refuses one, the walls go on without it."""
    global _in_user_namespace
    if mode.strip().lower() in ("off", "") or _in_user_namespace:
        return
    if len(os.listdir("/proc/self/task")) != 1:
        return  # protect then reports what is missing
    global joined_shared
    # ``shared``: the fork server's namespace (``_bash_userns.shared``): joined, not made.
    if shared is not None and _libc.setns(shared, _CLONE_NEWUSER) == 0:
        _in_user_namespace = joined_shared = True
        return
    _in_user_namespace = _enter_user_namespace()


def in_user_namespace() -> bool:
    """Whether ``prepare`` put this process in a user namespace of its own."""
    return _in_user_namespace


def _enter_user_namespace() -> bool:
    uid, gid = os.geteuid(), os.getegid()
    # A process that is not dumpable (one that changed its uid, say) may not write its own
    # uid map (/proc/self is root's then): it would be left in a namespace with no map.
    if _libc.prctl(_PR_GET_DUMPABLE, 0, 0, 0, 0) != 1:
        return False
    if _libc.unshare(_CLONE_NEWUSER) != 0:
        return False  # no user namespaces for this user here
    # Stay who we are inside: the same uid and gid map onto themselves.
    with contextlib.suppress(OSError):
        Path("/proc/self/setgroups").write_text("deny")
    Path("/proc/self/uid_map").write_text(f"{uid} {uid} 1")
    Path("/proc/self/gid_map").write_text(f"{gid} {gid} 1")
    return True


def _enter_namespace() -> str | None:
    """Move this thread into a private mount namespace; None if the kernel refuses."""
    if _libc.unshare(_CLONE_NEWNS) == 0:  # as root, or in the user namespace of prepare
        return "user+mount" if _in_user_namespace else "mount"
    single = len(os.listdir("/proc/self/task")) == 1
    if single and _enter_user_namespace() and _libc.unshare(_CLONE_NEWNS) == 0:
        return "user+mount"
    return None


def probe() -> str | None:
    """Which way a private mount namespace can be had here ("mount", "user+mount") or
    None: tried in a throwaway child (unshare changes the caller for good)."""
    unshare = _libc.unshare
    for flags, name in ((_CLONE_NEWNS, "mount"), (_CLONE_NEWUSER | _CLONE_NEWNS, "user+mount")):
        pid = os.fork()
        if pid == 0:
            os._exit(0 if unshare(flags) == 0 else 1)
        _, status = os.waitpid(pid, 0)
        if os.waitstatus_to_exitcode(status) == 0:
            return name
    return None


def _make_placeholder(workdir_fd: int, name: str) -> bool:
    """An empty folder in place of ``name`` if it is absent (a mount point for it).
    False: the workdir takes no new entry from this user at all (read-only, not ours),
    so the agent cannot create ``name`` either and there is nothing to hold."""
    try:
        os.mkdir(name, 0o700, dir_fd=workdir_fd)
    except FileExistsError:
        return True  # yours, or a sibling's placeholder: either way, nothing to mark
    except OSError as exc:
        if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
            return False
        raise
    # Marked while the workdir is held (``_hold``): no removal runs before it is.
    when = PLACEHOLDER_MTIME_NS
    os.utime(name, ns=(when, when), dir_fd=workdir_fd, follow_symlinks=False)
    return True


def protect(
    workdir: str,
    writable: Iterable[tuple[int, str]],
    private: tuple[int, str] | None = None,
    code_entries: Iterable[str] = (),
) -> str | None:
    """Make the protected paths of ``workdir`` read-only for this process and all it
    starts; ``writable``: (``O_PATH`` descriptor, path) of folders beneath them bound back
    read-write (the memory folder); ``private``: a folder beneath them that only this
    process writes, through a descriptor it keeps (the run's tool-output folder, see
    ``_outputs``), while its commands see it read-only; ``code_entries``: entries of
    the workdir that hold code run outside the walls, read-only too
    (``code_entries_bound``). Returns what was done, in words for the report
    (None: no mount namespace can be had here); raises ``MountError`` for a protected
    path it must not cover (a link)."""
    kind = _enter_namespace()
    if kind is None:
        return None
    _mount(None, "/", _MS_REC | _MS_PRIVATE)  # nothing below reaches the host's tree
    # Opened again in this namespace (a bind's source must be one of its mounts), checked
    # to be the very folders granted, before the read-only mounts cover them.
    again = [(_same_folder(fd, path), path) for fd, path in writable]
    if private is not None:
        from agentcell.worker.tools import _outputs  # (this module also runs on its own: tests)

        _outputs.keep(_same_folder(*private))  # on the writable mount beneath; kept
    _hold(workdir)  # before any placeholder is made (see remove_placeholders)
    workdir_fd = os.open(workdir, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        absent = [name for name in PROTECTED if _bind_read_only(workdir, workdir_fd, name)]
        held = _absent_words(absent) + code_entries_bound(workdir, workdir_fd, code_entries)
        for fd, path in again:  # back read-write, from the still writable mount below
            _mount(f"/proc/self/fd/{fd}", path, _MS_BIND | _MS_REC)
    finally:
        os.close(workdir_fd)
        for fd, _ in again:
            os.close(fd)
    return f"protected paths read-only ({kind} namespace){held}"


def code_entries_bound(workdir: str, workdir_fd: int, names: Iterable[str]) -> str:
    """Bind each of ``names`` (an entry of the workdir holding code that runs outside the
    walls: a hook's file, an MCP server's, a custom tool's module) read-only, as a
    protected path; one that is absent is held by a placeholder, so that it cannot be
    made. The whole entry, not the file: a sub-agent could otherwise rename a folder
    above the file and put another file at its path. A link is left as it is (a mount
    cannot cover one) and said. Returns the words for the report."""
    bound, links = [], []
    for name in names:
        if name in PROTECTED or not name or "/" in name or name in (".", ".."):
            continue  # covered already, or not one entry of the workdir
        try:
            is_link = stat.S_ISLNK(os.stat(name, dir_fd=workdir_fd, follow_symlinks=False).st_mode)
        except FileNotFoundError:
            is_link = False
        if is_link:
            links.append(name)
            continue
        _bind_read_only(workdir, workdir_fd, name)
        bound.append(name)
    words = f", with the code's {', '.join(bound)}" if bound else ""
    if links:
        words += f"; not {', '.join(links)} (a link: the code there stays writable)"
    return words


def _same_folder(granted: int, path: str) -> int:
    fd = os.open(path, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    first, now = os.fstat(granted), os.fstat(fd)
    if (first.st_dev, first.st_ino) != (now.st_dev, now.st_ino):
        os.close(fd)
        raise MountError(errno.ESTALE, f"{path} was replaced while the sandbox was set up")
    return fd


def _absent_words(names: list[str]) -> str:
    """The report's words for protected paths the project does not have: the agent sees
    an empty folder of that name, and the report says why it is there."""
    if not names:
        return ""
    return (
        f"; {', '.join(names)} absent here: held by an empty read-only folder"
        " while it runs, so that the agent cannot create a file agentcell or"
        " Claude Code would read later"
    )


def _bind_read_only(workdir: str, workdir_fd: int, name: str) -> bool:
    """``name`` bound read-only; True when the project has none and a placeholder (this
    process's or a sibling's) holds it."""
    if not _make_placeholder(workdir_fd, name):
        return False
    placeholder = _is_placeholder(workdir_fd, name)
    fd = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=workdir_fd)
    try:
        if stat.S_ISLNK(os.fstat(fd).st_mode):
            raise MountError(
                errno.ELOOP,
                f"{workdir}/{name} is a link: agentcell protects it by a read-only mount "
                "and will not follow a link to do so; replace the link with the folder or file",
            )
        # Onto the path (a lookup that crosses the new mount for the remount), from the
        # descriptor checked above.
        path = os.path.join(workdir, name)
        _mount(f"/proc/self/fd/{fd}", path, _MS_BIND | _MS_REC)
        # Keep the flags the mount had (in a user namespace they are locked: a remount
        # that dropped one would be refused), and add read-only.
        _mount(None, path, _MS_BIND | _MS_REMOUNT | _MS_RDONLY | _kept_flags(path))
    finally:
        os.close(fd)
    return placeholder


_KEPT = (  # statvfs f_flag bit -> mount flag (the same values on Linux)
    (os.ST_NOSUID, _MS_NOSUID),
    (os.ST_NODEV, _MS_NODEV),
    (os.ST_NOEXEC, 8),
    (os.ST_NOATIME, 1024),
    (os.ST_NODIRATIME, 2048),
    (os.ST_RELATIME, 1 << 21),
)


def _kept_flags(path: str) -> int:
    have = os.statvfs(path).f_flag
    return functools.reduce(or_, (flag for bit, flag in _KEPT if have & bit), 0)


#: The workdirs this process holds a shared lock on, for its whole life.
_held: list[int] = []


def _hold(workdir: str) -> None:
    """A shared ``flock`` on the workdir while this sub-agent lives: a placeholder that
    is removed while some sub-agent has it mounted (rmdir from the host's namespace is
    allowed and detaches that mount) would let that one create the path after all."""
    fd = os.open(workdir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    fcntl.flock(fd, fcntl.LOCK_SH)  # waits only while a parent removes placeholders
    _held.append(fd)


def remove_placeholders(workdir: str | os.PathLike[str]) -> None:
    """Parent side: take away each placeholder (an empty folder with the mark) that is
    still there, only when no sub-agent of any agentcell runs in ``workdir``
    (the exclusive lock is free); otherwise the one that closes last removes them."""
    try:
        fd = os.open(workdir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return  # a sub-agent still runs here (this agentcell's or another's)
    try:
        # The protected paths' and the code entries' (any name): marked ones only.
        try:
            names = os.listdir(fd)
        except OSError:
            names = list(PROTECTED)
        for name in names:
            if _is_placeholder(fd, name):
                with contextlib.suppress(OSError):
                    os.rmdir(name, dir_fd=fd)  # empty only: rmdir removes nothing else
    finally:
        os.close(fd)  # and the lock with it


def _is_placeholder(workdir_fd: int, name: str) -> bool:
    """A folder (not a link) with the placeholders' modification time."""
    try:
        info = os.stat(name, dir_fd=workdir_fd, follow_symlinks=False)
    except OSError:
        return False
    return stat.S_ISDIR(info.st_mode) and info.st_mtime_ns == PLACEHOLDER_MTIME_NS
