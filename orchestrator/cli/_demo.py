"""``agentcell demo``: the whole idea in one offline run.

The main agent (the built-in ``scripted:demo`` model) fans out Explore sub-agents over
agentcell's own source — real glob/grep/read_file calls, each sub-agent in its own
process — starts one survey in the background, sends one sub-agent to crash on purpose,
and sums up. The live view shows every process; the table at the end shows what each did.
"""

from __future__ import annotations

from pathlib import Path

from agentcell.orchestrator._orchestrator import Orchestrator
from agentcell.orchestrator.cli._display import ProgressView, make_console
from agentcell.orchestrator.cli._report import emit_report
from agentcell.orchestrator.config._settings import Settings
from agentcell.orchestrator.definitions._model import AgentDefinition
from agentcell.orchestrator.records._store import new_run_dir

from agentcell import protocol

CRASH_TEST = AgentDefinition(
    name="crash-test",
    description="Crashes its own process on purpose, to show that a crash is contained.",
    system_prompt="You demonstrate crash containment.",
    tools=[],
    source="demo",
)

INTRO = (
    "[bold]agentcell demo[/bold] — offline, on the built-in scripted model "
    "(no API key, no network)\n\n"
    "A main agent delegates to sub-agents. Each sub-agent runs in [bold]its own OS "
    "process[/bold], with its own memory and only the tools it was given; the parent relays "
    "its progress and turns however it ends into one result. Watch for:\n"
    "  • three Explore sub-agents surveying agentcell's source in parallel "
    "(real glob, grep and read_file calls)\n"
    "  • one survey running in the background, its result delivered to the main agent later\n"
    "  • one sub-agent that [bold red]crashes its process on purpose[/bold red] — "
    "the others carry on\n"
)


def package_root() -> Path:
    """The folder holding agentcell's own packages (the source checkout, or site-packages)."""
    return Path(protocol.__file__).resolve().parent.parent


async def run_demo() -> int:
    console, live = make_console()
    console.print(INTRO, highlight=False)
    workdir = package_root()
    run_dir = new_run_dir(Path.cwd())
    settings = Settings(model="scripted:demo", approval="deny", max_workers=8, warm_spares=4)
    orch = Orchestrator(
        settings=settings,
        workdir=workdir,
        agents=[CRASH_TEST],
        load_agent_files=False,
        run_dir=run_dir,
    )
    view = ProgressView(console, live=live)
    async with orch:
        orch.bus.subscribe(view.on_event)
        view.start()
        try:
            report = await orch.run(
                "Give me a tour of this codebase: what are its packages and what is in each?"
            )
        finally:
            view.stop()
    console.print("\n[bold]The main agent's answer[/bold] (stdout):", highlight=False)
    emit_report(report, console, as_json=False, quiet=False, prompt="demo", model="scripted:demo")
    pids = sorted({r.pid for r in report.subagents if r.pid})
    console.print(
        f"\n{len(report.subagents)} sub-agents ran in {len(pids)} separate processes; the crash "
        "was one result among the others, and every process is gone now.\n"
        f"Read the record: agentcell runs show {run_dir.name}\n"
        'Next: agentcell run --model openai:gpt-4o-mini "what does this repository do?"',
        highlight=False,
    )
    crashed = [r for r in report.subagents if r.status.value == "crashed"]
    return 0 if report.ok and len(crashed) == 1 else 1
