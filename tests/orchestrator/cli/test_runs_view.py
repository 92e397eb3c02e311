"""``agentcell runs view``: the run's timeline page, rendered in headless Chromium.

A real run (main agent, sub-agents in their own processes, one nested under another, one
that crashes, one whose every text is an injection attempt) is recorded, turned into the
page by the CLI, and loaded by Debian's ``chromium`` offline (its own network namespace
where ``unshare -n`` works, and the flags that stop its background requests). The DOM it
built says whether every agent has a lane and whether any injected markup came alive.
"""

from __future__ import annotations

import asyncio
import html
import json
import os
import re
import shutil
import signal
import subprocess
from pathlib import Path
from typing import Any

import child_models
import pytest
import view_models
from agentcell.orchestrator import AgentDefinition, Orchestrator, Settings
from agentcell.orchestrator.cli._main import cli as cli_main
from agentcell.orchestrator.cli._timeline import CSP, timeline_html
from agentcell.protocol import RunStatus, ToolMessage
from click.testing import CliRunner
from conftest import SpawnRecorder
from view_models import ATTACKS, HOSTILE

from agentcell.testing import FunctionModel, reply, tool_call


def main_model() -> FunctionModel:
    def fn(messages: list[Any], tools: list[Any]) -> Any:
        if not any(isinstance(m, ToolMessage) for m in messages):
            return reply(
                "delegating",
                tool_call("task", subagent_type="leaf", prompt="plain job", description="plain"),
                tool_call("task", subagent_type="crasher", prompt="segfault", description="segv"),
                tool_call("task", subagent_type="nester", prompt="go deeper", description="nest"),
                tool_call("task", subagent_type="hostile", prompt="attack", description=HOSTILE),
            )
        return "all done"

    return FunctionModel(fn, name="function:main")


def definition(name: str, tools: list[str], **fields: Any) -> AgentDefinition:
    return AgentDefinition(
        name=name,
        description=f"{name} agent",
        system_prompt=f"You are {name}.",
        tools=tools,
        model=f"function:{name}",
        source="test",
        **fields,
    )


async def record_a_run(workdir: Path) -> tuple[str, dict[str, Any]]:
    models = {
        "function:main": main_model(),
        "function:leaf": FunctionModel(child_models.answer_prompt, name="function:leaf"),
        "function:crasher": FunctionModel(
            child_models.call_tool_named_in_prompt, name="function:crasher"
        ),
        "function:nester": FunctionModel(view_models.nester_model, name="function:nester"),
        "function:hostile": FunctionModel(view_models.hostile_model, name="function:hostile"),
    }
    orch = Orchestrator(
        model=models["function:main"],
        agents=[
            definition("leaf", []),
            definition("crasher", ["segfault"]),
            definition("nester", ["task"], max_depth=2),
            definition("hostile", ["echo_back"]),
        ],
        models=dict(models),
        settings=Settings(approval="allow", max_workers=4, warm_spares=1, max_depth=2),
        tools=[child_models.segfault, view_models.echo_back],
        workdir=workdir,
        load_agent_files=False,
    )
    async with orch:
        report = await asyncio.wait_for(orch.run("run the lot"), 120)
    assert report.status is RunStatus.COMPLETED, report.error
    (run_dir,) = [p for p in (workdir / ".agentcell" / "runs").iterdir() if p.is_dir()]
    summary: dict[str, Any] = json.loads((run_dir / "summary.json").read_text())
    assert len(summary["subagents"]) == 5, summary["subagents"]  # the leaf under nest too
    return run_dir.name, summary


# -- Chromium, offline ------------------------------------------------------------------


def chromium_or_skip() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        pytest.skip("chromium is not installed (apt-get install -y chromium)")
    return path


def _offline_prefix() -> list[str]:
    """``unshare -n``: a network namespace of its own (nothing but a down loopback)."""
    unshare = shutil.which("unshare")
    if unshare is None or os.geteuid() != 0:
        return []
    probe = subprocess.run([unshare, "-n", "true"], capture_output=True, check=False)
    return [unshare, "-n"] if probe.returncode == 0 else []


