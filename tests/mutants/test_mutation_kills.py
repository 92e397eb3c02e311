"""Tests that kill the mutants a mutation pass over the security checks left alive
(issue 21, item 9). Each names the mutant it kills; ``make mutants`` reruns the pass.

- frame-signature verification cut to a length check, parent side and child side: the
  forged frames here carry a MAC of the right length that is wrong;
- the "first Result counts" guard deleted;
- trust's sandbox looseness order changed; the trusted-folder check without its ``/``;
- the ``max_processes`` bound doubled, ``pids.max`` written at 4x the limit;
- redaction run shortest-secret-first;
- the request deadline restarted on each retry.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import survivor_handlers
from agentcell.orchestrator import AgentDefinition, Orchestrator, Settings
from agentcell.orchestrator.backends._forkserver import WorkerPool
from agentcell.orchestrator.backends._outcome import OutcomeKind
from agentcell.orchestrator.config._load import load_settings, user_config_path
from agentcell.orchestrator.config._trust import is_trusted, trust
from agentcell.protocol import (
    PROTOCOL_VERSION,
    ApprovalReply,
    ApprovalRequest,
    Result,
    RunStatus,
    Start,
    UserMessage,
)
from agentcell.worker import Redactor
from agentcell.worker.models import ModelError, ModelErrorKind, ModelRequest, OpenAIChatModel
from agentcell.worker.models._http_options import HttpOptions
from agentcell.worker.sandbox import _cgroup
from conftest import SpawnRecorder
from model_servers import Call, ModelServer, Reply


def start(op: str) -> Start:
    return Start(
        protocol_version=PROTOCOL_VERSION,
        run_id="r",
        handler="survivor_handlers:run",
        args={"op": op},
    )


# -- the frame MAC, parent side and child side -------------------------------------------------


async def test_results_with_a_wrong_signature_of_the_right_length_are_dropped(
    spawned: SpawnRecorder,
) -> None:
    """Kills: the parent's check cut to ``len(frame.mac) == 16``."""
    async with WorkerPool(max_workers=2, warm=1) as pool, pool.lease() as lease:
        await lease.send(start("thief_forges_wrongly_signed_results"))
        outcome = await lease.wait()
        forged = lease._worker.forged_frames
    assert outcome.kind is OutcomeKind.RESULT, outcome
    assert outcome.result is not None and outcome.result.text == "genuine"
    assert forged == 2


async def test_an_approval_with_a_wrong_signature_is_ignored_by_the_child(
    spawned: SpawnRecorder,
) -> None:
    """Kills: the child's check cut to a length check (only a child can see it: the
    child process runs the module as installed, so a mutant must be made in place)."""
    async with WorkerPool(max_workers=2, warm=1) as pool, pool.lease() as lease:
        await lease.send(start("approval"))
        request = await lease.recv()
        assert isinstance(request, ApprovalRequest)
        fd = lease._worker.channel._fd  # a thief with a copy of the parent's end
        await asyncio.to_thread(survivor_handlers.run_thief, survivor_handlers.FORGED_APPROVAL, fd)
        await lease.send(
            ApprovalReply(request_id=request.request_id, approved=False, reason="not today")
        )
        frames = [f async for f in lease]
    assert isinstance(frames[-1], Result)
    assert frames[-1].result.text == "False:not today"


async def test_the_first_genuine_result_is_the_one_that_counts(spawned: SpawnRecorder) -> None:
    """Kills: the "first Result counts" guard deleted."""
    async with WorkerPool(max_workers=2, warm=1) as pool, pool.lease() as lease:
        await lease.send(start("two_results"))
        outcome = await lease.wait()
    assert outcome.kind is OutcomeKind.RESULT, outcome
    assert outcome.result is not None and outcome.result.text == "first"


# -- trust -------------------------------------------------------------------------------------


def _load(project: Path, home: Path, user: str, toml: str) -> tuple[Settings, list[str]]:
    config = user_config_path(home, {"HOME": str(home)})
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(user)
    (project / "agentcell.toml").write_text(toml)
    notices: list[str] = []
    settings, _ = load_settings(
        workdir=project, home=home, env={"HOME": str(home)}, notices=notices
    )
    return settings, notices


SANDBOX_ORDER = ["read-only", "required", "workspace", "off"]  # tightest first


@pytest.mark.parametrize("users", SANDBOX_ORDER)
@pytest.mark.parametrize("projects", SANDBOX_ORDER)
def test_an_untrusted_sandbox_is_honoured_exactly_when_it_is_as_tight(
    tmp_path: Path, users: str, projects: str
) -> None:
    """Kills: any change to the sandbox looseness order."""
    project, home = tmp_path / "p", tmp_path / "h"
    project.mkdir()
    home.mkdir()
    settings, notices = _load(project, home, f'sandbox = "{users}"\n', f'sandbox = "{projects}"')
    tighter = SANDBOX_ORDER.index(projects) <= SANDBOX_ORDER.index(users)
    assert settings.sandbox == (projects if tighter else users)
    assert (notices == []) is tighter


def test_a_trusted_folder_covers_only_the_folder_and_what_is_beneath_it(tmp_path: Path) -> None:
    """Kills: the trusted-folder prefix check without its ``/`` boundary."""
    home = tmp_path / "h"
    home.mkdir()
    user = user_config_path(home, {"HOME": str(home)})
    for name in ("repo", "repo-evil", "repository", "repo/sub", "rep", "a"):
        (tmp_path / name).mkdir(parents=True)
    trust(tmp_path / "repo", user)
    assert is_trusted(tmp_path / "repo", user) and is_trusted(tmp_path / "repo" / "sub", user)
    assert not is_trusted(tmp_path / "repo-evil", user)
    assert not is_trusted(tmp_path / "repository", user)
    assert not is_trusted(tmp_path / "rep", user) and not is_trusted(tmp_path / "a", user)


