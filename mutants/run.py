"""``make mutants``: mutation testing of the security checks, one module at a time.

Each module is mutated IN PLACE by cosmic-ray (its local distributor writes a mutant
into the file, runs that module's own test selection, and restores the file): the
fork-server children import the real files through the editable install, so a tool
that mutated a copied tree would never run its mutants in a child. A module with
uncommitted changes is refused (a run that is killed leaves its last mutant in the
file: ``git checkout FILE`` restores it), and each file is checked clean afterwards.

    python mutants/run.py [NAME ...]     # all modules, or those named
    python mutants/run.py --list

Kill rates go to docs/security.md ("Mutation testing") by hand, from the summary
printed at the end; survivors are listed there with why each is equivalent. The
sessions are kept (the path is printed) for each survivor's diff and test output.
"""

from __future__ import annotations

import argparse
import ast
import json
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = ROOT / ".venv" / "bin"
PYTEST = f"{BIN / 'python'} -m pytest -x -q -p no:cacheprovider"

KILLS = "tests/mutants/test_mutation_kills.py::"
EXEC = "tests/worker/rules/test_allow_rules_exec.py::"
TRUST_KILLS = (
    f"{KILLS}test_an_untrusted_sandbox_is_honoured_exactly_when_it_is_as_tight "
    f"{KILLS}test_a_trusted_folder_covers_only_the_folder_and_what_is_beneath_it"
)

TABLE_KILLS = "tests/mutants/test_mutation_kills_trust_table.py"
PATHS = "tests/worker/sandbox/test_walls_paths.py::"