def run_chromium(page: Path, tmp: Path, *extra: str) -> str:
    """Chromium's output for ``page`` (``--dump-dom``: the DOM after it ran)."""
    browser = chromium_or_skip()
    command = [
        *_offline_prefix(),
        browser,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--disable-default-apps",
        "--disable-extensions",
        f"--user-data-dir={tmp / 'chromium-profile'}",
        *extra,
        page.as_uri(),
    ]
    proc = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True
    )
    try:
        out, err = proc.communicate(timeout=120)
    finally:  # chromium's helpers are in its session: none outlives the test
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
    assert proc.returncode == 0, err.decode(errors="replace")[-2000:]
    return out.decode()


def lanes_in(dom: str) -> list[str]:
    return [
        html.unescape(m)
        for m in re.findall(r'<div class="lane[^"]*" id="lane-\d+" data-agent="([^"]*)"', dom)
    ]


# -- the tests --------------------------------------------------------------------------


async def test_a_recorded_run_renders_with_a_lane_per_agent_and_no_live_injection(
    spawned: SpawnRecorder, tmp_path: Path
) -> None:
    workdir = tmp_path / "work"
    workdir.mkdir()
    run_id, summary = await record_a_run(workdir)
    page = tmp_path / "timeline.html"
    result = CliRunner().invoke(
        cli_main, ["runs", "view", run_id, "-o", str(page), "--workdir", str(workdir)]
    )
    assert result.exit_code == 0, result.output
    text = page.read_text()
    for attack in ATTACKS:
        assert attack not in text  # never raw in the page
    assert "<script" not in text.lower()  # the page itself has no script at all
    assert f'content="{CSP}"'.replace("'", "&#x27;") in text

    dom = run_chromium(page, tmp_path, "--dump-dom")
    ids = {sub["agent_id"] for sub in summary["subagents"]}
    assert set(lanes_in(dom)) == ids | {"main"}
    assert "data-pwned" not in dom.split(">", 2)[1]  # <html> carries no mark
    assert "<script" not in dom.lower() and "<img" not in dom.lower() and "<a " not in dom
    assert "PWNED" not in dom.split("</title>")[0]
    # shown literally: the escaped text is in the DOM as text
    assert "&lt;script&gt;document.documentElement.setAttribute" in dom
    # nesting: the leaf the nester started sits right under the nester's lane, indented more
    by_desc = {sub["description"]: sub for sub in summary["subagents"]}
    nested = [s for s in summary["subagents"] if s["parent_id"] == by_desc["nest"]["agent_id"]]
    assert len(nested) == 1
    order = lanes_in(dom)
    assert order.index(nested[0]["agent_id"]) == order.index(by_desc["nest"]["agent_id"]) + 1
    # the crash is marked with its cause; the hostile agent's tool call is in a tooltip
    assert "SIGSEGV" in dom and 'class="crash"' in dom
    assert re.search(r'title="tool [0-9.]+ s: echo_back \{', dom)
    # approval (this run allows everything, yet asks) is apart from the tool it let run
    assert re.search(r'title="approval [0-9.]+ s: segfault', dom)
    assert re.search(r'title="tool [0-9.]+ s: segfault \{\}', dom)

    shot = tmp_path / "timeline.png"
    run_chromium(page, tmp_path, f"--screenshot={shot}", "--window-size=1400,500")
    assert shot.stat().st_size > 1000


