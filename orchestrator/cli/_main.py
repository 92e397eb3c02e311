"""The ``agentcell`` command.

Exit codes: 0 the run completed; 1 it ended otherwise (error, crash, timeout, max_turns,
budget, cancelled), or its output could not be written (a full disk: one line says so,
and a run is still recorded); 2 bad usage or configuration; 130 interrupted (Ctrl-C); 143
terminated (SIGTERM). A reader that closes the pipe early (``| head``) changes no code.

Each command is a small function here that parses its options and hands over to its own
module (``_run_cmd``, ``_chat``, ``_agents_cmd``, ``_runs_cmd``, ``_demo``).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import click
from agentcell.orchestrator._reach import UnreachableModel
from agentcell.orchestrator._text import visible
from agentcell.orchestrator.backends._forkserver import PoolError
from agentcell.orchestrator.cli._pipes import (
    end_output,
    is_closed_pipe,
    stdout_gone,
    watch_stdout,
)
from agentcell.orchestrator.config._load import ConfigError, load_settings
from agentcell.orchestrator.config._settings import Settings
from agentcell.worker import OutsideRoot
from agentcell.worker.models import ModelError

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
EXIT_UNREACHABLE = 3  # a model the run needs cannot be reached (its key is unset)
WORKDIR_HELP = "The project folder: its config and agent files, and where runs are recorded."

F = TypeVar("F", bound=Callable[..., Any])


def _fail(message: str, code: int = EXIT_USAGE) -> NoReturn:
    # Errors quote files, servers and user input: their control characters are shown.
    click.echo(f"agentcell: error: {visible(message)}", err=True)
    sys.exit(code)


def guarded(fn: F) -> F:
    """Errors a user can cause become one line on stderr; ``--debug`` shows the traceback."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        debug = kwargs.get("debug") or click.get_current_context().find_root().params.get("debug")
        try:
            return fn(*args, **kwargs)
        except (ConfigError, ModelError, PoolError, LookupError, ValueError, OutsideRoot) as exc:
            if debug:
                raise
            _fail(str(exc), EXIT_UNREACHABLE if isinstance(exc, UnreachableModel) else EXIT_USAGE)

    return wrapper  # type: ignore[return-value]


def common_options(fn: F) -> F:
    options = [
        click.option(
            "--model",
            help="Main model as PROVIDER:NAME, e.g. openai:gpt-4o-mini, "
            "anthropic:claude-sonnet-4-5, scripted:demo.  [default: AGENTCELL_MODEL, else "
            "`model` in agentcell.toml or ~/.config/agentcell/config.toml; none built in]",
        ),
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
            "sub-agents may ask too.  [default: ask]",
        ),
        click.option(
            "--permission-mode",
            metavar="MODE",
            help="default, acceptEdits, plan or bypassPermissions (as permission_mode); "
            "chosen, it holds over agent files' acceptEdits.  [default: default]",
        ),
        click.option(
            "--max-workers",
            type=click.IntRange(min=1),
            help="Most sub-agent processes at once.  [default: 16]",
        ),
        click.option(
            "--max-depth",
            type=click.IntRange(min=1),
            help="Nesting depth (1: sub-agents cannot delegate).  [default: 1]",
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
        click.option(
            "--agents",
            "agents_json",
            metavar="JSON",
            help="Temporary agent definitions for this session, as the Claude Agent SDK "
            'writes them: \'{"name": {"description": ..., "prompt": ..., "tools": [...]}}\'.',
        ),
        click.option(
            "--model-alias",
            "model_aliases",
            multiple=True,
            metavar="ALIAS=PROVIDER:NAME",
            help="Run agent files' model ALIAS (sonnet, opus, haiku, …) on this model, e.g. "
            "sonnet=openai:qwen2.5-coder for a local server (repeatable; as [aliases]).",
        ),
        click.option("--debug", is_flag=True, help="Show tracebacks and debug logs."),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


workdir_option = click.option(
    "--workdir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("."),
    show_default=True,
    help=WORKDIR_HELP,
)
agents_dir_option = click.option(
    "--agents-dir",
    "agents_dirs",
    multiple=True,
    type=click.Path(path_type=Path),
    help="Extra folder of agent files (repeatable; later ones win).",
)
json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON on stdout.")
debug_option = click.option("--debug", is_flag=True, help="Show tracebacks and debug logs.")


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
    model_aliases: tuple[str, ...] = (),
    permission_mode: str | None = None,
) -> Settings:
    if not workdir.is_dir():
        raise ConfigError([f"--workdir {workdir}: no such directory"])
    flags = {
        "aliases": _parse_aliases(model_aliases) or None,
        "model": model,
        "approval": approve,
        "max_workers": max_workers,
        "max_depth": max_depth,
        "backend": backend,
        "ray": {"address": ray_address} if ray_address else None,
        "sandbox": sandbox,
        "permission_mode": permission_mode,
    }
    settings, _sources = load_settings(workdir=workdir.resolve(), flags=flags)
    if settings.backend == "ray":  # from --backend or a config file
        from agentcell.orchestrator.cli._ray_cmd import require_ray_module

        require_ray_module()
    return settings


