"""The journal on disk: records that are whole or seen to be cut, a full disk that leaves
it readable, a lock the kernel lets go when the orchestrator dies, and requests kept as
what changed since the agent's last one."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import msgspec
import pytest
from agentcell.orchestrator._calls import Calls
from agentcell.orchestrator.config._settings import Settings
from agentcell.orchestrator.journal._delta import RequestDeltas, RequestRebuilder
from agentcell.orchestrator.journal._file import (
    MAGIC,
    JournalBroken,
    JournalWriter,
    encode_record,
    read_journal,
)
from agentcell.orchestrator.journal._journal import Journal
from agentcell.orchestrator.journal._place import (
    RunLock,
    RunStillGoing,
    holder_of,
    journal_dir,
    make_journal_dir,
)
from agentcell.orchestrator.telemetry._usage import UsageLedger
from hypothesis import given
from hypothesis import strategies as st
from small_disk import mounted_tmpfs

RECORDS = [
    ("run", {"run_id": "r1"}),
    ("ask", {"agent": "a1", "call": 1, "base": 0, "messages": [b'{"role":"user"}']}),
    ("answer", {"agent": "a1", "call": 1, "status": 200, "body": b"data: {}\n\n" * 40}),
]


def _written(path: Path) -> bytes:
    writer = JournalWriter(path)
    for kind, fields in RECORDS:
        writer.append(kind, **fields)
    writer.close()
    return path.read_bytes()


def test_records_read_back_whole_and_in_order(tmp_path: Path) -> None:
    _written(tmp_path / "journal")
    read = read_journal(tmp_path / "journal")
    assert read.damage == ""
    assert [(r.pop("k"), r) for r in read.records] == RECORDS


def test_a_journal_cut_at_every_byte_of_its_last_record_keeps_the_others(
    tmp_path: Path,
) -> None:
    whole = _written(tmp_path / "journal")
    last = len(encode_record(*RECORDS[-1]))
    for cut in range(len(whole) - last, len(whole)):
        path = tmp_path / f"cut-{cut}"
        path.write_bytes(whole[:cut])
        read = read_journal(path)
        assert len(read.records) == 2, cut
        if cut == len(whole) - last:
            assert read.damage == ""  # cut between records: nothing is missing that began
        else:
            assert read.damage.startswith(f"the journal stops at byte {len(whole) - last} of")
            assert "cut short" in read.damage, read.damage
    for cut in range(len(MAGIC)):  # inside its first line: no record, one line, no error
        (tmp_path / "head").write_bytes(whole[:cut])
        assert read_journal(tmp_path / "head").records == []


def test_a_damaged_record_stops_the_reading_there_and_says_so(tmp_path: Path) -> None:
    whole = bytearray(_written(tmp_path / "journal"))
    whole[-5] ^= 0xFF
    (tmp_path / "bad").write_bytes(bytes(whole))
    read = read_journal(tmp_path / "bad")
    assert len(read.records) == 2
    assert "checksum does not match" in read.damage
    (tmp_path / "other").write_bytes(b"#!/bin/sh\necho not a journal\n")
    with pytest.raises(ValueError, match="is not an agentcell journal"):
        read_journal(tmp_path / "other")


def test_a_full_disk_breaks_the_journal_at_its_last_whole_record(tmp_path: Path) -> None:
    with mounted_tmpfs(tmp_path / "disk", "size=256k") as disk:
        writer = JournalWriter(disk / "journal")
        written = 0
        with pytest.raises(JournalBroken) as broken:
            for _ in range(1000):
                writer.append("answer", body=os.urandom(10_000))
                written += 1
        assert str(broken.value).startswith("the run's journal could not be written (the disk is")
        assert "\n" not in str(broken.value)
        with pytest.raises(JournalBroken):  # and it stays broken, saying the same
            writer.append("fact", what="later")
        writer.close()
        read = read_journal(disk / "journal")
        assert read.damage == ""
        assert len(read.records) == written > 10


def test_the_journal_is_private_and_outside_the_workdir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    run_dir = tmp_path / "work" / ".agentcell" / "runs" / "20261206-120000-abc1"
    run_dir.mkdir(parents=True)
    (tmp_path / "state" / "agentcell" / "journal").mkdir(parents=True, mode=0o755)
    previous = os.umask(0o000)  # a folder that was there, loose, and no umask at all
    try:
        journal = Journal(run_dir, run_id=run_dir.name, kind="run")
    finally:
        os.umask(previous)
    try:
        folder = journal.folder
        assert folder == journal_dir(run_dir)
        assert folder.is_relative_to(tmp_path / "state" / "agentcell" / "journal")
        for path in (folder.parent.parent, folder.parent, folder):
            assert stat.S_IMODE(path.stat().st_mode) == 0o700, path
        for path in folder.iterdir():
            assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
        # Another workdir's run of the same name has its own journal.
        other = tmp_path / "other" / ".agentcell" / "runs" / run_dir.name
        assert journal_dir(other) != folder
    finally:
        journal.close()


def test_a_run_is_held_while_its_orchestrator_lives_and_let_go_when_it_is_killed(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "j"
    folder.mkdir()
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from pathlib import Path;"
            "from agentcell.orchestrator.journal._place import RunLock;"
            "lock = RunLock(Path(sys.argv[1])); print('held', flush=True); time.sleep(60)",
            str(folder),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline() == "held\n"
        assert holder_of(folder) == holder.pid
        with pytest.raises(RunStillGoing) as going:
            RunLock(folder)
        assert going.value.pid == holder.pid
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
        assert holder.stdout is not None
        holder.stdout.close()
    assert holder_of(folder) is None  # the kernel let go of it with the process
    lock = RunLock(folder)
    assert holder_of(folder) == os.getpid()
    lock.release()
    assert holder_of(folder) is None


def _conversation(turns: int) -> list[dict[str, msgspec.Raw]]:
    messages: list[dict[str, str]] = [{"role": "system", "content": "be brief"}]
    tops = []
    for turn in range(turns):
        messages.append({"role": "user", "content": f"step {turn} " + "x" * 200})
        top = {"model": "m", "tools": [{"name": "bash"}] * 20, "messages": list(messages)}
        tops.append({k: msgspec.Raw(msgspec.json.encode(v)) for k, v in top.items()})
        messages.append({"role": "assistant", "content": f"done {turn}"})
    return tops


def test_a_request_is_journaled_as_what_its_previous_one_did_not_have() -> None:
    deltas, rebuilder = RequestDeltas(), RequestRebuilder()
    sizes = []
    for top in _conversation(40):
        fields = deltas.delta(top)
        sizes.append(len(encode_record("ask", fields)))
        rebuilt = json.loads(rebuilder.rebuild(fields))
        assert rebuilt == {k: json.loads(bytes(v)) for k, v in top.items()}
    # The first carries the tools; each later one its two new messages only.
    assert sizes[1] < sizes[0] / 2
    assert max(sizes[1:]) - min(sizes[1:]) < 16, sizes


@given(
    st.lists(
        st.tuples(st.integers(0, 6), st.lists(st.text(max_size=5), max_size=3), st.booleans()),
        max_size=8,
    )
)
def test_any_run_of_requests_rebuilds_exactly(steps: list[tuple[int, list[str], bool]]) -> None:
    """Each request keeps some of the last one's messages (or none: a compaction) and
    adds some; its other keys change or not."""
    deltas, rebuilder = RequestDeltas(), RequestRebuilder()
    messages: list[str] = []
    for keep, new, other in steps:
        messages = messages[:keep] + new
        top = {"model": msgspec.Raw(b'"a"' if other else b'"b"')}
        top["messages"] = msgspec.Raw(msgspec.json.encode(messages))
        assert json.loads(rebuilder.rebuild(deltas.delta(top))) == {
            "model": "a" if other else "b",
            "messages": messages,
        }


def test_a_runs_start_removes_the_journals_whose_run_folder_is_gone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing can resume those; a journal whose run is going, or whose run folder is
    still there, stays."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    runs = tmp_path / "work" / ".agentcell" / "runs"
    folders = {}
    for name in ("deleted", "kept", "going"):
        (runs / name).mkdir(parents=True)
        folders[name] = make_journal_dir(runs / name)
    going = RunLock(folders["going"])
    try:
        for name in ("deleted", "going"):
            (runs / name).rmdir()
        (runs / "new").mkdir()
        journal = Journal(runs / "new", run_id="new", kind="run")
        journal.close()
        assert not folders["deleted"].exists()
        assert folders["kept"].is_dir() and folders["going"].is_dir()
    finally:
        going.release()


def test_a_journal_folder_inside_the_workdir_is_not_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """agentcell run in the home folder itself: the state folder is in the workdir, which
    sub-agents may write, so a journal there could be forged by one. That run is not
    journaled, and says why; with the state folder elsewhere it is."""
    work = tmp_path / "home"
    run_dir = work / ".agentcell" / "runs" / "r1"
    run_dir.mkdir(parents=True)
    recording = SimpleNamespace(record=True, run_dir=None, call_summaries=True)
    calls = Calls(recording, Settings(), UsageLedger(), workdir=work, model_name=None)
    monkeypatch.setenv("XDG_STATE_HOME", str(work / ".local" / "state"))
    assert calls.account(run_dir, [], kind="run").journal is None
    assert "not journaling this run: the journal folder" in caplog.text
    assert not (work / ".local").exists()
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    account = calls.account(run_dir, [], kind="run")
    assert account.journal is not None
    calls.finish(account, "completed")
