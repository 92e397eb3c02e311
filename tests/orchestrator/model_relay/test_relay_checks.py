"""The cost checks of a relayed model request (``model_relay/_checks.py``), on the
body alone: server-side tools, tool choice, output limits, thinking and effort, for both
request shapes. ``make mutants`` runs these;
tests/orchestrator/model_relay/test_model_relay_costs.py runs the same walls from a real
sub-agent."""

from __future__ import annotations

import json
from typing import Any

import pytest
from agentcell.orchestrator.config._settings import Budgets
from agentcell.orchestrator.model_relay._checks import output_cap, shown
from agentcell.orchestrator.model_relay._relay import _checked
from agentcell.orchestrator.model_relay._usage import UsageScan
from agentcell.orchestrator.telemetry._usage import UsageLedger
from agentcell.protocol import AgentSpec, Usage

SEARCH = "web_search_20250305"
FUNCTION = {"type": "function", "function": {"name": "read", "parameters": {}}}
CLIENT = {"name": "read", "description": "d", "input_schema": {"type": "object"}}


def spec(provider: str = "anthropic", **options: Any) -> AgentSpec:
    return AgentSpec(
        agent_id="a1",
        agent_type="worker",
        prompt="go",
        model=f"{provider}:m",
        model_options=options,
        model_via_parent=True,
    )


def body(provider: str = "anthropic", **fields: Any) -> bytes:
    base: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "x"}]}
    base["stream"] = True
    if provider == "openai":
        base["stream_options"] = {"include_usage": True}
    return json.dumps(base | fields, separators=(",", ":")).encode()


def sent(
    fields: dict[str, Any], *, provider: str = "anthropic", left: int | None = None, **options: Any
) -> tuple[dict[str, Any], list[str]]:
    """What goes upstream for a request with ``fields`` (asserting it goes), and the clamps."""
    why, top, clamped = _checked(spec(provider, **options), body(provider, **fields), left)
    assert why == "", why
    return {key: json.loads(bytes(raw)) for key, raw in top.items()}, clamped


def refused(fields: dict[str, Any], *, provider: str = "anthropic", **options: Any) -> str:
    why, _, clamped = _checked(spec(provider, **options), body(provider, **fields))
    assert why, "sent"
    assert "\n" not in why
    return why


# -- tools -----------------------------------------------------------------------------


def test_function_tools_pass_as_they_are() -> None:
    assert sent({"tools": [CLIENT]})[0]["tools"] == [CLIENT]
    custom = CLIENT | {"type": "custom"}
    assert sent({"tools": [custom]}) == ({**sent({})[0], "tools": [custom]}, [])
    assert sent({"tools": [FUNCTION]}, provider="openai")[0]["tools"] == [FUNCTION]


@pytest.mark.parametrize("kind", ["web_search", "web_search_preview", "custom", "file_search"])
def test_openai_sends_function_tools_only(kind: str) -> None:
    why = refused({"tools": [FUNCTION, {"type": kind}]}, provider="openai")
    assert f"a tool of type {kind!r}" in why and "function tools only" in why, why
    # A grant is Anthropic's (agentcell speaks no OpenAI search tool).
    why = refused({"tools": [{"type": kind}]}, provider="openai", web_search=5)
    assert "function tools only" in why


def test_an_openai_tool_without_a_type_is_refused() -> None:
    assert "of type 'None'" in refused({"tools": [{"function": {}}]}, provider="openai")


def test_a_web_search_the_definition_does_not_grant_is_refused() -> None:
    search = {"type": SEARCH, "name": "web_search", "max_uses": 99}
    why = refused({"tools": [CLIENT, search]})
    assert "'web_search_20250305'" in why and "add WebSearch to its tools" in why, why
    assert "add WebSearch" in refused({"tools": [search]}, web_search=0)


@pytest.mark.parametrize(("given", "goes"), [(99, 5), (6, 5), (5, 5), (3, 3), (None, 5)])
def test_a_granted_web_search_is_clamped_to_its_searches(given: int | None, goes: int) -> None:
    search: dict[str, Any] = {"type": SEARCH, "name": "web_search"}
    if given is not None:
        search["max_uses"] = given
    upstream, clamped = sent({"tools": [CLIENT, search]}, web_search=5)
    assert upstream["tools"] == [CLIENT, search | {"max_uses": goes}]
    assert clamped == ([] if given == goes else [f"web_search max_uses {given} -> 5"])
    explicit_null = {"type": SEARCH, "name": "web_search", "max_uses": None}
    assert sent({"tools": [explicit_null]}, web_search=5)[0]["tools"][0]["max_uses"] == 5


