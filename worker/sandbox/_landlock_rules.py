"""The Landlock rules every sub-agent's sandbox has, whatever its run: the system
folders, ``/etc`` without its secrets, the usual devices; and the ruleset they go in.

A spare adds them before its Hello (``_sandbox_spare``), a run that cannot use that
ruleset adds them at its sandbox's entry (``_sandbox``). ``/etc`` is listed once per fork
server and reused while it is unchanged (``etc_paths``); the rules come from the fork
server's held descriptors where it holds them (``_landlock_held``).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable

from agentcell.worker.sandbox import _landlock, _landlock_held
from agentcell.worker.sandbox._landlock import Ruleset

#: Files of /etc that hold secrets: never readable inside the sandbox.
_ETC_SECRETS = frozenset(
    {"shadow", "shadow-", "gshadow", "gshadow-", "sudoers", "sudoers.d", "security", "ssl"}
)
SYSTEM_READ = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/proc", "/sys")
#: No tty device (``/dev/tty``, ``/dev/pts``): the user's terminal is never in the walls.
DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")


def new_ruleset(abi: int, *, wall_tcp: bool) -> Ruleset:
    """A ruleset handling every file right and scope of ``abi``, and TCP if ``wall_tcp``."""
    net = _landlock.net_rights(abi) if wall_tcp else 0
    return Ruleset(fs=_landlock.fs_rights(abi), net=net, scoped=_landlock.scopes(abi))


def allow_common(ruleset: Ruleset, etc_key: tuple[int, ...]) -> None:
    """The rules every sandbox has, whatever its run: the system folders, ``/etc``
    without its secrets, the usual devices."""
    allow(ruleset, SYSTEM_READ, _landlock.READ, etc_key)
    allow(ruleset, ["/etc"], _landlock.READ_DIR, etc_key)  # listing only: files one by one
    allow(ruleset, etc_paths(etc_key), _landlock.READ_FILE | _landlock.READ_DIR, etc_key)
    device = _landlock.READ_FILE | _landlock.WRITE_FILE | _landlock.IOCTL_DEV
    allow(ruleset, DEVICES, device, etc_key)


def allow(ruleset: Ruleset, paths: Iterable[str], rights: int, etc_key: tuple[int, ...]) -> None:
    """A rule for each path: from the fork server's descriptor where it holds one
    (``_landlock_held``), else opened here."""
    for path in paths:
        held = _landlock_held.lookup(path, etc_key)
        if held is None:
            ruleset.allow_path(path, rights)
        else:
            ruleset.allow_fd(held.fd, rights, path, is_dir=held.is_dir)


def etc_key_now() -> tuple[int, ...]:
    """The modification times of the folders ``etc_paths`` lists (an entry added,
    removed, renamed or replaced in one changes its time)."""
    return (_mtime_ns("/etc"), _mtime_ns("/etc/ssh"), _mtime_ns("/etc/ssl"))


def etc_paths(key: tuple[int, ...] | None = None) -> list[str]:
    """``/etc`` entry by entry, without the secrets (Landlock rules can only allow).

    Cached while ``/etc``, ``/etc/ssh`` and ``/etc/ssl`` keep their modification times
    (``etc_key_now``), so a fork server's children reuse its listing."""
    key = etc_key_now() if key is None else key
    cached = _etc_cache.get(key)
    if cached is None:
        cached = list(_list_etc())
        _etc_cache.clear()
        _etc_cache[key] = cached
    return cached


_etc_cache: dict[tuple[int, ...], list[str]] = {}


def _mtime_ns(path: str) -> int:
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return -1


def _list_etc() -> Iterable[str]:
    try:
        names = os.listdir("/etc")
    except OSError:
        return
    for name in sorted(names):
        if name in _ETC_SECRETS:
            continue
        path = f"/etc/{name}"
        if name == "ssh":  # host keys: only the public halves and the configuration
            with contextlib.suppress(OSError):
                for inner in os.listdir(path):
                    if not inner.endswith("_key"):
                        yield f"{path}/{inner}"
            continue
        yield path
    yield "/etc/ssl/certs"
    for name in ("openssl.cnf", "cert.pem"):
        yield f"/etc/ssl/{name}"