def _parse_aliases(given: tuple[str, ...]) -> dict[str, str]:
    aliases = {}
    for item in given:
        alias, sep, target = item.partition("=")
        if not sep or not alias.strip() or ":" not in target:
            raise ConfigError(
                [f"--model-alias {item}: write ALIAS=PROVIDER:NAME, e.g. sonnet=openai:qwen2.5"]
            )
        aliases[alias.strip()] = target.strip()
    return aliases


def _setup_logging(debug: bool) -> None:
    handler = logging.StreamHandler()
    handler.setFormatter(_LowerCaseLevels("agentcell: %(levelname)s: %(message)s"))
    logging.basicConfig(level=logging.DEBUG if debug else logging.WARNING, handlers=[handler])


class _LowerCaseLevels(logging.Formatter):
    """``agentcell: warning: …``, as the lines the command prints itself say it (an
    agent file's ``path: warning: …``), not ``WARNING``."""

    def format(self, record: logging.LogRecord) -> str:
        record = logging.makeLogRecord({**record.__dict__, "levelname": record.levelname.lower()})
        return super().format(record)


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
@click.argument("prompt", required=False)
@click.option(
    "--prompt-file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Read the prompt from this file (for long prompts).",
)
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
    prompt: str | None,
    *,
    prompt_file: Path | None,
    workdir: Path,
    agents_dirs: tuple[Path, ...],
    timeout: float | None,
    as_json: bool,
    quiet: bool,
    debug: bool,
    **flags: Any,
) -> None:
    """Run the main agent once on PROMPT (`-` reads it from stdin); the answer streams
    to stdout, progress to stderr."""
    from agentcell.orchestrator.cli._run_cmd import run_once

    _setup_logging(debug)
    text = _read_prompt(prompt, prompt_file)
    inline = _inline_agents(flags.pop("agents_json", None))
    settings = _load(workdir, **flags)
    code = asyncio.run(
        run_once(
            text,
            settings,
            workdir=workdir.resolve(),
            agents_dirs=agents_dirs,
            agents=inline,
            timeout_s=timeout,
            as_json=as_json,
            quiet=quiet,
        )
    )
    sys.exit(code)


def _read_prompt(prompt: str | None, prompt_file: Path | None) -> str:
    if prompt is not None and prompt_file is not None:
        raise click.UsageError("give PROMPT or --prompt-file, not both")
    if prompt_file is not None:
        try:
            text = prompt_file.read_text(errors="replace")
        except OSError as exc:
            raise click.UsageError(f"--prompt-file {prompt_file}: {exc.strerror}") from None
    elif prompt == "-":
        if sys.stdin.isatty():  # a person, typing: say how to end it (a pipe needs nothing)
            click.echo(
                "agentcell: reading the prompt from the terminal; end it with Ctrl-D", err=True
            )
        text = sys.stdin.read()
    else:
        text = prompt or ""
    if not text.strip():
        raise click.UsageError(
            "the prompt is empty: give PROMPT, `-` to read it from stdin, or --prompt-file PATH"
        )
    return text


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
    inline = _inline_agents(flags.pop("agents_json", None))
    settings = _load(workdir, **flags)
    sys.exit(asyncio.run(run_chat(settings, workdir.resolve(), agents_dirs, agents=inline)))


def _inline_agents(text: str | None) -> list[Any]:
    """``--agents JSON``: the AgentDefinitions it names (a usage error if it is bad)."""
    if text is None:
        return []
    from agentcell.orchestrator.definitions._inline import definitions_from_json

    try:
        return definitions_from_json(text)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None


# -- agents ---------------------------------------------------------------------------------
@cli.group()
def agents() -> None:
    """List, show and validate sub-agent definitions."""