@pytest.mark.parametrize(
    "kind",
    # Sorting before the search tool's type and after it (a later version of it too).
    ["code_execution_20250522", "bash_20250124", "web_fetch_x", "web_search_20260209", "zz"],
)
def test_other_typed_tools_are_refused_even_with_a_search_granted(kind: str) -> None:
    why = refused({"tools": [{"type": kind, "name": "x"}]}, web_search=5)
    assert f"of type {kind!r}" in why and "function tools and one web_search" in why, why
    assert "function tools only" in refused({"tools": [{"type": kind, "name": "x"}]})


def test_a_second_web_search_is_refused() -> None:
    one = {"type": SEARCH, "name": "web_search", "max_uses": 5}
    assert sent({"tools": [one]}, web_search=5)[1] == []
    assert "one web_search" in refused({"tools": [one, one | {"name": "again"}]}, web_search=5)


def test_a_type_given_twice_goes_upstream_as_the_one_checked() -> None:
    # The last "type" is what the parent reads; the first is what a server might read.
    sneaky = (
        b'{"type":"' + SEARCH.encode() + b'","max_uses":99,"name":"web_search","type":"custom"}'
    )
    raw = body(tools=[]).replace(b'"tools":[]', b'"tools":[' + sneaky + b"]")
    why, top, _ = _checked(spec(), raw)
    assert why == ""
    assert json.loads(bytes(top["tools"]), object_pairs_hook=list) == [
        [("type", "custom"), ("max_uses", 99), ("name", "web_search")]
    ]
    # The other way round: the search is the one read, and refused.
    backwards = b'{"type":"custom","name":"web_search","type":"' + SEARCH.encode() + b'"}'
    raw = body(tools=[]).replace(b'"tools":[]', b'"tools":[' + backwards + b"]")
    assert "add WebSearch" in _checked(spec(), raw)[0]


@pytest.mark.parametrize(
    ("tools", "shape"),
    [({"type": "x"}, "objects"), ([{"type": 1}], "string"), ([[]], "list")],
)
def test_tools_of_another_shape_are_refused(tools: Any, shape: str) -> None:
    why = refused({"tools": tools})
    assert "is not" in why and shape in why, why


def test_tool_fields_of_another_shape_are_refused() -> None:
    why = refused({"tools": [{"type": SEARCH, "max_uses": "9"}]}, web_search=5)
    assert "tool max_uses is not an integer" in why, why
    assert "tool name is not a string" in refused({"tools": [{"name": 5}]})
    function = {"type": "function", "function": {"name": 5}}
    assert "a list of functions" in refused({"tools": [function]}, provider="openai")


# -- tool_choice -----------------------------------------------------------------------


@pytest.mark.parametrize("choice", ["auto", "none", "required", {"type": "auto"}])
def test_openai_choices_that_force_no_tool_pass(choice: Any) -> None:
    assert sent({"tool_choice": choice}, provider="openai")[0]["tool_choice"] == choice


@pytest.mark.parametrize("choice", [{"type": "auto"}, {"type": "any"}, {"type": "none"}])
def test_anthropic_choices_that_force_no_tool_pass(choice: Any) -> None:
    assert sent({"tool_choice": choice})[0]["tool_choice"] == choice


def test_a_choice_may_force_only_a_tool_the_request_sends() -> None:
    force = {"type": "function", "function": {"name": "read"}}
    assert sent({"tools": [FUNCTION], "tool_choice": force}, provider="openai")
    why = refused({"tool_choice": force}, provider="openai")
    assert "tool_choice forces 'read'" in why, why
    search = {"type": SEARCH, "name": "web_search", "max_uses": 5}
    forced = {"type": "tool", "name": "web_search"}
    assert "forces 'web_search'" in refused({"tools": [CLIENT], "tool_choice": forced})
    assert sent({"tools": [search], "tool_choice": forced}, web_search=5)
    assert sent({"tools": [CLIENT], "tool_choice": {"type": "tool", "name": "read"}})


