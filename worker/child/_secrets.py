"""API keys held in this process's memory instead of its environment.

A process's environment is readable by others: ``/proc/<pid>/environ`` shows its
initial block to any process of the same user (and children inherit ``os.environ``).
While an orchestrator runs, ``hold_secrets`` takes the keys named in ``SECRET_NAMES``
out of ``os.environ``, overwrites them in the initial block, and makes the process
non-dumpable (then ``/proc/<pid>/environ`` and its memory are closed to same-user
processes; root still reads everything). Providers and the redactor look keys up here;
each child gets only its own provider's key, over its private pipe.
"""

from __future__ import annotations

import os
import threading

from agentcell.worker.child import _proc

#: Environment variables whose values are secrets wherever they appear.
SECRET_NAMES = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN")

_lock = threading.Lock()
_held: dict[str, str] = {}
_holders = 0
_was_dumpable = True


def secret(name: str) -> str | None:
    """The value of secret ``name``: the environment's, else the one held in memory."""
    return os.environ.get(name) or _held.get(name)


def known_secrets() -> dict[str, str]:
    """Every secret this process knows, by name (held ones, overridden by the env's)."""
    found = dict(_held)
    found.update({name: os.environ[name] for name in SECRET_NAMES if os.environ.get(name)})
    return found


def hold_secrets() -> None:
    """Move the secrets out of the environment into memory (counted: call
    ``release_secrets`` once per call). Keys set later are taken on the next call."""
    global _holders, _was_dumpable
    with _lock:
        for name in SECRET_NAMES:
            value = os.environ.pop(name, None)
            if value:
                _held[name] = value
        if _holders == 0:
            _was_dumpable = _proc.is_dumpable()
        _holders += 1
        # Overwrite first: a non-dumpable process's /proc/self/mem belongs to root.
        overwrite_initial_environment(SECRET_NAMES)
        _proc.set_dumpable(False)


def release_secrets() -> None:
    """The last holder gone: the keys go back into ``os.environ`` (where they were, for
    the code that runs after), and the process is dumpable again if it was."""
    global _holders
    with _lock:
        if _holders == 0:
            return
        _holders -= 1
        if _holders:
            return
        for name, value in _held.items():
            os.environ.setdefault(name, value)
        _held.clear()
        if _was_dumpable:
            _proc.set_dumpable(True)


def overwrite_initial_environment(names: tuple[str, ...]) -> int:
    """Zero the values of ``names`` in this process's initial environment block, which
    ``/proc/self/environ`` shows whatever ``os.environ`` says. Returns how many were
    overwritten; best effort (0 when /proc/self/mem cannot be written).

    Safe once the names are unset: libc's ``environ`` no longer points into the block.
    """
    try:
        with open("/proc/self/stat", "rb") as f:
            stat = f.read()
        fields = stat[stat.rindex(b")") + 2 :].split()
        start, end = int(fields[47]), int(fields[48])  # env_start, env_end (fields 50, 51)
        count = 0
        with open("/proc/self/mem", "r+b", buffering=0) as mem:
            mem.seek(start)
            block = mem.read(end - start)
            offset = 0
            for entry in block.split(b"\0"):
                name, sep, value = entry.partition(b"=")
                key = name.decode(errors="replace")
                if sep and value and key in names and os.environ.get(key) is None:
                    mem.seek(start + offset + len(name) + 1)
                    mem.write(b"\0" * len(value))
                    count += 1
                offset += len(entry) + 1
        return count
    except (OSError, ValueError, IndexError):
        return 0
