"""The ``agentcell`` command.

Exit codes: 0 the run completed; 1 it ended otherwise (error, crash, timeout, max_turns,
budget, cancelled); 2 bad usage or configuration; 130 interrupted (Ctrl-C).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import click
from agentcell.orchestrator._orchestrator import Orchestrator
from agentcell.orchestrator._records import new_run_dir
from agentcell.orchestrator.backends import PoolError
from agentcell.orchestrator.cli._display import ProgressView, make_console
from agentcell.orchestrator.cli._report import emit_report, print_diagnostics
from agentcell.orchestrator.config import ConfigError, Settings, load_settings
from agentcell.worker.models import ModelError

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130

F = TypeVar("F", bound=Callable[..., Any])


def _fail(message: str, code: int = EXIT_USAGE) -> NoReturn:
    click.echo(f"agentcell: error: {message}", err=True)
    sys.exit(code)


def guarded(fn: F) -> F:
    """Errors a user can cause become one line on stderr; ``--debug`` shows the traceback."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        debug = kwargs.get("debug") or click.get_current_context().find_root().params.get("debug")
        try:
            return fn(*args, **kwargs)
        except (ConfigError, ModelError, PoolError, LookupError, ValueError) as exc:
            if debug:
                raise
            _fail(str(exc))

    return wrapper  # type: ignore[return-value]


def common_options(fn: F) -> F:
    options = [
        click.option("--model", help="Main model, e.g. openai:gpt-4o-mini, scripted:demo."),
        click.option(
            "--workdir",
            type=click.Path(file_okay=False, path_type=Path),
            default=Path("."),
            show_default=True,
            help="The directory agents work in (file tools are confined to it).",
        ),
        click.option(
            "--agents-dir",
            "agents_dirs",
            multiple=True,
            type=click.Path(path_type=Path),
            help="Extra folder of agent files (repeatable; later ones win).",
        ),
        click.option(
            "--approve",
            type=click.Choice(["ask", "allow", "deny", "bubble"]),
            help="ask: prompt on the terminal (deny without one); bubble: background "
            "sub-agents may ask too.",
        ),
        click.option(
            "--max-workers", type=click.IntRange(min=1), help="Most sub-agent processes at once."
        ),
        click.option(
            "--max-depth",
            type=click.IntRange(min=1),
            help="Nesting depth (1: sub-agents cannot delegate).",
        ),
        click.option(
            "--backend",
            type=click.Choice(["local", "ray"]),
            help="Where sub-agents run: this machine (default) or a Ray cluster.",
        ),
        click.option(
            "--ray-address",
            help="The Ray cluster for --backend ray (HOST:PORT; default: $RAY_ADDRESS, "
            "else a cluster running on this machine).",
        ),
        click.option(
            "--sandbox",
            type=click.Choice(["workspace", "read-only", "off", "required"]),
            help="The OS walls around each sub-agent (see 'agentcell sandbox').",
        ),
        click.option("--debug", is_flag=True, help="Show tracebacks and debug logs."),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


def _load(
    workdir: Path,
    *,
    model: str | None,
    approve: str | None,
    max_workers: int | None,
    max_depth: int | None,
    backend: str | None = None,
    ray_address: str | None = None,
    sandbox: str | None = None,
) -> Settings:
    if not workdir.is_dir():
        raise ConfigError([f"--workdir {workdir}: no such directory"])
    flags = {
        "model": model,
        "approval": approve,
        "max_workers": max_workers,
        "max_depth": max_depth,
        "backend": backend,
        "ray": {"address": ray_address} if ray_address else None,
        "sandbox": sandbox,
    }
    settings, _sources = load_settings(workdir=workdir.resolve(), flags=flags)
    return settings


def _setup_logging(debug: bool) -> None:
    logging.basicConfig(
        level=logging.DEBUG if debug else logging.WARNING,
        format="agentcell: %(levelname)s: %(message)s",
    )


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="agentcell")
def cli() -> None:
    """Run every sub-agent of an LLM agent in its own OS process.

    \b
    Start with:  agentcell demo
    Then:        agentcell run --model openai:gpt-4o-mini "What does this repo do?"
    """