@pytest.mark.parametrize(
    ("provider", "choice"),
    [
        ("openai", {"type": "web_search_preview"}),
        ("openai", {"type": "allowed_tools", "tools": []}),
        ("openai", "any"),
        ("openai", {"type": "function"}),
        ("openai", {"type": "function", "function": "read"}),
        ("openai", {"type": "function", "function": {"name": 1}}),
        ("openai", {"type": "tool", "name": "read"}),
        # A forcing shape under another type (sorting before it and after it).
        ("openai", {"type": "allowed_tools", "function": {"name": "read"}}),
        ("openai", {"type": "tool", "function": {"name": "read"}}),
        ("anthropic", {"type": "function", "name": "read"}),
        ("anthropic", {"type": "web", "name": "read"}),
        ("anthropic", "auto"),
        ("anthropic", {"type": "required"}),
        ("anthropic", {"type": "function", "function": {"name": "read"}}),
        ("anthropic", {"type": "tool"}),
        ("anthropic", ["auto"]),
    ],
)
def test_other_choices_are_refused(provider: str, choice: Any) -> None:
    tools = [FUNCTION] if provider == "openai" else [CLIENT]
    why = refused({"tools": tools, "tool_choice": choice}, provider=provider)
    assert "is not one agentcell sends" in why, why


def test_a_choice_given_twice_goes_as_the_one_checked() -> None:
    raw = body(tools=[CLIENT], tool_choice={}).replace(
        b'"tool_choice":{}', b'"tool_choice":{"type":"tool","name":"x","name":"read"}'
    )
    why, top, _ = _checked(spec(), raw)
    assert why == "" and bytes(top["tool_choice"]) == b'{"type":"tool","name":"read"}'


# -- output limits ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("provider", "options", "cap"),
    [
        ("anthropic", {}, 4096),
        ("anthropic", {"max_tokens": 8000}, 8000),
        ("anthropic", {"max_tokens": 0}, 4096),
        ("anthropic", {"max_tokens": "9000"}, 4096),
        ("anthropic", {"effort": "high"}, 16384 + 4096),
        ("anthropic", {"effort": "minimal", "max_tokens": 32000}, 32000),
        ("anthropic", {"effort": "nonsense"}, 4096),
        ("anthropic", {"reasoning_effort": "high"}, 4096),
        ("openai", {}, 4096),
        ("openai", {"reasoning_effort": "low"}, 4096 + 4096),
        ("openai", {"effort": "high"}, 4096),
    ],
)
def test_the_output_cap_is_what_agentcell_itself_sends(
    provider: str, options: dict[str, Any], cap: int
) -> None:
    assert output_cap(spec(provider, **options), provider) == cap


@pytest.mark.parametrize(
    ("provider", "key"),
    [("anthropic", "max_tokens"), ("openai", "max_tokens"), ("openai", "max_completion_tokens")],
)
def test_an_output_limit_over_the_cap_is_clamped(provider: str, key: str) -> None:
    upstream, clamped = sent({key: 10_000_000}, provider=provider)
    assert upstream[key] == 4096 and clamped == [f"{key} 10000000 -> 4096"]
    assert sent({key: 4097}, provider=provider)[0][key] == 4096
    assert sent({key: 4096}, provider=provider) == (sent({key: 4096}, provider=provider)[0], [])
    assert sent({key: 100}, provider=provider)[0][key] == 100
    assert sent({key: None}, provider=provider)[0][key] == 4096
    assert "is not an integer" in refused({key: "lots"}, provider=provider)
    assert "is not an integer" in refused({key: 1e9}, provider=provider)


def test_an_output_limit_is_clamped_to_the_budget_left_and_none_goes_when_it_is_out() -> None:
    assert sent({"max_tokens": 4000}, left=1000)[0]["max_tokens"] == 1000
    assert sent({"max_tokens": 4000}, left=4001)[0]["max_tokens"] == 4000
    assert sent({"max_tokens": 9000}, left=10**9)[0]["max_tokens"] == 4096
    assert sent({"max_tokens": 1}, left=1) == (sent({"max_tokens": 1})[0], [])
    assert "max_tokens" not in sent({}, provider="openai", left=5)[0]
    why, _, _ = _checked(spec(), body(max_tokens=10), 0)
    assert "token budget is used up" in why and "budgets.max_tokens" in why, why
    assert "used up" in _checked(spec("openai"), body("openai"), -3)[0]


