"""Chat's own record on a full disk: the session goes on, the disk is named in one line."""

from __future__ import annotations

import errno
import logging
from pathlib import Path
from types import SimpleNamespace

import pytest
from agentcell.orchestrator.cli._chat import ChatRecord
from agentcell.orchestrator.records import _store as _records
from agentcell.protocol import Usage


def test_a_chat_summary_the_full_disk_refuses_is_one_line_not_a_crash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def full(path: Path, text: str) -> None:
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(_records, "_write_private", full)
    record = ChatRecord(tmp_path, "scripted:echo")
    orch = SimpleNamespace(ledger=SimpleNamespace(total=Usage(), cost_usd=0.0))
    with caplog.at_level(logging.WARNING):
        record.write(orch)  # type: ignore[arg-type]
    assert "the disk is full" in caplog.text and "summary.json" in caplog.text