# -- run ------------------------------------------------------------------------------------
@cli.command()
@click.argument("prompt")
@common_options
@click.option(
    "--timeout",
    type=click.FloatRange(min=0, min_open=True),
    help="Give up after this many seconds.",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout.")
@click.option("--quiet", is_flag=True, help="No progress on stderr.")
@guarded
def run(
    prompt: str,
    *,
    workdir: Path,
    agents_dirs: tuple[Path, ...],
    timeout: float | None,
    as_json: bool,
    quiet: bool,
    debug: bool,
    **flags: Any,
) -> None:
    """Run the main agent once on PROMPT; the answer goes to stdout."""
    _setup_logging(debug)
    settings = _load(workdir, **flags)
    code = asyncio.run(
        _run(
            prompt,
            settings,
            workdir=workdir.resolve(),
            agents_dirs=agents_dirs,
            timeout_s=timeout,
            as_json=as_json,
            quiet=quiet,
        )
    )
    sys.exit(code)


async def _run(
    prompt: str,
    settings: Settings,
    *,
    workdir: Path,
    agents_dirs: tuple[Path, ...],
    timeout_s: float | None,
    as_json: bool,
    quiet: bool,
) -> int:
    console, live = make_console()
    orch = Orchestrator(
        settings=settings, workdir=workdir, agents_dirs=agents_dirs, run_dir=new_run_dir(workdir)
    )
    if not quiet:
        print_diagnostics(orch, console)
    view = None if quiet else ProgressView(console, live=live)
    interrupted = False
    main_task = asyncio.current_task()
    assert main_task is not None

    def on_sigint() -> None:
        nonlocal interrupted
        if interrupted:  # a second Ctrl-C: stop waiting for a clean cancel
            main_task.cancel()
            return
        interrupted = True
        console.print("\ncancelling (Ctrl-C again to force)…", style="yellow")
        orch.cancel()

    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGINT, on_sigint)
    try:
        async with orch:
            if view is not None:
                orch.bus.subscribe(view.on_event)
                view.start()
            try:
                report = await orch.run(prompt, timeout_s=timeout_s)
            finally:
                if view is not None:
                    view.stop()
    except asyncio.CancelledError:
        console.print("interrupted; every sub-agent process was stopped", style="yellow")
        return EXIT_INTERRUPTED
    finally:
        loop.remove_signal_handler(signal.SIGINT)
    emit_report(
        report, console, as_json=as_json, quiet=quiet, prompt=prompt, model=orch.model_name or ""
    )
    if interrupted:
        return EXIT_INTERRUPTED
    return EXIT_OK if report.ok else EXIT_FAILED


# -- demo -----------------------------------------------------------------------------------
@cli.command()
@click.option("--debug", is_flag=True, help="Show tracebacks and debug logs.")
@guarded
def demo(debug: bool) -> None:
    """An offline tour on the built-in scripted model: no API key, no network."""
    from agentcell.orchestrator.cli._demo import run_demo

    _setup_logging(debug)
    sys.exit(asyncio.run(run_demo()))


# -- chat -----------------------------------------------------------------------------------
@cli.command()
@common_options
@guarded
def chat(workdir: Path, agents_dirs: tuple[Path, ...], debug: bool, **flags: Any) -> None:
    """An interactive session: /help lists the commands."""
    from agentcell.orchestrator.cli._chat import run_chat

    _setup_logging(debug)
    settings = _load(workdir, **flags)
    sys.exit(asyncio.run(run_chat(settings, workdir.resolve(), agents_dirs)))


# -- agents ---------------------------------------------------------------------------------
@cli.group()
def agents() -> None:
    """List, show and validate sub-agent definitions."""


