"""A model that fills its context until it compacts: shared by the engine's compaction
tests and the relay's."""

from __future__ import annotations

from typing import Any

import pytest
from agentcell.protocol import Usage
from model_servers import Call, ModelServer, Reply

SUMMARY = "SUMMARY-7d2: OUT-1 and OUT-2 were printed"


TASK = "print five markers, one by one"


STEPS = 5


class FillingModel:
    """Answers with `echo OUT-n` for STEPS turns, then DONE; reports a prompt that grows
    by TOKENS_PER_RESULT per tool result it was sent (a context that fills), and answers
    a summary request (the compactor's: no tools, its own instructions) with SUMMARY."""

    def __init__(self) -> None:
        self.step = 0
        self.summary_requests: list[list[dict[str, Any]]] = []
        self.agent_requests: list[list[dict[str, Any]]] = []

    def __call__(self, body: dict[str, Any], api: str) -> Reply:
        messages = body["messages"]
        if "compacting the history" in str(messages[0].get("content", "")):
            self.summary_requests.append(messages)
            return Reply(text=SUMMARY, usage=Usage(input_tokens=50, output_tokens=20))
        self.agent_requests.append(messages)
        results = sum(1 for m in messages if m["role"] == "tool")
        usage = Usage(input_tokens=TOKENS_PER_RESULT * (results + 1), output_tokens=0)
        self.step += 1
        if self.step > STEPS:
            return Reply(text="DONE", usage=usage)
        return Reply(tool_calls=[Call("bash", {"command": f"echo OUT-{self.step}"})], usage=usage)


@pytest.fixture
def served(model_server: ModelServer, monkeypatch: pytest.MonkeyPatch) -> ModelServer:
    monkeypatch.setenv("OPENAI_BASE_URL", model_server.openai_base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-compaction-test-key")
    return model_server


TOKENS_PER_RESULT = 300  # what each tool result adds to the context, as the model reports