def synthetic_run(n: int) -> tuple[dict[str, Any], dict[str, list[dict[str, Any]]]]:
    """``n`` sub-agents of one type, each with a model wait, a tool call and an end."""
    t0 = 1_800_000_000.0
    subagents, transcripts = [], {}
    for i in range(n):
        agent_id = f"a{i + 1}"
        start = t0 + i * 0.05
        subagents.append(
            {
                "agent_id": agent_id,
                "agent_type": "worker",
                "description": f"job {i}",
                "status": "crashed" if i % 97 == 5 else "completed",
                "error": "killed by signal SIGSEGV" if i % 97 == 5 else "",
                "usage": {"input_tokens": 1200, "output_tokens": 80, "cache_read_tokens": 1000},
                "cost_usd": 0.001,
                "duration_ms": 4000.0,
                "queued_ms": 300.0,
                "parent_id": "main" if i < 20 else f"a{i % 20 + 1}",
                "started_at": start,
            }
        )
        transcripts[agent_id] = [
            {"ts": start + 0.5, "kind": "start", "agent_type": "worker"},
            {"ts": start + 0.6, "kind": "event", "event": {"kind": "turn", "turn": 1}},
            {
                "ts": start + 1.5,
                "kind": "event",
                "event": {"kind": "tool_start", "name": "grep", "arguments": '{"pattern":"x"}'},
            },
            {"ts": start + 2.5, "kind": "event", "event": {"kind": "tool_result", "name": "grep"}},
            {"ts": start + 3.9, "kind": "result", "result": {"status": "completed"}},
        ]
    transcripts["main"] = [
        {"ts": t0 - 1, "kind": "start", "agent_type": "main"},
        {"ts": t0 + n * 0.05 + 5, "kind": "result", "result": {"status": "completed"}},
    ]
    summary = {"run_id": "synthetic", "status": "completed", "subagents": subagents}
    return summary, transcripts


def test_five_hundred_sub_agents_each_get_a_lane(tmp_path: Path) -> None:
    summary, transcripts = synthetic_run(500)
    page = tmp_path / "big.html"
    page.write_text(timeline_html(summary, transcripts))
    assert page.stat().st_size < 2_000_000  # a page a browser opens at once
    dom = run_chromium(page, tmp_path, "--dump-dom")
    lanes = lanes_in(dom)
    assert len(lanes) == 501 and set(lanes) == {f"a{i + 1}" for i in range(500)} | {"main"}
    shot = tmp_path / "big.png"
    run_chromium(page, tmp_path, f"--screenshot={shot}", "--window-size=1400,900")
    assert shot.stat().st_size > 1000


def test_every_text_from_a_record_is_escaped() -> None:
    """Without a browser: each field a sub-agent writes is escaped where it lands."""
    summary, transcripts = synthetic_run(2)
    sub = summary["subagents"][0]
    sub.update(agent_id=HOSTILE, agent_type=HOSTILE, description=HOSTILE, status=HOSTILE)
    sub.update(error=HOSTILE)
    transcripts[HOSTILE] = transcripts.pop("a1")
    transcripts[HOSTILE][2]["event"]["arguments"] = HOSTILE
    summary["prompt"] = HOSTILE
    text = timeline_html(summary, transcripts)
    assert "<script" not in text.lower() and "<img" not in text and "<a " not in text
    for attack in ATTACKS:
        assert attack not in text
    assert text.count(html.escape(HOSTILE)) >= 5  # shown literally: id, type, text, cause…


def test_view_errors_are_one_line(tmp_path: Path) -> None:
    missing = CliRunner().invoke(cli_main, ["runs", "view", "nope", "--workdir", str(tmp_path)])
    assert missing.exit_code != 0
    assert "no run 'nope'" in missing.output and "Traceback" not in missing.output


def test_the_page_goes_into_the_run_folder_private(tmp_path: Path) -> None:
    summary, transcripts = synthetic_run(3)
    run = tmp_path / ".agentcell" / "runs" / "20260101-000000-0001"
    run.mkdir(parents=True)
    (run / "summary.json").write_text(json.dumps(summary))
    for agent_id, lines in transcripts.items():
        (run / f"{agent_id}.jsonl").write_text("".join(json.dumps(ln) + "\n" for ln in lines))
    done = CliRunner().invoke(cli_main, ["runs", "view", "0001", "--workdir", str(tmp_path)])
    assert done.exit_code == 0, done.output
    page = run / "timeline.html"
    assert done.output.strip() == str(page)
    assert page.stat().st_mode & 0o777 == 0o600
    assert len(lanes_in(page.read_text())) == 4
