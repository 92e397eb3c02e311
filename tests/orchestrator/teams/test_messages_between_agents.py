"""Messages between a run's agents, from real children against a scripted model server:
a sub-agent's message reaches a sibling at its next tool boundary (while the sibling's
bash is still running when it is sent), in an envelope naming the sender; a sub-agent's
message reaches the main agent at its next turn; both are journaled as sent and as
taken, at the turn that took them."""

from __future__ import annotations

from pathlib import Path

import pytest
from agentcell.orchestrator.journal._file import read_journal
from agentcell.orchestrator.journal._place import journal_dir
from conftest import SpawnRecorder
from http_script import _tool_results
from model_servers import ModelServer
from team_script import TEAM_AGENTS, TeamScript, run_team


async def test_a_message_reaches_a_running_sibling_at_its_next_boundary_and_the_main_agent(
    spawned: SpawnRecorder,
    tmp_path: Path,
    openai_served: ModelServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    work = tmp_path / "work"
    work.mkdir()
    script = openai_served.responder = TeamScript(work)
    report = await run_team(work, TEAM_AGENTS, record=True)
    assert report.final_text == "all done", report
    by_name = {sub.name: sub for sub in report.subagents}
    assert set(by_name) == {"waiter", "writer"}
    writer, waiter = by_name["writer"], by_name["waiter"]
    # The waiter's second request: its bash result, then the writer's message.
    second = script.bodies["wait"][1]["messages"]
    assert second[-2]["role"] == "tool" and "ready" in second[-2]["content"]
    envelope = second[-1]["content"]
    assert second[-1]["role"] == "user"
    assert f"a message from writer ({writer.agent_id}), a writer" in envelope
    assert "hello from the writer" in envelope and 'send_message with to="writer"' in envelope
    # The main agent's task call for the waiter returned early with its message (the
    # waiter went on in the background; its result came after).
    early = [r for r in _tool_results(script.bodies["main"][1]) if r.startswith("[running]")]
    assert len(early) == 1 and f"waiter ({waiter.agent_id}) sent you a message" in early[0]
    assert f"a message from waiter ({waiter.agent_id})" in early[0]
    assert "the waiter heard the writer" in early[0]
    # The writer's tool result said where it went.
    sent = _tool_results(script.bodies["write"][1])[0]
    assert sent.startswith(f"sent to waiter ({waiter.agent_id})"), sent
    # Journaled: each message as sent, and as taken at the turn that took it.
    records = read_journal(journal_dir(Path(report.run_dir)) / "journal").records
    facts = [(r["what"], r) for r in records if r.get("what") in ("message", "mail")]
    sent_facts = [r for what, r in facts if what == "message"]
    assert [(r["sender"], r["recipient"]) for r in sent_facts] == [
        (writer.agent_id, waiter.agent_id),
        (waiter.agent_id, "main"),
    ]
    taken = {r["recipient"]: (r["ids"], r["turn"]) for what, r in facts if what == "mail"}
    assert taken == {waiter.agent_id: (["m1"], 2), "main": (["m2"], 2)}
    message = [r for r in sent_facts if r["recipient"] == waiter.agent_id][0]
    assert message["text"] == envelope and message["id"] == "m1"