#: name: (the file mutated, the tests that must kill its mutants, per-mutant timeout s)
MODULES: dict[str, tuple[str, str, float]] = {
    "frame-mac": (
        "protocol/_frame_mac.py",
        "tests/protocol/test_frame_mac.py "
        f"{KILLS}test_results_with_a_wrong_signature_of_the_right_length_are_dropped "
        f"{KILLS}test_an_approval_with_a_wrong_signature_is_ignored_by_the_child "
        f"{KILLS}test_the_first_genuine_result_is_the_one_that_counts "
        "tests/orchestrator/backends/test_hardening_processes.py::test_a_result_forged_through_a_copy_of_the_socket_is_dropped",
        120,
    ),
    "tool-journal": (
        "worker/engine/_tool_journal.py",
        "tests/worker/engine/test_tool_journal.py",
        60,
    ),
    "trust": (
        "orchestrator/config/_trust.py",
        f"tests/mutants/test_mutation_kills_trust.py {TABLE_KILLS} {TRUST_KILLS} "
        f"tests/orchestrator/config/test_trust_table.py",
        120,
    ),
    "trust-table": (
        "orchestrator/config/_trust_table.py",
        f"{TABLE_KILLS} {TRUST_KILLS} tests/orchestrator/config/test_trust_table.py",
        120,
    ),
    "allow-rules": (
        "worker/rules/_exec_args.py",
        f"{EXEC}test_a_line_that_runs_another_program_is_never_auto_allowed "
        f"{EXEC}test_plain_lines_of_those_programs_are_still_allowed "
        f"tests/worker/rules/test_allow_rules.py",
        60,
    ),
    "shell": (
        "worker/rules/_shell.py",
        "tests/mutants/test_mutation_kills_shell.py tests/worker/rules/test_allow_rules.py "
        f"{EXEC}test_a_line_that_runs_another_program_is_never_"
        f"auto_allowed {EXEC}test_plain_lines_of_those_programs_are_still_allowed",
        120,
    ),
    "redaction": (
        "worker/records/_redact.py",
        f"{KILLS}test_a_secret_that_extends_another_is_masked_whole "
        "tests/worker/sandbox/test_isolation.py::test_secrets_are_redacted_from_records "
        "tests/orchestrator/backends/test_hardening_processes.py::test_a_child_redacts_the_keys_it_was_never_given",
        120,
    ),
    "sandbox-policy": (
        "orchestrator/config/_sandbox_policy.py",
        "tests/mutants/test_mutation_kills_policy.py "
        "tests/orchestrator/config/test_trust_table.py tests/orchestrator/config/test_trust.py",
        120,
    ),
    # web_fetch connects to the address it checked, never one the name resolves to later.
    "pinned-http": (
        "orchestrator/network/_pinned_http.py",
        "tests/orchestrator/network/test_web_fetch_rebinding.py "
        "tests/mutants/test_mutation_kills_pinned.py",
        120,
    ),
    # A relayed child's copy of the base URL: no password, token or query.
    "model-route": (
        "orchestrator/model_relay/_route.py",
        "tests/mutants/test_mutation_kills_route.py "
        "tests/orchestrator/model_relay/test_model_route.py "
        "tests/orchestrator/model_relay/test_model_relay.py",
        120,
    ),
    # What a relayed child's request may make the parent spend: server-side tools, the
    # tool choice, output limits, thinking and effort (issue 39, item 6).
    "relay-checks": (
        "orchestrator/model_relay/_checks.py",
        "tests/orchestrator/model_relay/test_relay_checks.py",
        30,
    ),
    # The parent's plain-HTTP route: the block guard, reuse only of finished answers,
    # the pool's bound and wait, and failures in the httpx route's words.
    "h11-route": (
        "worker/models/transports/_h11.py",
        "tests/worker/models/test_h11_transport.py",
        60,
    ),
    # The parent's key masked in what the relay hands a child: whole, split across
    # chunks, in headers and error words.
    "key-mask": (
        "orchestrator/model_relay/_key_mask.py",
        "tests/orchestrator/model_relay/test_key_mask.py",
        30,
    ),
    # What runs outside the walls: the entries of the workdir a hook, an MCP server or a
    # custom tool's module hold, found in their commands (and bound read-only by a child).
    "code-files": (
        "orchestrator/workspace/_code_files.py",
        f"{PATHS}test_the_entries_holding_code_that_runs_outside_the_walls_are_found "
        f"{PATHS}test_a_custom_tools_module_is_found_where_a_child_imports_it_again "
        f"{PATHS}test_a_sub_agent_cannot_rewrite_a_hook_script_the_parent_runs "
        f"{PATHS}test_a_sub_agent_cannot_rewrite_an_mcp_server_in_the_workdir "
        f"{PATHS}test_interpreters_nesting_and_names_at_the_edges "
        f"{PATHS}test_links_on_the_way_are_followed_up_to_a_bound "
        f"{PATHS}test_a_file_with_other_hard_links_is_said_once "
        f"{PATHS}test_a_preloaded_tools_module_is_not_held "
        f"{PATHS}test_common_hook_shapes_hold_the_file_they_run "
        f"{PATHS}test_the_preparer_holds_a_tools_module_unless_it_is_preloaded",
        60,
    ),
    # Claude Code's hook matchers, and the ones said never to fire.
    "hook-matcher": (
        "worker/engine/_hook_relay.py",
        "tests/orchestrator/config/test_hooks.py tests/worker/engine/test_subagent_stop.py "
        "tests/orchestrator/config/test_hooks_claude.py",
        120,
    ),
    # The wrappers a deny rule sees through and an allow rule may strip (Claude Code's).
    "wrappers": (
        "worker/rules/_wrappers.py",
        "tests/mutants/test_mutation_kills_wrappers.py "
        "tests/worker/rules/test_claude_rules_compat.py "
        "tests/worker/rules/test_allow_rules.py",
        60,
    ),
    # The egress proxy's reading of a request and a tunnel's ClientHello.
    "egress": (
        "orchestrator/network/_egress.py",
        "tests/mutants/test_mutation_kills_egress.py "
        "tests/orchestrator/network/test_egress_smuggling.py",
        60,
    ),
    # multiprocess's temp folder: only this user's private folder, only dead pids' folders.
    "mp-tempdir": (
        "orchestrator/backends/_mp_tempdir.py",
        "tests/orchestrator/backends/test_mp_tempdir.py",
        30,
    ),
    # After the fast checks (FIRST), the real children: the lean request, and a real
    # sub-agent's attack on the fork server's peer check.
    "fork-request": (
        "worker/child/_fork_request.py",
        "tests/worker/child/test_fork_request.py "
        "tests/worker/sandbox/test_sandbox.py::test_a_sub_agent_cannot_use_the_fork_server",
        90,
    ),
    # What a spare made before its Hello is used only where it still fits.
    "sandbox-spare": (
        "worker/sandbox/_spare.py",
        "tests/worker/sandbox/test_sandbox_spare.py",
        90,
    ),
    # No capability for a sub-agent: the drop, the lock before its servers, the probe.
    "capabilities": (
        "worker/sandbox/_capabilities.py",
        "tests/mutants/test_mutation_kills_capabilities.py",
        60,
    ),
    # The seccomp filter: its program on both architectures, and what it refuses with every
    # capability held, as ``agentcell sandbox`` says it. Neither file probes the machine
    # when imported: a mutant that ran a probe's child branch in pytest itself would end
    # it with status 0, a survivor, before any test ran.
    "seccomp": (
        "worker/sandbox/_seccomp.py",
        "tests/worker/sandbox/test_seccomp_program.py "
        "tests/mutants/test_mutation_kills_capabilities.py",
        60,
    ),
    # The proof that mutants run in the children: only the line of the child's own
    # approval check is mutated, and only a child-side test can kill its mutants.
    "child-approval": (
        "worker/child/_main.py",
        f"{KILLS}test_an_approval_with_a_wrong_signature_is_ignored_by_the_child",
        120,
    ),
}
#: A script run before the module's tests, without pytest's start-up (seconds of CPU per
#: mutant on a shared machine): the same checks as its unit tests, failing at the first.
FIRST = {"fork-request": "tests/support/fork_request_harness.py check"}
#: Modules mutated on one line only: the line holding this text.
ONLY_LINE = {"child-approval": "and not frame_is_authentic(frame, key)"}