def test_a_request_with_no_output_limit_gets_the_budget_left_in_its_providers_key() -> None:
    # Leaving the limit out was the model's whole maximum, past the budget.
    official = {"base_url": "https://api.openai.com/v1/"}
    assert sent({}, provider="openai", left=5, **official) == (
        {**sent({}, provider="openai")[0], "max_completion_tokens": 5},
        [],
    )
    local = {"base_url": "http://127.0.0.1:9/v1"}
    assert sent({}, provider="openai", left=7, **local)[0]["max_tokens"] == 7
    after = {"base_url": "https://zz.example/v1"}  # sorts after the official URL
    assert sent({}, provider="openai", left=7, **after)[0]["max_tokens"] == 7
    named = local | {"max_tokens_field": "max_completion_tokens"}
    assert sent({}, provider="openai", left=7, **named)[0]["max_completion_tokens"] == 7
    assert sent({}, left=9)[0]["max_tokens"] == 9  # (Anthropic's own always sets one)
    # No budget: as agentcell's own request, none; one set is clamped, never doubled.
    assert "max_tokens" not in sent({}, provider="openai", **local)[0]
    upstream = sent({"max_completion_tokens": 3}, provider="openai", left=7, **local)[0]
    assert upstream["max_completion_tokens"] == 3 and "max_tokens" not in upstream


def test_the_usage_flag_goes_upstream_as_it_was_read() -> None:
    raw = body("openai").replace(
        b'{"include_usage":true}', b'{"include_usage":false,"include_usage":true}'
    )
    why, top, _ = _checked(spec("openai"), raw)
    assert why == "" and bytes(top["stream_options"]) == b'{"include_usage":true}'


# -- thinking ----------------------------------------------------------------------------


def test_a_thinking_budget_stays_under_the_output_limit() -> None:
    fields = {"max_tokens": 10_000_000, "thinking": {"type": "enabled", "budget_tokens": 10**6}}
    upstream, clamped = sent(fields)
    assert upstream["max_tokens"] == 4096
    assert upstream["thinking"] == {"type": "enabled", "budget_tokens": 4095}
    assert clamped == ["max_tokens 10000000 -> 4096", "thinking.budget_tokens 1000000 -> 4095"]
    at = {"max_tokens": 3000, "thinking": {"type": "enabled", "budget_tokens": 3000}}
    assert sent(at)[0]["thinking"]["budget_tokens"] == 2999
    under = {"max_tokens": 3000, "thinking": {"type": "enabled", "budget_tokens": 2999}}
    assert sent(under) == (sent(under)[0], [])
    # No output limit in the request: the cap bounds it.
    assert sent({"thinking": {"budget_tokens": 5000}})[0]["thinking"]["budget_tokens"] == 4095
    assert sent({"thinking": {"type": "adaptive"}}) == (
        {**sent({})[0], "thinking": {"type": "adaptive"}},
        [],
    )
    assert sent({"max_tokens": 8000, "thinking": {"budget_tokens": 9000}}, left=2000)[0][
        "thinking"
    ] == {"budget_tokens": 1999}


def test_a_thinking_of_another_shape_is_refused() -> None:
    assert "thinking is not an object" in refused({"thinking": "on"})
    assert "budget_tokens is not an integer" in refused({"thinking": {"budget_tokens": "9"}})
    raw = body(thinking={}).replace(
        b'"thinking":{}', b'"thinking":{"budget_tokens":999999,"budget_tokens":1024}'
    )
    why, top, _ = _checked(spec(), raw)
    assert why == "" and bytes(top["thinking"]) == b'{"budget_tokens":1024}'