@agents.command("list")
@workdir_option
@agents_dir_option
@json_option
@debug_option
@guarded
def agents_list(workdir: Path, agents_dirs: tuple[Path, ...], as_json: bool, debug: bool) -> None:
    """Every definition with its source, model and resolved tools."""
    from agentcell.orchestrator.cli._agents_cmd import list_agents

    list_agents(workdir.resolve(), agents_dirs, as_json=as_json)


@agents.command("show")
@click.argument("name")
@workdir_option
@agents_dir_option
@json_option
@debug_option
@guarded
def agents_show(
    name: str, workdir: Path, agents_dirs: tuple[Path, ...], as_json: bool, debug: bool
) -> None:
    """One definition in full."""
    from agentcell.orchestrator.cli._agents_cmd import show_agent

    show_agent(name, workdir.resolve(), agents_dirs, as_json=as_json)


@agents.command("validate")
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@workdir_option
@click.option(
    "--agents-dir",
    "agents_dirs",
    multiple=True,
    type=click.Path(path_type=Path),
    help="Extra folder of agent files (repeatable; later ones win).",
)
@click.option(
    "-v", "--verbose", is_flag=True, help="Notes too (overrides, tolerant YAML), and each file."
)
@debug_option
@guarded
def agents_validate(
    paths: tuple[Path, ...],
    workdir: Path,
    agents_dirs: tuple[Path, ...],
    verbose: bool,
    debug: bool,
) -> None:
    """Check agent files or folders (default: this project's agent folders and each
    --agents-dir, as `agents list` sees them), duplicate names and overrides included."""
    from agentcell.orchestrator.cli._agents_cmd import validate_agents

    sys.exit(validate_agents(paths, workdir.resolve(), agents_dirs, verbose=verbose))


# -- runs -----------------------------------------------------------------------------------
@cli.group()
def runs() -> None:
    """Read back recorded runs (.agentcell/runs/ under the workdir)."""


@runs.command("list")
@workdir_option
@json_option
@debug_option
@guarded
def runs_list(workdir: Path, as_json: bool, debug: bool) -> None:
    """Recorded runs, newest first."""
    from agentcell.orchestrator.cli._runs_cmd import list_recorded

    list_recorded(workdir.resolve(), as_json=as_json)


@runs.command("show")
@click.argument("run_id")
@click.argument("agent", required=False)
@workdir_option
@json_option
@debug_option
@guarded
def runs_show(run_id: str, agent: str | None, workdir: Path, as_json: bool, debug: bool) -> None:
    """One run: what each sub-agent was asked, did and answered (RUN_ID may be a unique
    prefix or suffix); with AGENT (an id such as a3, or main), that agent's transcript."""
    from agentcell.orchestrator.cli._runs_cmd import show_recorded

    show_recorded(workdir.resolve(), run_id, agent, as_json=as_json)


@runs.command("view")
@click.argument("run_id")
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Where to write the page (default: timeline.html in the run's folder).",
)
@workdir_option
@debug_option
@guarded
def runs_view(run_id: str, output: Path | None, workdir: Path, debug: bool) -> None:
    """One run as a timeline: a self-contained HTML page with a lane per agent."""
    from agentcell.orchestrator.cli._timeline import write_timeline

    click.echo(write_timeline(workdir.resolve(), run_id, output))