def config(name: str) -> str:
    path, tests, timeout = MODULES[name]
    command = f"{PYTEST} {tests}"
    if name in FIRST:
        command = "sh -c " + shlex.quote(f"{BIN / 'python'} {FIRST[name]} && {command}")
    text = (
        "[cosmic-ray]\n"
        f"module-path = {json.dumps(path)}\n"
        f"timeout = {timeout}\n"
        "excluded-modules = []\n"
        f"test-command = {json.dumps(command)}\n"
        '[cosmic-ray.distributor]\nname = "local"\n'
    )
    if name in ONLY_LINE:
        lines = (ROOT / path).read_text().splitlines()
        (number,) = [i + 1 for i, line in enumerate(lines) if ONLY_LINE[name] in line]
        text += f'[cosmic-ray.filters.line-filter.lines]\n"{path}" = ["{number}"]\n'
    return text


def init(name: str, work: Path) -> tuple[Path, Path]:
    """The session of ``name``'s mutants (those of its one line, where it has one)."""
    cfg, session = work / f"{name}.toml", work / f"{name}.sqlite"
    cfg.write_text(config(name))
    subprocess.run([str(BIN / "cosmic-ray"), "init", str(cfg), str(session)], cwd=ROOT, check=True)
    if name in ONLY_LINE:
        subprocess.run(
            [str(BIN / "cr-filter-lines"), "--config", str(cfg), str(session)], cwd=ROOT, check=True
        )
    return cfg, session


def clean(path: str) -> bool:
    done = subprocess.run(["git", "diff", "--quiet", "HEAD", "--", path], check=False, cwd=ROOT)
    return done.returncode == 0


def annotation_spots(path: str) -> set[tuple[int, int]]:
    """Where binary operators sit inside annotations (``str | None``). With ``from
    __future__ import annotations`` an annotation is never evaluated, so a mutant there is
    equivalent by construction: it is skipped, and said so."""
    tree = ast.parse((ROOT / path).read_text())
    spots: set[tuple[int, int]] = set()
    for node in ast.walk(tree):
        notes = []
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            args = [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]
            args += [a for a in (node.args.vararg, node.args.kwarg) if a is not None]
            notes = [node.returns, *(a.annotation for a in args)]
        elif isinstance(node, ast.AnnAssign):
            notes = [node.annotation]
        for note in notes:
            for inner in ast.walk(note) if note is not None else ():
                if isinstance(inner, ast.BinOp):
                    spots.add((inner.lineno, inner.col_offset))
    return spots


def _in_annotation(mutation: dict[str, object], spots: set[tuple[int, int]]) -> bool:
    line, col = mutation["start_pos"]  # type: ignore[misc]
    operator = str(mutation["operator_name"])
    return operator.startswith("core/ReplaceBinaryOperator") and any(
        line == at_line and col >= at_col for at_line, at_col in spots
    )