# -- redaction ---------------------------------------------------------------------------------


def test_a_secret_that_extends_another_is_masked_whole() -> None:
    """Kills: redaction run shortest-secret-first (a key that is a prefix of another)."""
    short, long = "sk-proj-abcdefgh", "sk-proj-abcdefgh-and-the-rest-9876"
    for secrets in ([short, long], [long, short]):
        redact = Redactor(secrets)
        assert redact(f"a={long} b={short}") == "a=[REDACTED] b=[REDACTED]"
        assert "9876" not in redact(long)


# -- the process bound -------------------------------------------------------------------------


@pytest.fixture
def served(model_server: ModelServer, monkeypatch: pytest.MonkeyPatch) -> ModelServer:
    monkeypatch.setenv("OPENAI_BASE_URL", model_server.openai_base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-mutation-kill-key")
    return model_server


def _bash_then_text(command: str) -> Any:
    def responder(body: dict[str, Any], api: str) -> Reply:
        if body["messages"][-1]["role"] == "tool":
            return Reply(text=body["messages"][-1]["content"])
        return Reply(tool_calls=[Call("bash", {"command": command, "timeout_s": 30})])

    return responder


async def test_the_process_bound_is_max_processes_exactly(
    spawned: SpawnRecorder, tmp_path: Path, served: ModelServer
) -> None:
    """Kills: the ``max_processes`` bound doubled and ``pids.max`` written at 4x: the
    sub-agent's own bash reads the bound its cgroup holds."""
    read = (
        "p=$(grep -E '^[0-9]+:pids:' /proc/self/cgroup | cut -d: -f3); "
        "for root in /sys/fs/cgroup/pids /sys/fs/cgroup; do "
        'f="$root$p/pids.max"; [ -r "$f" ] && { echo "bound $(cat "$f")"; break; }; done; '
        "grep -q pids /proc/self/cgroup || echo 'no pids controller'"
    )
    served.responder = _bash_then_text(read)
    definition = AgentDefinition(
        name="bounded",
        description="bounded",
        system_prompt="x",
        tools=["bash"],
        model="openai:test",
        source="test",
        max_processes=37,
    )
    orch = Orchestrator(
        settings=Settings(model="openai:test", approval="allow", max_workers=2, warm_spares=0),
        workdir=tmp_path,
        agents=[definition],
        load_agent_files=False,
        record=False,
    )
    async with orch:
        result = await asyncio.wait_for(orch.delegate("bounded", "go"), 60)
    assert result.status is RunStatus.COMPLETED, result
    if "no pids controller" in result.text:
        pytest.skip("this machine has no cgroup pids controller")
    assert "bound 37" in result.text, result.text


# -- the request deadline ----------------------------------------------------------------------


async def test_the_request_deadline_covers_every_retry(server: ModelServer) -> None:
    """Kills: the deadline restarted on each retry. Every answer is a retryable 503 that
    asks for 0.3 s; a 1 s deadline must end the request long before its 30 retries
    (however slow the machine: slower only ends it sooner)."""
    for _ in range(40):
        server.add(Reply(status=503, error_message="busy", headers={"retry-after-ms": "300"}))
    http = HttpOptions(base_url=server.openai_base_url, api_key="k", max_retries=30, deadline=1.0)
    model = OpenAIChatModel("m", http=http)
    try:
        with pytest.raises(ModelError) as info:
            async for _ in model.stream(ModelRequest(messages=[UserMessage(content="hi")])):
                pass
    finally:
        await model.aclose()
    assert info.value.kind is ModelErrorKind.TIMEOUT, info.value
    assert "1 s deadline" in str(info.value)
    assert len(server.requests) < 30


_ONE_STEP_CAP = """
import sys
from agentcell.worker.sandbox import _cgroup
cap = _cgroup.ProcessCap.create(37)
print("none" if cap is None else (cap.path / "pids.max").read_text().strip())
"""


def test_a_process_cap_made_in_one_step_holds_the_limit_exactly() -> None:
    """Kills: ``pids.max`` written at 4x on the path of a process that made no cgroup
    before its run (a remote sub-agent's): a real process caps itself."""
    if _cgroup.controller() is None:
        pytest.skip("this machine has no cgroup pids controller")
    child = subprocess.Popen(
        [sys.executable, "-c", _ONE_STEP_CAP], stdout=subprocess.PIPE, text=True
    )
    try:
        out, _ = child.communicate(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        _cgroup.release_process_cap(child.pid)
    assert out.strip() == "37"


def test_a_secret_of_exactly_the_shortest_length_is_masked_and_a_shorter_one_is_not() -> None:
    """The 8-character floor, both as a plain secret and as a digest a child is given."""
    from agentcell.worker import Redactor, secret_digests

    eight, seven = "k3y-8ch!", "k3y-7ch"
    plain = Redactor([eight, seven])
    assert plain(f"a {eight} b {seven}") == f"a [REDACTED] b {seven}"
    digested = Redactor([], secret_digests([eight, seven]))
    assert digested(f"a {eight} b {seven}") == f"a [REDACTED] b {seven}"


def test_a_digested_secret_is_found_right_after_a_false_start_of_its_head() -> None:
    """A child knows another key only by its first characters and a salted hash: a head
    that also matches one character earlier must not hide the secret behind it."""
    from agentcell.worker import Redactor, secret_digests

    secret = "aaa12345678"
    redact = Redactor([], secret_digests([secret]))
    assert redact("x aaaa12345678 y") == "x a[REDACTED] y"
    assert redact(f"{secret}{secret}") == "[REDACTED][REDACTED]"