@runs.command("resume")
@click.argument("run_id")
@click.argument("prompt", required=False)
@common_options
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout.")
@guarded
def runs_resume(
    run_id: str,
    prompt: str | None,
    *,
    workdir: Path,
    agents_dirs: tuple[Path, ...],
    as_json: bool,
    debug: bool,
    **flags: Any,
) -> None:
    """Continue a recorded main session (RUN_ID may be a unique prefix or suffix), with the
    model it used unless --model says otherwise: with PROMPT, one more run on it (`-` reads
    it from stdin); without, a chat that goes on from it."""
    from agentcell.orchestrator._resume_run import interrupted_prompt
    from agentcell.orchestrator.journal._place import run_state
    from agentcell.orchestrator.records._store import (
        find_run_dir,
        recorded_main_session,
        recorded_model,
    )
    from agentcell.worker import Session

    _setup_logging(debug)
    inline = _inline_agents(flags.pop("agents_json", None))
    try:
        state, pid = run_state(found := find_run_dir(workdir.resolve(), run_id))
        if state == "running":  # its orchestrator is alive: two would write one run
            raise LookupError(f"run {found.name} is still running (pid {pid})")
        if state == "interrupted" and (killed := interrupted_prompt(found)) is not None:
            from agentcell.orchestrator.cli._runs_cmd import Resuming, finish_interrupted

            how = Resuming(workdir, agents_dirs, inline, as_json=as_json, load=_load)
            then = _read_prompt(prompt, None) if prompt is not None else None
            sys.exit(finish_interrupted(how, found, killed, then, flags))
        resumed_id, messages = recorded_main_session(workdir.resolve(), run_id)
        if flags.get("model") is None:  # the record names the model the session was with
            flags["model"] = recorded_model(workdir.resolve(), run_id)
    except LookupError as exc:
        raise click.UsageError(str(exc.args[0])) from None
    settings = _load(workdir, **flags)
    session = Session(messages)
    if prompt is None:
        from agentcell.orchestrator.cli._chat import run_chat

        code = asyncio.run(
            run_chat(
                settings,
                workdir.resolve(),
                agents_dirs,
                agents=inline,
                session=session,
                resumed_from=resumed_id,
            )
        )
        sys.exit(code)
    from agentcell.orchestrator.cli._run_cmd import run_once

    code = asyncio.run(
        run_once(
            _read_prompt(prompt, None),
            settings,
            workdir=workdir.resolve(),
            agents_dirs=agents_dirs,
            agents=inline,
            timeout_s=None,
            as_json=as_json,
            quiet=as_json,
            session=session,
            resumed_from=resumed_id,
        )
    )
    sys.exit(code)


# -- ray ------------------------------------------------------------------------------------
@cli.group("ray")
def ray_group() -> None:
    """agentcell's own Ray head on 127.0.0.1 (loopback only), for --backend ray."""


@ray_group.command("start")
@click.option(
    "--num-cpus",
    type=click.IntRange(min=1),
    default=8,
    show_default=True,
    help="CPUs the head offers its tasks (each sub-agent asks for [ray] num_cpus).",
)
@click.option("--port", type=click.IntRange(1, 65535), help="The head's port (default: free).")
@debug_option
@guarded
def ray_start_cmd(num_cpus: int, port: int | None, debug: bool) -> None:
    """Start a head on 127.0.0.1 with usage reporting and cloud probing off."""
    from agentcell.orchestrator.cli._ray_cmd import ray_start

    ray_start(num_cpus, port)


@ray_group.command("status")
def ray_status_cmd() -> None:
    """Whether agentcell's head runs, and where."""
    from agentcell.orchestrator.cli._ray_cmd import ray_status

    ray_status()


@ray_group.command("stop")
def ray_stop_cmd() -> None:
    """Stop agentcell's head and what it started (no other Ray process)."""
    from agentcell.orchestrator.cli._ray_cmd import ray_stop

    ray_stop()


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
@debug_option
@guarded
def trust_cmd(
    folder: Path | None, list_them: bool, revoke_folder: Path | None, debug: bool
) -> None:
    """Honour FOLDER's own configuration (default: here); until then it may only tighten."""
    from agentcell.orchestrator.cli._trust_cmd import run_trust

    run_trust(folder, list_them=list_them, revoke_folder=revoke_folder)


def main() -> None:
    watch_stdout()  # from here on, a write to stdout never fails the command
    sys.exit(end_output(_command_code()))


def _command_code() -> int:
    """Run the command line; its exit code."""
    try:
        # Not click's standalone mode: it turns Ctrl-C into "Aborted!" and exit code 1.
        code = cli.main(standalone_mode=False)
    except SystemExit as exc:  # a command's own exit code
        code = exc.code
    except click.Abort as exc:  # Ctrl-C (or end of input) before a command's own handling
        interrupted = isinstance(exc.__context__, KeyboardInterrupt)
        return EXIT_INTERRUPTED if interrupted else EXIT_FAILED
    except KeyboardInterrupt:
        click.echo("", err=True)
        return EXIT_INTERRUPTED
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except OSError as exc:
        if not is_closed_pipe(exc):
            raise
        # The reader of stdout went away (``agentcell runs list | head -1``) while stdout
        # was not watched: what it wanted was shown, so end quietly, as ``git log | head``.
        stdout_gone()
        return EXIT_OK
    if code is None:
        return EXIT_OK
    return code if isinstance(code, int) else EXIT_FAILED
