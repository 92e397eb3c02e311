"""The OS sandbox a sub-agent process puts itself in before it runs anything of the agent.

Modes (strictest last): ``off``, ``workspace``, ``read-only``. Under ``workspace`` the
process (and so its tools, its bash and everything they start) may

- write only beneath its workdir, a private temp folder and the run's tool-output folder;
  read those, the Python runtime it runs on, system libraries and programs, ``/etc``
  without its secrets, ``/proc``, ``/sys`` and the usual ``/dev`` files — nothing else of
  the user's home (Landlock file rules);
- connect over TCP only to its model endpoint's port, when its model is an HTTP provider
  and no in-process custom code (tools, a model object) came with the run (Landlock);
- not signal or ptrace anything outside its own tree (Landlock scopes, ABI 6);
- not open any terminal (no tty device is in its walls; it has no controlling terminal);
- not use the kernel keyring, ptrace, ``process_vm_*``, io_uring, bpf, perf events,
  userfaultfd, nor the TIOCSTI/TIOCLINUX ioctls (a seccomp filter on all its threads,
  inherited by all it starts: ``_seccomp``);
- have at most ``max_processes`` processes and threads in its tree (cgroup ``pids``).

``bash`` commands get one more, stacked domain with no TCP at all and, where the kernel
lets us, a network namespace of their own (no UDP, no abstract sockets either), unless
the run has ``network: true``; and a stacked seccomp filter with no ``socket(AF_UNIX, …)``
(a path a UNIX socket connects to is no Landlock right), also unless ``network: true``.
``read-only`` is ``workspace`` with the workdir read-only.

Every mechanism is detected, never assumed; what is missing is named in the report that
goes back to the parent (``SandboxReport``), never silently skipped.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import functools
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from agentcell.worker.sandbox import (
    _bash_userns,
    _capabilities,
    _cgroup,
    _egress_relay,
    _grants,
    _landlock,
    _mountns,
    _seccomp,
    _tmpcap,
)
from agentcell.worker.sandbox import _landlock_rules as _common_rules
from agentcell.worker.sandbox import _spare as _sandbox_spare
from agentcell.worker.sandbox._landlock import Ruleset
from agentcell.worker.sandbox._paths import read_paths as _read_paths
from agentcell.worker.sandbox._spare import private_tmp

# Where the parent, the fork server and the tests have always found them.
MODES = ("off", "workspace", "read-only")  # in increasing strictness
DEFAULT_MAX_PROCESSES = 512

_CLONE_NEWUSER = 0x10000000
_CLONE_NEWNET = 0x40000000


def stricter(first: str, second: str | None) -> str:
    """The stricter of two modes (a definition's ``sandbox:`` may only narrow)."""
    if second is None:
        return first
    return max(first, second, key=MODES.index)


def parse_mode(value: str) -> str:
    mode = value.strip().lower().replace("_", "-")
    if mode == "readonly":
        mode = "read-only"
    if mode not in MODES:
        raise ValueError(f"unknown sandbox mode {value!r}: use one of {', '.join(MODES)}")
    return mode


# -- what this machine offers ----------------------------------------------------------------


def _can_unshare_net() -> str | None:
    """Which way a fresh network namespace can be had here ("net", "user+net") or None."""
    unshare = ctypes.CDLL(None, use_errno=True).unshare  # loaded before fork, not after
    for flags, name in ((_CLONE_NEWNET, "net"), (_CLONE_NEWUSER | _CLONE_NEWNET, "user+net")):
        pid = os.fork()
        if pid == 0:  # try it in a throwaway child: unshare changes the caller for good
            os._exit(0 if unshare(flags) == 0 else 1)
        _, status = os.waitpid(pid, 0)
        if os.waitstatus_to_exitcode(status) == 0:
            return name
    return None


def probe() -> dict[str, Any]:
    """What this machine can enforce, as plain data (``agentcell sandbox`` prints it)."""
    return dict(_probe())


@functools.cache  # the kernel's offer does not change while we run
def _probe() -> dict[str, Any]:
    abi = _landlock.abi_version()
    cgroup = _cgroup.controller()
    seccomp = _seccomp.probe()
    return {
        "landlock_abi": abi,
        "landlock_files": abi >= 1,
        "landlock_refer": abi >= 2,
        "landlock_truncate": abi >= 3,
        "landlock_tcp": abi >= 4,
        "landlock_ioctl_dev": abi >= 5,
        "landlock_scopes": abi >= 6,
        "no_new_privs": True,
        "network_namespace": _can_unshare_net(),
        "mount_namespace": _mountns.probe(),
        "process_cap": None if cgroup is None else f"cgroup {cgroup[0]} pids",
        "seccomp": "filter" if seccomp["available"] else f"not available: {seccomp['reason']}",
        "seccomp_refuses": seccomp["refuses"],
        "seccomp_bash_refuses": seccomp["bash_refuses"],
        "capabilities": _capabilities.probe(),
    }


def missing_for(mode: str, caps: dict[str, Any]) -> list[str]:
    """What ``mode`` cannot enforce on a machine with ``caps`` (empty: all of it holds)."""
    if mode == "off":
        return []
    missing = []
    if not caps["landlock_files"]:
        missing.append("Landlock (file walls): the kernel has none or it is disabled")
    if not caps["landlock_tcp"] and caps["network_namespace"] is None:
        missing.append("a network wall for bash (Landlock ABI 4 or network namespaces)")
    if not caps["landlock_scopes"]:
        missing.append("signal and abstract-socket scoping (Landlock ABI 6)")
    if caps["process_cap"] is None:
        missing.append("a process cap (a writable cgroup pids controller)")
    if not caps["seccomp_refuses"]:
        missing.append(f"the seccomp filter (keyring, ptrace, io_uring, …): {caps['seccomp']}")
    if not str(caps.get("capabilities", "none")).startswith("none"):
        missing.append(f"dropping every capability: {caps['capabilities']}")
    if caps.get("mount_namespace") is None and mode == "workspace":
        missing.append(_mountns.MISSING)
        missing.append(_tmpcap.MISSING)
    return missing


def workdir_owner_note(workdir: str) -> str:
    """One line when ``workdir`` belongs to another uid than the one running agentcell
    ("" otherwise): a sub-agent holds no capability, root's included, so it gets what the
    folder's mode bits give its group or other users, not what its owner gets."""
    try:
        info = os.stat(workdir)
    except OSError:
        return ""
    me = os.geteuid()
    if info.st_uid == me:
        return ""
    group = info.st_gid == os.getegid() or info.st_gid in os.getgroups()
    bits = (info.st_mode >> (3 if group else 0)) & 0o7
    perm = "".join(c if bits & m else "-" for c, m in (("r", 4), ("w", 2), ("x", 1)))
    return (
        f"the workdir {workdir} is owned by uid {info.st_uid}, not by uid {me} that runs "
        "agentcell: sub-agents hold no capability, so they get what its mode bits give "
        f"{'its group' if group else 'other users'} ({perm})"
    )


# -- the child applying it to itself ----------------------------------------------------------


class Sandbox:
    """What this process applied; ``report`` says it in the words the parent records."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.abi = 0
        self.tmpdir: str | None = None
        self.cap: _cgroup.ProcessCap | None = None
        self.model_ports: list[int] | None = None  # None: the process's own TCP is open
        self.bash_network = True
        self.missing: list[str] = []
        self.seccomp = False  # this process's filter is installed
        self.writable: list[str] = []  # the writable roots the walls actually grant
        self.protected = ""  # how the workdir's protected paths are kept read-only
        # Entries of the workdir holding code that runs outside the walls: read-only too.
        self.code_entries: list[str] = []
        self.tmp_size_mb = 0  # the cap asked for on the private temp folder (0: none)
        self.tmp_cap = ""  # the cap it got (_tmpcap)
        self._bash_ruleset: Ruleset | None = None
        self._bash_filter: _seccomp.Filter | None = None  # no AF_UNIX sockets for bash
        self.egress_port: int | None = None  # the parent's proxy: bash's only way out
        self.egress: _egress_relay.Namespace | None = None  # bash's namespace and relay
        self.bash_userns = -1  # the user namespace bash's commands enter (_bash_userns)
        self.capabilities = ""  # what _capabilities dropped, in the report's words

    # The shape recorded on SubAgentResult.sandbox.
    def report(self) -> str:
        if self.mode == "off":
            return "off"
        parts = [self.mode]
        parts.append(f"landlock abi {self.abi}" if self.abi else "no landlock")
        if self.model_ports is not None:
            parts.append("own tcp: " + (",".join(map(str, self.model_ports)) or "none"))
        if self.egress_port is not None:
            how = "a relay in its own network namespace" if self.egress else "Landlock only"
            parts.append(f"bash network: the parent's proxy only ({how})")
        else:
            parts.append("bash network" if self.bash_network else "bash no network")
        if self.seccomp:
            parts.append(
                "seccomp" if self._bash_filter is None else "seccomp, bash no unix sockets"
            )
        if self.capabilities:
            parts.append(self.capabilities)
        if self.protected:
            parts.append(self.protected)
        if self.tmp_cap:
            parts.append(self.tmp_cap)
        if self.writable:
            parts.append("writes: " + " ".join(self.writable))
        if self.cap is not None:
            parts.append(f"max {self.cap.limit} processes")
        if self.missing:
            parts.append("missing: " + "; ".join(self.missing))
        return ", ".join(parts)

    def process_cap_hit(self) -> bool:
        return self.cap is not None and self.cap.times_hit() > 0

    def bash_preexec(self) -> Callable[[], None] | None:
        """What bash's child runs between fork and exec: its network namespace (inside
        the user namespace made for it, ``_bash_userns``), the capabilities it got there
        dropped, the no-network domain, then the filter without UNIX sockets (last:
        nothing before it needs a socket)."""
        unix_filter = self._bash_filter
        if self.bash_network:
            return None if unix_filter is None else unix_filter.install_in_child
        ruleset = self._bash_ruleset
        libc = ctypes.CDLL(None, use_errno=True)  # loaded now, not after fork
        unshare, setns = libc.unshare, libc.setns
        egress = self.egress
        nsfd = egress.nsfd if egress is not None else -1
        userfd = egress.userfd if egress is not None else self.bash_userns
        via_host = egress is None and self.egress_port is not None
        dropper = _capabilities.dropper() if self.capabilities else None

        def enter() -> None:
            # The user namespace made for bash, where the sub-agent's uid holds what a
            # network namespace needs: joining it cannot fail but by a kernel's refusal.
            if userfd >= 0 and setns(userfd, _CLONE_NEWUSER) != 0:
                os._exit(126)
            # A network namespace of its own (no UDP, no abstract sockets either); where
            # none can be had, the Landlock layer below still refuses every TCP connection.
            if nsfd >= 0:  # under a network: list: the namespace with the proxy's relay
                isolated = setns(nsfd, _CLONE_NEWNET) == 0
                if not isolated:
                    os._exit(126)  # outside it bash would miss the relay: refuse
            elif via_host:  # the proxy on the host's loopback: Landlock allows its port alone
                isolated = False
            else:
                isolated = (
                    unshare(_CLONE_NEWNET) == 0 or unshare(_CLONE_NEWUSER | _CLONE_NEWNET) == 0
                )
            if dropper is not None:  # what a user namespace entered above gave
                dropper.drop_in_child()
            if ruleset is not None:
                ruleset.restrict_self_in_child()
            if not isolated and ruleset is None:
                os._exit(126)  # no wall at all would be a silent skip: refuse instead
            if unix_filter is not None:
                unix_filter.install_in_child()

        return enter

    def cleanup(self) -> None:
        # What is inside; the folder itself is the parent's to remove (see release).
        if self.tmpdir is not None:
            for entry in os.scandir(self.tmpdir):
                if entry.is_dir(follow_symlinks=False):
                    shutil.rmtree(entry.path, ignore_errors=True)
                else:
                    with contextlib.suppress(OSError):
                        os.unlink(entry.path)


def remove_stale_tmps() -> list[int]:
    """Remove the private temp folders of sub-agent processes that are gone (a SIGKILLed
    orchestrator never released them: 201 MiB in one case); returns their pids.

    Only a folder named for a pid that no longer exists goes: a starting sub-agent makes
    its own under its live pid, and a reused pid keeps its folder until that process ends
    (its own ``apply`` clears it first anyway)."""
    root = private_tmp(0).parent
    removed = []
    with contextlib.suppress(OSError):
        if root.is_symlink() or root.stat().st_uid != os.getuid():
            return []  # not this user's own folder: nothing in it is ours to remove
        for entry in os.scandir(root):
            if not entry.name.isdigit() or not entry.is_dir(follow_symlinks=False):
                continue
            if os.path.exists(f"/proc/{entry.name}"):
                continue
            shutil.rmtree(entry.path, ignore_errors=True)
            removed.append(int(entry.name))
    return removed


def release(pid: int) -> None:
    """Parent side, once sub-agent ``pid`` is gone: its cgroup and its temp folder."""
    _cgroup.release_process_cap(pid)
    shutil.rmtree(private_tmp(pid), ignore_errors=True)


#: The sandbox this process is in (set once by ``apply``); bash asks it for its preexec.
CURRENT: Sandbox | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class Access:
    """What the walls leave open besides the workdir.

    Folders: ``run_dir`` (the run's tool outputs) and ``memory_dir`` writable,
    ``read_paths`` readable, ``code_entries`` (entries of the workdir holding code that
    runs outside the walls) read-only even in a writable workdir. Network: all of it
    with ``network``; else TCP to ``model_ports`` only (None: this process's TCP is not
    walled), and for bash ``egress_port`` only (the parent's proxy).
    """

    run_dir: str = ""
    memory_dir: str = ""
    read_paths: Iterable[str] = ()
    code_entries: Iterable[str] = ()
    network: bool = False
    model_ports: list[int] | None = None
    egress_port: int | None = None


def apply(
    mode: str,
    *,
    workdir: str,
    access: Access | None = None,
    env: dict[str, str] | None = None,
    max_processes: int | None = None,
    cap_processes: bool = True,
    tmp_size_mb: int = 0,
) -> Sandbox:
    """Restrict this process for good. ``env`` (bash's) gets the private ``TMPDIR``
    (under ``workspace``, a tmpfs of ``tmp_size_mb`` MiB: ``_tmpcap``); with
    ``access.egress_port`` (the parent's proxy), bash reaches that proxy and nothing
    else. ``cap_processes``: cap the tree at ``max_processes`` (default 512)."""
    global CURRENT
    access = access or Access()
    network, ports, egress_port = access.network, access.model_ports, access.egress_port
    box = Sandbox(parse_mode(mode))
    box.tmp_size_mb = tmp_size_mb
    box.code_entries = list(access.code_entries)
    CURRENT = box
    if box.mode == "off":
        _sandbox_spare.drop_spare_ruleset()
        return box
    caps_abi = _landlock.abi_version()
    box.abi = caps_abi
    box.tmpdir = str(_sandbox_spare.spare_tmp() or _sandbox_spare.make_private_tmp())
    os.environ["TMPDIR"] = box.tmpdir
    tempfile.tempdir = box.tmpdir
    if env is not None:
        env["TMPDIR"] = box.tmpdir
    if cap_processes:
        box.cap = _cgroup.ProcessCap.create(max_processes or DEFAULT_MAX_PROCESSES)
        if box.cap is None:
            box.missing.append("process cap")
    if egress_port is not None and not network:
        box.egress_port = egress_port
        if env is not None:
            env.update(_egress_relay.proxy_env(egress_port))
    bash_namespaces = _take_bash_namespaces(box)
    if caps_abi < 1:
        box.missing.append("file walls (no Landlock)")
        _landlock.set_no_new_privs()
    else:
        _restrict_process(
            box,
            abi=caps_abi,
            workdir=workdir,
            run_dir=access.run_dir,
            model_ports=None if ports is None else [*ports, *_ports(egress_port)],
            read_paths=access.read_paths,
            memory_dir=access.memory_dir,
        )
    if box.egress_port is not None:
        # After the mount namespace (which needs this process single-threaded: the
        # namespace is made from a thread) and before the seccomp filter.
        _prepare_egress(box, box.egress_port, bash_namespaces)
    if not network:
        _prepare_bash_wall(box, caps_abi)
    _drop_capabilities(box)
    _install_seccomp(box, bash_unix_sockets=network)
    return box


def _drop_capabilities(box: Sandbox) -> None:
    """Last of the set-up, before the filter: every capability set, for good."""
    try:
        kept = _capabilities.drop()
    except _capabilities.CapabilityError as exc:
        raise OSError(exc.errno, f"cannot drop its capabilities: {exc.strerror}") from None
    box.capabilities = "no capabilities" + (f" ({kept})" if kept else "")


def before_servers(mode: str) -> None:
    """Before a walled run starts its MCP servers (outside the walls, but in its user
    namespace): whatever it executes from now on gains no capability (``_capabilities.
    lock``), root's programs included; its own capabilities end with its set-up."""
    if parse_mode(mode) == "off":
        return
    try:
        _capabilities.lock()
    except _capabilities.CapabilityError as exc:
        raise OSError(exc.errno, f"cannot drop its capabilities: {exc.strerror}") from None


def launcher_seccomp(mode: str) -> str:
    """The process filter for a launcher that starts a program before the walls go up
    (an MCP server): ``-`` under ``off`` or where no filter can be installed."""
    if parse_mode(mode) == "off" or _seccomp.unavailable() is not None:
        return "-"
    process_filter = _seccomp.process_filter()
    return "-" if process_filter is None else process_filter.launcher_arg()


def _install_seccomp(box: Sandbox, *, bash_unix_sockets: bool) -> None:
    """The second wall, last: after the process's own set-up, on every thread. Both
    filters were built in the fork server (``_seccomp.prepared``): here they are loaded."""
    ready = _seccomp.prepared()
    if ready.reason is not None or ready.process is None:
        box.missing.append(f"seccomp filter ({ready.reason})")
        return
    ready.process.install()
    box.seccomp = True
    if not bash_unix_sockets:  # bash's preexec only loads it
        box._bash_filter = ready.bash


def _restrict_process(
    box: Sandbox,
    *,
    abi: int,
    workdir: str,
    run_dir: str,
    model_ports: list[int] | None,
    read_paths: Iterable[str],
    memory_dir: str = "",
) -> None:
    # Writable never includes making device nodes: as root, ``mknod`` of the terminal's
    # (or a disk's) numbers in the workdir would open what the walls keep out.
    everything = _landlock.fs_rights(abi) & ~(_landlock.MAKE_CHAR | _landlock.MAKE_BLOCK)
    etc_key = _common_rules.etc_key_now()
    wall_tcp = model_ports is not None
    ruleset = _sandbox_spare.spare_ruleset(abi, wall_tcp=wall_tcp, etc_key=etc_key)
    if ruleset is None:
        ruleset = _common_rules.new_ruleset(abi, wall_tcp=wall_tcp)
        try:
            _common_rules.allow_common(ruleset, etc_key)
        except BaseException:
            ruleset.close()
            raise
    try:
        _common_rules.allow(ruleset, _read_paths(workdir, read_paths), _landlock.READ, etc_key)
        _grant_folders(
            box, ruleset, everything, workdir=workdir, run_dir=run_dir, memory_dir=memory_dir
        )
        if model_ports is not None:
            for port in model_ports:
                ruleset.allow_port(port)
            box.model_ports = sorted(model_ports)
            if box.egress_port is not None:  # the relay's listener, in bash's namespace
                ruleset.allow_port(box.egress_port, _landlock.NET_BIND_TCP)
        ruleset.restrict_self()
    finally:
        ruleset.close()
    if abi < 6:
        box.missing.append("signal scoping (Landlock ABI 6)")


def _grant_folders(
    box: Sandbox, ruleset: Ruleset, everything: int, *, workdir: str, run_dir: str, memory_dir: str
) -> None:
    """The writable folders (and the workdir), checked and granted from descriptors;
    under ``workspace`` the workdir's protected paths go read-only first."""
    grants = _grants.open_grants(
        workdir=workdir,
        workdir_writable=box.mode == "workspace",
        tmpdir=box.tmpdir or "",
        run_dir=run_dir,
        memory_dir=memory_dir,
        git_admin=_git_admin(workdir),
    )
    try:
        if box.mode == "workspace":
            _protect_paths(box, workdir, grants)
            _tmpcap.cap(box, grants)  # in the mount namespace just made, if any
        for grant in grants.items:
            ruleset.allow_fd(grant.fd, everything if grant.writable else _landlock.READ, grant.path)
        box.writable = grants.writable_roots()
    finally:
        grants.close()


def _protect_paths(box: Sandbox, workdir: str, grants: _grants.Grants) -> None:
    def covered(grant: _grants.Grant | None) -> bool:
        return grant is not None and any(
            grant.path.startswith(f"{workdir}/{name}/") for name in _mountns.PROTECTED
        )

    memory, outputs = grants.memory, grants.outputs
    done = _mountns.protect(
        workdir,
        [(memory.fd, memory.path)] if memory is not None and covered(memory) else [],
        (outputs.fd, outputs.path) if outputs is not None and covered(outputs) else None,
        box.code_entries,
    )
    if done is None:
        box.missing.append(_mountns.MISSING)
    else:
        box.protected = done


def _prepare_bash_wall(box: Sandbox, abi: int) -> None:
    """Build (now, outside the fork) the stacked domain bash's commands enter."""
    box.bash_network = False
    if abi >= 4:
        # No signal scope at this layer: the child's own layer already keeps signals in
        # its tree, and bash may still signal the sub-agent process (its own parent).
        scoped = _landlock.scopes(abi) & _landlock.SCOPE_ABSTRACT_UNIX_SOCKET
        box._bash_ruleset = Ruleset(fs=0, net=_landlock.net_rights(abi), scoped=scoped)
        if box.egress_port is not None:  # the relay (or, without a namespace, the proxy)
            box._bash_ruleset.allow_port(box.egress_port)
    if box._bash_ruleset is None and _probe()["network_namespace"] is None:
        box.bash_network = True
        box.missing.append("bash network wall")


#: What ``prepare_bash_namespaces`` made for this process: (user fd, net fd or -1), or why
#: none; None when it was not called (nothing was needed).
_bash_namespaces: tuple[int, int] | str | None = None


def prepare_bash_namespaces(mode: str, *, network: bool, egress: bool, processes: bool) -> None:
    """At the start of a walled run, before it turns non-dumpable: the user namespace bash's
    commands enter (``_bash_userns``) and, with ``egress`` (a ``network:`` list), the
    network namespace of the relay. Its maker writes its own uid map under /proc, which
    it may only while this process is dumpable (and not yet behind Landlock). None is
    needed with ``network: true`` or ``off``, nor for a run that starts no process (the
    fork is spared)."""
    global _bash_namespaces
    if parse_mode(mode) == "off" or network or not (processes or egress):
        return
    pair = _bash_userns.shared()
    if not egress and _mountns.joined_shared and pair is not None:
        _bash_namespaces = (pair[1], -1)  # the inner one, below the outer this process joined
        return
    _bash_namespaces = _bash_userns.make(net=egress)


def _take_bash_namespaces(box: Sandbox) -> tuple[int, int] | str:
    global _bash_namespaces
    made, _bash_namespaces = _bash_namespaces, None
    if made is None:
        return "not made"
    if not isinstance(made, str):
        box.bash_userns = made[0]
    return made


def _prepare_egress(box: Sandbox, port: int, namespaces: tuple[int, int] | str) -> None:
    """bash's way to the parent's proxy: a namespace with a relay where the kernel lets
    us, else the host's loopback with Landlock allowing the proxy's port alone."""
    made = (
        namespaces
        if isinstance(namespaces, str)
        else _egress_relay.make_namespace(port, *namespaces)
    )
    if isinstance(made, str):
        box.missing.append(f"bash's own network namespace ({made}): Landlock walls it alone")
    else:
        box.egress = made


def _ports(port: int | None) -> list[int]:
    return [] if port is None else [port]


def _git_admin(workdir: str) -> list[tuple[str, bool]]:
    """For a git worktree: its own admin folder (HEAD, index: writable) and the shared
    repository (read-only: objects, refs, config and hooks stay out of its reach)."""
    marker = Path(workdir) / ".git"
    if not marker.is_file():
        return []
    try:
        text = marker.read_text().strip()
    except OSError:
        return []
    if not text.startswith("gitdir:"):
        return []
    admin = (Path(workdir) / text.removeprefix("gitdir:").strip()).resolve()
    found = [(str(admin), True)]
    with contextlib.suppress(OSError):
        common = (admin / (admin / "commondir").read_text().strip()).resolve()
        found.append((str(common), False))
    return found