# -- effort ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("granted", "given", "goes"),
    [
        ("low", "low", True),
        ("low", "minimal", True),
        ("low", "none", True),
        ("low", "medium", False),
        ("low", "high", False),
        ("high", "high", True),
        ("high", "xhigh", False),
        (None, "medium", True),
        (None, "high", False),
        ("low", "turbo", False),
        ("custom", "custom", True),
        ("custom", "none", False),
    ],
)
def test_reasoning_effort_is_at_most_the_definitions(
    granted: str | None, given: str, goes: bool
) -> None:
    options = {} if granted is None else {"reasoning_effort": granted}
    fields = {"reasoning_effort": given}
    if goes:
        assert sent(fields, provider="openai", **options)[0]["reasoning_effort"] == given
        return
    why = refused(fields, provider="openai", **options)
    shown_granted = granted or "medium"
    assert f"reasoning_effort {given!r}" in why and f"send {shown_granted!r} or lower" in why


def test_a_reasoning_effort_of_another_shape_is_refused() -> None:
    assert "reasoning_effort is not a string" in refused({"reasoning_effort": 3}, provider="openai")


@pytest.mark.parametrize(
    ("effort", "given", "goes"),
    [
        ("minimal", "low", True),
        ("minimal", "medium", False),
        ("medium", "medium", True),
        ("medium", "high", False),
        ("max", "max", True),
        (None, "high", True),
        (None, "xhigh", False),
        (None, "max", False),
        (None, 7, False),
    ],
)
def test_anthropics_output_effort_is_at_most_the_definitions(
    effort: str | None, given: Any, goes: bool
) -> None:
    options = {} if effort is None else {"effort": effort}
    fields = {"output_config": {"effort": given, "format": None}}
    if goes:
        assert sent(fields, **options)[0]["output_config"] == fields["output_config"]
    else:
        assert "output_config.effort" in refused(fields, **options)


def test_an_output_config_without_effort_passes_and_another_shape_is_refused() -> None:
    assert sent({"output_config": {}})[0]["output_config"] == {}
    assert "output_config is not an object" in refused({"output_config": []})
    # OpenAI's key is not Anthropic's, and the other way round (the allow-lists).
    assert "not allowed for anthropic" in refused({"reasoning_effort": "max"})


def test_what_a_refusal_repeats_is_cut() -> None:
    assert shown("x" * 61) == repr("x" * 60) + "…"
    assert shown("x" * 60) == repr("x" * 60)
    assert shown("abc") == "'abc'"
    why = refused({"tools": [{"type": "t" * 500}]})
    assert len(why) < 300 and "…" in why


# -- what a call given up costs, and the budget left --------------------------------------


def test_a_call_given_up_costs_its_estimate_and_what_was_relayed_at_least() -> None:
    scan = UsageScan("openai")
    scan.feed(b"data: " + b"x" * 394 + b"\n\n")
    assert scan.given_up(50) == Usage(input_tokens=50, output_tokens=100)
    reported = b'data: {"choices":[],"usage":{"prompt_tokens":900,"completion_tokens":700}}\n\n'
    scan.feed(reported)
    assert scan.given_up(50) == Usage(input_tokens=900, output_tokens=700)
    assert scan.given_up(1000).input_tokens == 1000
    anthropic = UsageScan("anthropic")
    start = b'event: message_start\ndata: {"message":{"usage":{"input_tokens":30,'
    start += b'"cache_read_input_tokens":70,"output_tokens":1}}}\n\n'
    anthropic.feed(start + b"data: " + b"y" * 4000)
    usage = anthropic.given_up(20)
    assert (usage.input_tokens, usage.cache_read_tokens) == (100, 70)
    assert usage.output_tokens == (len(start) + 4006) // 4


def test_the_token_budget_left_is_the_tightest_of_a_run_and_its_parents() -> None:
    top = UsageLedger()
    assert top.tokens_left() is None
    run = UsageLedger(budgets=Budgets(max_tokens=1000, max_subagents=None), parent=top)
    run.add_usage("a", "t", "m", Usage(input_tokens=300, output_tokens=100))
    assert run.tokens_left() == 600
    run.add_usage("a", "t", "m", Usage(input_tokens=700))
    assert run.tokens_left() == 0
    outer = UsageLedger(budgets=Budgets(max_tokens=5000, max_subagents=None))
    inner = UsageLedger(budgets=Budgets(max_tokens=900, max_subagents=None), parent=outer)
    assert inner.tokens_left() == 900
    outer.add_usage("b", "t", "m", Usage(input_tokens=4500))
    assert inner.tokens_left() == 500
    free = UsageLedger(parent=outer)
    assert free.tokens_left() == 500
