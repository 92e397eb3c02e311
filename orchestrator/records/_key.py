"""The user's record key: kept outside every workdir, read by the parent only.

``$XDG_STATE_HOME/agentcell/record-key`` (``~/.local/state/agentcell/record-key`` when the
variable is unset): 32 random bytes, 0600 in a 0700 folder, made on first use. A sandboxed
sub-agent cannot read it (its walls grant no part of the home but git's config); it gets
the key of its own record only (``AgentSpec.record_key``), derived here.
"""

from __future__ import annotations

import logging
import os
import secrets
from pathlib import Path

from agentcell.worker import RecordTampered, chain_end, record_key, verified_lines

log = logging.getLogger("agentcell")

KEY_BYTES = 32


def key_path() -> Path:
    state = os.environ.get("XDG_STATE_HOME") or os.path.join(
        os.path.expanduser("~"), ".local", "state"
    )
    return Path(state) / "agentcell" / "record-key"


def user_key() -> bytes:
    """The key (made now if there is none); ``OSError`` with one line when it is unusable."""
    path = key_path()
    try:
        return _read_key(path)
    except FileNotFoundError:
        pass
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    draft = path.with_name(f".record-key.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        os.write(fd, secrets.token_bytes(KEY_BYTES))
    finally:
        os.close(fd)
    try:
        os.link(draft, path)  # atomic, and never over a key another process just made
    except FileExistsError:
        pass
    finally:
        os.unlink(draft)
    return _read_key(path)


def _read_key(path: Path) -> bytes:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        info = os.fstat(fd)
        key = os.read(fd, KEY_BYTES + 1)
    finally:
        os.close(fd)
    if info.st_uid != os.getuid() or info.st_mode & 0o077 or len(key) != KEY_BYTES:
        raise OSError(
            f"{path} is not a private {KEY_BYTES}-byte key of this user: remove it "
            "(a new one is made; records signed with the old one can no longer be resumed)"
        )
    return key


def key_for(run_dir: str | Path, agent_id: str) -> bytes:
    """The MAC key of ``<run_dir>/<agent_id>.jsonl`` (b"" when no key can be had: the
    record is written unsigned, and resume refuses it)."""
    global _warned
    try:
        return record_key(user_key(), Path(run_dir).name, agent_id)
    except OSError as exc:
        if not _warned:  # once: every sub-agent start would say it again
            _warned = True
            log.warning("run records are not signed, so they cannot be resumed: %s", exc)
        return b""


_warned = False


def record_end(path: Path) -> bytes | None:
    """Where the record's chain ends now (None: there is no record to read)."""
    try:
        return chain_end(path)
    except OSError:
        return None


def verified_record(path: Path, end: bytes | None = None) -> list[bytes]:
    """The lines of a record whose chain holds (and ends at ``end``, when given: where it
    ended with its agent); ``LookupError`` (one line) otherwise."""
    try:
        key = record_key(user_key(), path.parent.name, path.stem)
    except OSError as exc:
        raise LookupError(f"cannot check {path}: {exc}") from None
    try:
        return verified_lines(path, key, end)
    except RecordTampered as exc:
        raise LookupError(
            f"refusing to resume from a record that does not verify: {exc}; start a new run"
        ) from None