@agents.command("list")
@click.option("--workdir", type=click.Path(file_okay=False, path_type=Path), default=Path("."))
@click.option("--agents-dir", "agents_dirs", multiple=True, type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True)
@click.option("--debug", is_flag=True)
@guarded
def agents_list(workdir: Path, agents_dirs: tuple[Path, ...], as_json: bool, debug: bool) -> None:
    """Every definition with its source, model and resolved tools."""
    from agentcell.orchestrator.cli._agents_cmd import list_agents

    list_agents(workdir.resolve(), agents_dirs, as_json=as_json)


@agents.command("show")
@click.argument("name")
@click.option("--workdir", type=click.Path(file_okay=False, path_type=Path), default=Path("."))
@click.option("--agents-dir", "agents_dirs", multiple=True, type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True)
@click.option("--debug", is_flag=True)
@guarded
def agents_show(
    name: str, workdir: Path, agents_dirs: tuple[Path, ...], as_json: bool, debug: bool
) -> None:
    """One definition in full."""
    from agentcell.orchestrator.cli._agents_cmd import show_agent

    show_agent(name, workdir.resolve(), agents_dirs, as_json=as_json)


@agents.command("validate")
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@click.option("--workdir", type=click.Path(file_okay=False, path_type=Path), default=Path("."))
@click.option("--agents-dir", "agents_dirs", multiple=True, type=click.Path(path_type=Path))
@click.option("--debug", is_flag=True)
@guarded
def agents_validate(
    paths: tuple[Path, ...], workdir: Path, agents_dirs: tuple[Path, ...], debug: bool
) -> None:
    """Check agent files or folders (default: this project's agent folders and each
    --agents-dir, as `agents list` sees them), duplicate names and overrides included."""
    from agentcell.orchestrator.cli._agents_cmd import validate_agents

    sys.exit(validate_agents(paths, workdir.resolve(), agents_dirs))


# -- runs -----------------------------------------------------------------------------------
@cli.group()
def runs() -> None:
    """Read back recorded runs (.agentcell/runs/ under the workdir)."""


@runs.command("list")
@click.option("--workdir", type=click.Path(file_okay=False, path_type=Path), default=Path("."))
@click.option("--json", "as_json", is_flag=True)
@click.option("--debug", is_flag=True)
@guarded
def runs_list(workdir: Path, as_json: bool, debug: bool) -> None:
    """Recorded runs, newest first."""
    from agentcell.orchestrator.cli._runs_cmd import list_recorded

    list_recorded(workdir.resolve(), as_json=as_json)


@runs.command("show")
@click.argument("run_id")
@click.option("--workdir", type=click.Path(file_okay=False, path_type=Path), default=Path("."))
@click.option("--json", "as_json", is_flag=True)
@click.option("--debug", is_flag=True)
@guarded
def runs_show(run_id: str, workdir: Path, as_json: bool, debug: bool) -> None:
    """One run: its summary and what each agent did."""
    from agentcell.orchestrator.cli._runs_cmd import show_recorded

    show_recorded(workdir.resolve(), run_id, as_json=as_json)


# -- sandbox and trust ---------------------------------------------------------------------
@cli.command("sandbox")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout.")
def sandbox_cmd(as_json: bool) -> None:
    """What this machine enforces, and what each sandbox mode does here."""
    from agentcell.orchestrator.cli._sandbox_cmd import show_sandbox

    show_sandbox(as_json=as_json)


@cli.command("trust")
@click.argument("folder", required=False, type=click.Path(file_okay=False, path_type=Path))
@click.option("--list", "list_them", is_flag=True, help="The folders you trust.")
@click.option("--revoke", "revoke_folder", type=click.Path(path_type=Path), help="Stop trusting.")
@click.option("--debug", is_flag=True)
@guarded
def trust_cmd(
    folder: Path | None, list_them: bool, revoke_folder: Path | None, debug: bool
) -> None:
    """Honour FOLDER's own configuration (default: here); until then it may only tighten."""
    from agentcell.orchestrator.cli._trust_cmd import run_trust

    run_trust(folder, list_them=list_them, revoke_folder=revoke_folder)


def main() -> None:
    cli()
