"""The built-in ``scripted:NAME`` models: offline, deterministic, no API key."""

from __future__ import annotations

from collections.abc import Callable

from agentcell.worker.models._base import Model
from agentcell.worker.models._demo import demo_model
from agentcell.worker.models._doubles import FunctionModel, last_user_text


def echo_model() -> FunctionModel:
    """``scripted:echo``: answers every request with the last user message."""
    return FunctionModel(
        lambda messages, tools: f"echo: {last_user_text(messages)}", name="scripted:echo"
    )


#: The models ``scripted:NAME`` resolves to. Each entry builds a fresh model.
SCRIPTED_MODELS: dict[str, Callable[[], Model]] = {"echo": echo_model, "demo": demo_model}
