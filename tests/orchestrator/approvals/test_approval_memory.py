"""The approval broker keeps nothing of a question once it is answered.

A compromised child can ask as often as it likes, each question with up to a frame's
worth of arguments (16 MiB); under ``approval = "allow"`` or ``"deny"`` each is answered
at once. The broker used to append every question to a list it never read: an attack
review's child left the parent holding 160 MiB after it had ended.
"""

from __future__ import annotations

import gc
import tracemalloc

from agentcell.orchestrator.approvals._channel import AllowAll, ApprovalBroker, ApprovalQuery

MIB = 1024 * 1024


async def test_answered_questions_are_not_kept() -> None:
    broker = ApprovalBroker(AllowAll())
    tracemalloc.start()
    try:
        before, _ = tracemalloc.get_traced_memory()
        for n in range(16):
            query = ApprovalQuery("a1", "worker", "bash", "x" * MIB + str(n), "hostile")
            answer = await broker.decide(query)
            assert answer.approved
            del query
        gc.collect()
        after, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert after - before < 2 * MIB, f"{(after - before) / MIB:.1f} MiB kept by the broker"
