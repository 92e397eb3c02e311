"""A journal file: append-only records, each one whole or seen to be cut.

The file opens with ``MAGIC``; each record after it is a 4-byte big-endian payload
length, the payload's CRC-32, and the payload (a msgpack map with a ``"k"``, its kind).
One record is one ``write(2)`` of ``O_APPEND``: a SIGKILL of the parent lands between
records, never inside one, and what was written is in the page cache for the kernel to
put on the disk. A power loss can cut the last record or lose the ones after the last
``sync`` (``fdatasync``); a full disk can leave part of one. The reader stops at the
first record that is not whole (its length runs past the end, its CRC is wrong, its
payload is no map) and says where, in one line; the writer, after a failed write, cuts
the file back to its last whole record so that the journal stays readable up to there.

Why files and not SQLite: one process writes, records are only appended and read back
whole at a resume, and a record is written by the event loop in one system call (a few
microseconds) with no transaction, no thread and no second file (docs/reliability.md).
"""

from __future__ import annotations

import errno
import os
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

MAGIC = b"agentcell-journal 1\n"
_HEAD = struct.Struct(">II")
#: A record longer than this is not one the writer made: the file is damaged there.
MAX_RECORD = 256 * 1024 * 1024
_ENCODER = msgspec.msgpack.Encoder()
_DECODER = msgspec.msgpack.Decoder(dict[str, Any])


class JournalBroken(OSError):
    """The journal could not be written (a full disk, an I/O error); ``str()`` is one line."""

    def __str__(self) -> str:
        return str(self.strerror)


def encode_record(kind: str, fields: dict[str, Any]) -> bytes:
    payload = _ENCODER.encode({"k": kind, **fields})
    return _HEAD.pack(len(payload), zlib.crc32(payload)) + payload


class JournalWriter:
    """Appends records to one journal file, which only the parent opens (0600)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC
        self._fd = os.open(path, flags, 0o600)
        self.broken: JournalBroken | None = None
        self._unsynced = False
        self._end = os.fstat(self._fd).st_size
        if self._end == 0:
            self._write(MAGIC)

    def append(self, kind: str, /, **fields: Any) -> None:
        """Write one record now; ``JournalBroken`` when it could not be (the journal then
        ends at its last whole record, and every later append raises the same error)."""
        if self.broken is not None:
            raise self.broken
        self._write(encode_record(kind, fields))

    def _write(self, data: bytes) -> None:
        try:
            written = os.write(self._fd, data)
            if written != len(data):  # a full disk part-way through: no room for the rest
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        except OSError as exc:
            self._fail(exc)
        self._end += len(data)
        self._unsynced = True

    def _fail(self, exc: OSError) -> None:
        try:
            os.ftruncate(self._fd, self._end)  # back to the last whole record
        except OSError:
            pass  # the reader stops at the cut record all the same
        what = "the disk is full" if exc.errno in (errno.ENOSPC, errno.EDQUOT) else str(exc)
        self.broken = JournalBroken(
            exc.errno or errno.EIO,
            f"the run's journal could not be written ({what}) in {self.path.parent}: the run "
            "goes on, but a resume can only go on from before this point; free space on "
            "that disk",
        )
        raise self.broken from exc

    def sync(self) -> None:
        """Put what was appended on the disk (``fdatasync``): a power loss keeps it."""
        if self._unsynced and self.broken is None:
            self._unsynced = False
            try:
                os.fdatasync(self._fd)
            except OSError as exc:
                self._fail(exc)

    def close(self) -> None:
        if self._fd >= 0:
            try:
                self.sync()
            except JournalBroken:
                pass
            finally:
                os.close(self._fd)
                self._fd = -1


@dataclass(frozen=True)
class JournalRead:
    """The whole records of a journal, in order, and what follows the last of them."""

    records: list[dict[str, Any]]
    #: Empty when the file ends with a whole record; else one line: where and why it stops.
    damage: str = ""


def read_journal(path: Path) -> JournalRead:
    """Every whole record; a cut or damaged tail is said in ``damage``, never raised.
    ``OSError`` when the file cannot be opened; ``ValueError`` (one line) when it is no
    journal at all."""
    with os.fdopen(os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC), "rb") as file:
        data = file.read()
    if not data.startswith(MAGIC):
        if MAGIC.startswith(data):
            return JournalRead([], "the journal ends inside its first line: nothing was recorded")
        raise ValueError(f"{path} is not an agentcell journal")
    records = []
    damage = ""
    for offset, record, problem in _records(data, len(MAGIC)):
        if problem:
            damage = f"the journal stops at byte {offset} of {len(data)}: {problem}"
            break
        records.append(record)
    return JournalRead(records, damage)


def _records(data: bytes, offset: int) -> Iterator[tuple[int, dict[str, Any], str]]:
    end = len(data)
    while offset < end:
        if end - offset < _HEAD.size:
            yield offset, {}, "a record cut short in its header"
            return
        length, crc = _HEAD.unpack_from(data, offset)
        start = offset + _HEAD.size
        if length > MAX_RECORD:
            yield offset, {}, f"a record claims {length} bytes (damaged)"
            return
        if start + length > end:
            yield offset, {}, f"a record cut short ({end - start} of its {length} bytes)"
            return
        payload = data[start : start + length]
        if zlib.crc32(payload) != crc:
            yield offset, {}, "a record whose checksum does not match (damaged)"
            return
        try:
            record = _DECODER.decode(payload)
        except msgspec.DecodeError:
            yield offset, {}, "a record that does not decode (damaged)"
            return
        if not isinstance(record.get("k"), str):
            yield offset, {}, "a record with no kind (damaged)"
            return
        yield offset, record, ""
        offset = start + length