def skip_annotations(session: Path, spots: set[tuple[int, int]]) -> None:
    """Mark the mutants inside annotations done before the run: never run, counted apart."""
    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import WorkerOutcome, WorkResult

    with use_db(str(session), WorkDB.Mode.open) as db:
        skipped = [
            item.job_id
            for item in db.pending_work_items
            if _in_annotation(
                {
                    "start_pos": item.mutations[0].start_pos,
                    "operator_name": item.mutations[0].operator_name,
                },
                spots,
            )
        ]
        db.set_multiple_results(skipped, WorkResult(worker_outcome=WorkerOutcome.SKIPPED))


def run(name: str, work: Path) -> dict[str, object]:
    path = MODULES[name][0]
    if not clean(path):
        sys.exit(f"{path} has uncommitted changes: commit or stash them first")
    cfg, session = init(name, work)
    spots = annotation_spots(path)
    skip_annotations(session, spots)
    cosmic = str(BIN / "cosmic-ray")
    subprocess.run([cosmic, "baseline", str(cfg)], cwd=ROOT, check=True)
    subprocess.run([cosmic, "exec", str(cfg), str(session)], cwd=ROOT, check=True)
    if not clean(path):
        sys.exit(f"{path} was left mutated: run 'git checkout {path}'")
    return summary(session, spots)


def count(name: str, work: Path) -> int:
    _, session = init(name, work)
    dump = subprocess.run(
        [str(BIN / "cosmic-ray"), "dump", str(session)], capture_output=True, text=True, check=True
    )
    return sum(1 for line in dump.stdout.splitlines() if json.loads(line)[1] is None)


def summary(session: Path, spots: set[tuple[int, int]]) -> dict[str, object]:
    dump = subprocess.run(
        [str(BIN / "cosmic-ray"), "dump", str(session)], capture_output=True, text=True, check=True
    ).stdout
    total, killed, survivors, skipped, not_made = 0, 0, [], 0, 0
    for line in dump.splitlines():
        job, result = json.loads(line)
        if result is None:
            continue
        if _in_annotation(job["mutations"][0], spots):
            skipped += 1
            continue
        if result["worker_outcome"] == "skipped":
            continue
        if result["test_outcome"] == "incompetent":
            not_made += 1  # cosmic-ray failed to write this mutant (its own error): no test ran
            continue
        total += 1
        if result["test_outcome"] == "survived":
            (mutation,) = job["mutations"]
            survivors.append(
                f"{mutation['module_path']}:{mutation['start_pos'][0]} "
                f"{mutation['operator_name']} #{mutation['occurrence']}"
            )
        else:
            killed += 1
    return {
        "mutants": total,
        "killed": killed,
        "survivors": survivors,
        "in_annotations": skipped,
        "not_made": not_made,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", choices=[*MODULES, []], metavar="NAME")
    parser.add_argument("--list", action="store_true")
    parser.add_argument("--count", action="store_true", help="count the mutants only")
    args = parser.parse_args()
    if args.list:
        for name, (path, tests, _) in MODULES.items():
            first = f"{FIRST[name]}, then " if name in FIRST else ""
            print(f"{name:16} {path:40} {first}{tests}")
        return
    if args.count:
        with tempfile.TemporaryDirectory(prefix="agentcell-mutants-") as tmp:
            for name in args.names or list(MODULES):
                print(name, count(name, Path(tmp)))
        return
    results = {}
    # Kept: each survivor's diff and test output (``cosmic-ray dump``, ``cr-report``).
    sessions = Path(tempfile.mkdtemp(prefix="agentcell-mutants-"))
    for name in args.names or list(MODULES):
        results[name] = run(name, sessions)
        print(json.dumps({name: results[name]}), flush=True)
    print(f"\nsessions kept in {sessions}")
    print("\nmodule            killed / mutants   rate")
    for name, result in results.items():
        total, killed = result["mutants"], result["killed"]
        rate = f"{100 * killed / total:.1f}%" if total else "-"
        print(f"{name:16} {killed:>7} / {total:<7}   {rate}")
        for line in result["survivors"]:  # type: ignore[attr-defined]
            print(f"    survived: {line}")


if __name__ == "__main__":
    main()
