"""Tests that kill the mutants of orchestrator/config/_trust.py that the rest of its test
selection lets live (issue 21, item 9): the network-list branch added by the merge of
issue 24 (an untrusted ``network = [...]`` is narrowed to the user's own, never widened),
tested on its own, in-process (``make mutants`` runs these first)."""

from __future__ import annotations

from agentcell.orchestrator.config._trust import narrow_network, untrusted_layer


def test_a_project_list_keeps_only_what_the_users_list_names_in_any_case_or_spacing() -> None:
    project = ["example.com", "EVIL.test", " Example.COM "]
    assert narrow_network(project, ["example.com "]) == (
        ["example.com", " Example.COM "],
        ["EVIL.test"],
    )


def test_under_the_users_true_all_is_kept_and_under_false_nothing() -> None:
    project = ["a.test", "b.test"]
    assert narrow_network(project, True) == (["a.test", "b.test"], [])
    assert narrow_network(project, False) == ([], ["a.test", "b.test"])


def test_an_untrusted_network_list_is_narrowed_with_one_line_for_what_it_loses() -> None:
    kept, notes = untrusted_layer({"network": ["a.test", "b.test"]}, {"network": ["a.test"]}, "p")
    assert kept == {"network": ["a.test"]}
    assert len(notes) == 1
    assert notes[0].startswith("p: network b.test ignored: your own network setting does not")


def test_a_network_list_the_user_allows_whole_says_nothing() -> None:
    assert untrusted_layer({"network": ["a.test"]}, {"network": True}, "p") == (
        {"network": ["a.test"]},
        [],
    )


def test_network_true_from_a_project_loosens_and_is_ignored() -> None:
    kept, notes = untrusted_layer({"network": True}, {}, "p")
    assert kept == {} and len(notes) == 1 and notes[0].startswith("p: network ignored:")


def test_another_list_is_not_narrowed_as_hosts() -> None:
    # A tightening list (rules) is added to the user's, whatever hosts the user allows.
    kept, notes = untrusted_layer({"deny_rules": ["bash(rm *)"]}, {"network": False}, "p")
    assert kept == {"deny_rules": ["bash(rm *)"]} and notes == []
