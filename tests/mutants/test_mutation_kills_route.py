"""Which way a sub-agent's model requests go (``model_relay/_route.py``), decided
on the spec alone: every backend and Ray route, a model object, a provider the parent
does not relay, options the parent cannot resolve. ``make mutants`` runs these."""

from __future__ import annotations

from typing import Any

import pytest
from agentcell.orchestrator import Settings
from agentcell.orchestrator.model_relay._route import route_model
from agentcell.protocol import AgentSpec

KEY = "sk-route-test-key-0042"


def spec(model: str = "openai:gpt-test", **fields: Any) -> AgentSpec:
    env = {"OPENAI_API_KEY": KEY, "OPENAI_BASE_URL": "http://127.0.0.1:9/v1", "HOME": "/h"}
    return AgentSpec(
        agent_id="a1",
        agent_type="worker",
        prompt="go",
        model=model,
        model_options={"api_key": KEY, "temperature": 0.5},
        env=env,
        **fields,
    )


def settings(backend: str = "local", model_route: str = "orchestrator", **extra: Any) -> Settings:
    made = Settings(backend=backend, **extra)  # type: ignore[arg-type]
    made.ray.model_route = model_route  # type: ignore[assignment]
    return made


@pytest.fixture(autouse=True)
def _key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")


def assert_relayed(routed: AgentSpec) -> None:
    assert routed.model_via_parent and not routed.model_permits
    assert "api_key" not in routed.model_options
    assert routed.model_options["temperature"] == 0.5  # the rest of its options stay
    assert routed.model_options["base_url"] == "http://127.0.0.1:9/v1"
    assert routed.env is not None
    assert "OPENAI_API_KEY" not in routed.env and "OPENAI_BASE_URL" not in routed.env
    assert routed.env["HOME"] == "/h"
    assert routed.redactions  # it still masks the key it no longer holds


def assert_direct(routed: AgentSpec) -> None:
    assert not routed.model_via_parent
    assert routed.model_options["api_key"] == KEY
    assert routed.env is not None and routed.env["OPENAI_API_KEY"] == KEY


@pytest.mark.parametrize(
    ("backend", "given", "model_route"),
    [
        ("local", None, "orchestrator"),
        ("local", None, "node"),  # the Ray setting means nothing on the local backend
        ("ray", None, "orchestrator"),
        ("local", "ray", "orchestrator"),  # the definition's backend wins
        ("ray", "local", "node"),
    ],
)
def test_local_and_default_ray_children_send_through_the_parent(
    backend: str, given: str | None, model_route: str
) -> None:
    routed = spec()
    route_model(routed, settings(backend, model_route), given, custom=False)
    assert_relayed(routed)


@pytest.mark.parametrize(("backend", "given"), [("ray", None), ("local", "ray")])
def test_a_ray_child_sent_the_nodes_way_keeps_its_own_route(
    backend: str, given: str | None
) -> None:
    routed = spec()
    route_model(routed, settings(backend, "node"), given, custom=False)
    assert_direct(routed)


def test_a_model_object_given_in_code_keeps_its_own_route() -> None:
    routed = spec()
    route_model(routed, settings(), None, custom=True)
    assert_direct(routed)


def test_a_provider_the_parent_does_not_relay_keeps_its_own_route() -> None:
    routed = spec(model="scripted:echo")
    route_model(routed, settings(), None, custom=False)
    assert_direct(routed)


def test_options_the_parent_cannot_resolve_leave_the_child_to_report_them() -> None:
    routed = spec()
    route_model(routed, settings(model_options={"openai": {"timeout": -1}}), None, custom=False)
    assert_direct(routed)  # the child's own resolve names the bad option, in words
