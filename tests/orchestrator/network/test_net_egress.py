"""Network by name: a sub-agent's bash reaches the hosts of its ``network:`` list, nothing else.

Every run is a real sub-agent process behind the default ``workspace`` sandbox, driven by a
scripted model over a local model server; every server here listens on 127.0.0.1 only.
"""

from __future__ import annotations

import asyncio
import http.server
import json
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nobody_runtime
import pytest
from agentcell.orchestrator import AgentDefinition, Orchestrator, Settings
from agentcell.orchestrator.config._load import load_settings, user_config_path
from agentcell.orchestrator.config._trust import narrow_network, trust
from agentcell.orchestrator.network._egress import EgressProxy, Refused
from agentcell.protocol import RunStatus
from agentcell.worker import probe_sandbox
from conftest import SpawnRecorder
from listeners import recording_listener
from model_servers import ModelServer, Reply, serving
from network_runs import (
    PAGE,
    SEP,
    call_script,
    run_calls,
    served,
)

__all__ = ["served"]  # the fixture

CAPS = probe_sandbox()
pytestmark = pytest.mark.skipif(
    not CAPS["landlock_tcp"], reason="needs Landlock ABI 4 (TCP rules; this project's CI has 7)"
)


def run_bash(tmp_path: Path, commands: list[str], served: ModelServer, **fields: Any) -> Any:
    calls = [("bash", {"command": command, "timeout_s": 30}) for command in commands]
    return run_calls(tmp_path, calls, served, **fields)


HTML = (
    "<html><head><style>body{color:red}</style></head><body><h1>The Title</h1>"
    "<p>Some <b>bold</b> text.</p><script>stealCookies()</script></body></html>"
)


class _Page(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        port = self.server.server_address[1]
        if self.path.startswith("/redirect-to-"):  # /redirect-to-HOST:PORT
            self.send_response(302)
            self.send_header("Location", f"http://{self.path.removeprefix('/redirect-to-')}/doc")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if self.path == "/hop":  # to the same, allowed host
            self.send_response(302)
            self.send_header("Location", f"http://127.0.0.1:{port}/doc")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        kind = "text/html" if self.path == "/doc" else "text/plain"
        body = HTML.encode() if self.path == "/doc" else f"{PAGE} {self.path}".encode()
        if self.path == "/big":
            body = b"x" * (3 * 1024 * 1024)
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def page() -> Iterator[int]:
    """A web server on 127.0.0.1 (the "allowed host"); its port."""
    with serving(_Page) as port:
        yield port


@pytest.fixture
def other() -> Iterator[tuple[int, list[socket.socket]]]:
    """A listener on 127.0.0.1 NOT in the list; what it accepted."""
    with recording_listener() as found:
        yield found


_URLLIB = (
    "python3 -c 'import urllib.request,sys; "
    "print(urllib.request.urlopen(sys.argv[1], timeout=20).read().decode())' "
)
_FRONTED = """
import os, socket, ssl, sys, urllib.parse
proxy = urllib.parse.urlsplit(os.environ["HTTPS_PROXY"])
s = socket.create_connection((proxy.hostname, proxy.port), timeout=20)
s.sendall(f"CONNECT 127.0.0.1:{sys.argv[1]} HTTP/1.1\\r\\n\\r\\n".encode())
print(s.recv(100).split(b"\\r\\n")[0].decode())
context = ssl.create_default_context()
context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
try:
    context.wrap_socket(s, server_hostname="evil.test")
except (OSError, ssl.SSLError) as exc:
    print("HANDSHAKE-FAILED", type(exc).__name__)
"""
_DIRECT = (
    "python3 -c 'import socket,sys; "
    'socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=5); print("DIRECT")\' '
)


async def test_bash_reaches_the_hosts_of_its_list_and_nothing_else(
    spawned: SpawnRecorder,
    tmp_path: Path,
    served: ModelServer,
    page: int,
    other: tuple[int, list[socket.socket]],
) -> None:
    other_port, accepted = other
    commands = [
        # pip-like: urllib through HTTP_PROXY (an absolute-URL request)
        _URLLIB + f"http://127.0.0.1:{page}/simple/",
        # curl-like, tunnelled: CONNECT 127.0.0.1:PORT
        f"curl -sS --proxytunnel http://127.0.0.1:{page}/tunnel",
        # a host not in the list: the proxy's 403 names it and the setting
        f"curl -sS http://127.0.0.1:{other_port}/",
        _URLLIB + f"http://127.0.0.1:{other_port}/",
        # around the proxy: nothing to reach, whatever port
        f"curl -sS --noproxy '*' http://127.0.0.1:{page}/direct",
        _DIRECT + str(page),
        _DIRECT + str(served.port),
        # localhost names loopback (RFC 6761): its entry reaches that port, and no other
        f"curl -sS http://localhost:{page}/local",
        f"curl -sS http://localhost:{other_port}/",
        # a tunnel to an allowed host whose TLS names another (the SNI is checked)
        f"python3 -c '{_FRONTED}' {page}",
    ]
    network = [f"127.0.0.1:{page}", f"localhost:{page}", "*.example.com"]
    result = await run_bash(tmp_path, commands, served, network=network, record=True)
    assert result.status is RunStatus.COMPLETED, result
    assert "bash network: the parent's proxy only" in result.sandbox, result.sandbox
    if CAPS["network_namespace"] == "net":  # as root: bash in a namespace of its own
        assert "(a relay in its own network namespace)" in result.sandbox, result.sandbox
    if CAPS["mount_namespace"]:  # the namespace thread came after the mount namespace
        assert "protected paths read-only" in result.sandbox, result.sandbox
    out = result.text.split(SEP)
    assert len(out) == len(commands), result.text
    assert f"{PAGE} /simple/" in out[0], out[0]
    assert f"{PAGE} /tunnel" in out[1], out[1]
    for refused in out[2], out[3]:
        assert f"refused 127.0.0.1:{other_port} for agent fetcher" in refused, refused
        assert "network: list" in refused, refused
    assert not accepted  # the other server never saw a connection
    assert PAGE not in out[4] and "[exit code" in out[4], out[4]
    for direct in out[5], out[6]:
        assert "DIRECT" not in direct and "Error" in direct, direct
    assert f"{PAGE} /local" in out[7], out[7]
    assert f"refused localhost:{other_port} for agent fetcher" in out[8], out[8]
    assert "HANDSHAKE-FAILED" in out[9], out[9]
    log = result.network_log
    assert f"refused 127.0.0.1:{page}: its TLS server name 'evil.test' is another host" in log
    assert f"reached 127.0.0.1:{page}" in log, log
    assert any(line.startswith(f"refused 127.0.0.1:{other_port}:") for line in log), log
    assert f"reached localhost:{page}" in log, log
    # The run record keeps the log, and `agentcell runs show` prints it.
    from agentcell.orchestrator.cli._main import cli
    from click.testing import CliRunner

    [summary] = (tmp_path / ".agentcell" / "runs").glob("*/summary.json")
    assert f"reached 127.0.0.1:{page}" in summary.read_text()
    run_id = summary.parent.name
    shown = CliRunner().invoke(cli, ["runs", "show", run_id, "--workdir", str(tmp_path)])
    assert shown.exit_code == 0, shown.output
    assert f"network: refused 127.0.0.1:{other_port}" in shown.output, shown.output


async def test_a_localhost_entry_reaches_loopback_at_its_port_by_any_of_its_names() -> None:
    """``localhost:8080`` names loopback at that port (issue 44, item 6): ``curl
    127.0.0.1:8080`` for a server the user knows as localhost:8080 was refused."""
    proxy = EgressProxy(["localhost:8080"], agent_id="a1", agent_type="fetcher")
    assert await proxy.check("localhost", 8080) == "127.0.0.1"
    assert await proxy.check("127.0.0.1", 8080) == "127.0.0.1"
    assert await proxy.check("[::1]", 8080) == "::1"
    elsewhere = [("127.0.0.1", 8081), ("localhost", 80), ("127.0.0.2", 8080), ("0.0.0.0", 8080)]
    elsewhere += [("localhost.evil.test", 8080), ("10.0.0.1", 8080)]
    for host, port in elsewhere:
        with pytest.raises(Refused):
            await proxy.check(host, port)


def test_localhost_reaches_its_port_alone_from_a_sub_agent_of_user_nobody(
    tmp_path: Path, page: int, other: tuple[int, list[socket.socket]]
) -> None:
    """The test above runs as this process's user (root in CI); here the same wall is
    built by a normal user, without a privilege (its namespaces are a user namespace's)."""
    if (why := nobody_runtime.unavailable()) is not None:
        pytest.skip(why)
    other_port, accepted = other
    runtime = nobody_runtime.runtime()
    home = runtime.home()
    script = str(runtime.folder / "tests" / "localhost_driver.py")
    done = subprocess.run(
        runtime.command(script, str(home), str(page), str(other_port)),
        env={**runtime.env, "HOME": str(home)}, cwd="/", capture_output=True, text=True,
        timeout=180,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    report = json.loads(done.stdout)
    assert report["uid"] == nobody_runtime.NOBODY and report["status"] == "completed", report
    assert "bash network: the parent's proxy only" in report["sandbox"], report
    fetched, refused = report["out"]
    assert f"{PAGE} /local" in fetched, fetched
    assert f"refused localhost:{other_port} for agent fetcher" in refused, refused
    assert not accepted
    assert f"reached localhost:{page}" in report["log"], report["log"]


async def test_a_refusal_under_the_default_sandbox_points_at_network(
    spawned: SpawnRecorder, tmp_path: Path, served: ModelServer, page: int
) -> None:
    result = await run_bash(tmp_path, [_URLLIB + f"http://127.0.0.1:{page}/"], served)
    assert result.status is RunStatus.COMPLETED, result
    assert PAGE not in result.text
    assert "no network" in result.text and "network: [" in result.text, result.text


async def test_a_bad_entry_refuses_the_run_in_one_line(
    spawned: SpawnRecorder, tmp_path: Path, served: ModelServer
) -> None:
    result = await run_bash(tmp_path, ["true"], served, network=["https://pypi.org/simple"])
    assert result.status is RunStatus.DENIED, result
    assert "network: entry 'https://pypi.org/simple'" in result.error


def test_an_untrusted_list_only_narrows_the_users_own(tmp_path: Path) -> None:
    assert narrow_network(["pypi.org", "evil.test"], ["PyPI.org"]) == (["pypi.org"], ["evil.test"])
    assert narrow_network(["pypi.org"], True) == (["pypi.org"], [])
    assert narrow_network(["pypi.org"], False) == ([], ["pypi.org"])
    home, project = tmp_path / "home", tmp_path / "cloned-repo"
    (home / ".config" / "agentcell").mkdir(parents=True)
    project.mkdir()
    env = {"HOME": str(home)}
    user_config_path(home, env).write_text('network = ["pypi.org", "github.com:443"]\n')
    (project / "agentcell.toml").write_text(
        'network = ["pypi.org", "evil.test"]\nwebfetch_allow = ["evil.test"]\n'
    )
    notices: list[str] = []
    settings, _ = load_settings(workdir=project, home=home, env=env, notices=notices)
    assert settings.network == ["pypi.org"] and settings.webfetch_allow == []
    assert any("network evil.test ignored" in n for n in notices), notices
    # A project agent file's list: narrowed to the user's (merged) setting, until trusted.
    agents = project / ".agentcell" / "agents"
    agents.mkdir(parents=True)
    (agents / "netty.md").write_text(
        "---\nname: netty\ndescription: d\nnetwork: [pypi.org, evil.test]\n---\nHi.\n"
    )
    untrusted = Orchestrator(settings=settings, workdir=project, home=home)
    netty = untrusted.registry.get("netty")
    assert netty is not None and netty.network == ["pypi.org"]
    trust(project, user_config_path(home, env))
    trusted = Orchestrator(settings=settings, workdir=project, home=home)
    netty = trusted.registry.get("netty")
    assert netty is not None and netty.network == ["pypi.org", "evil.test"]


def test_agentcell_sandbox_shows_how_a_list_is_kept_here() -> None:
    from agentcell.orchestrator.cli._main import cli
    from click.testing import CliRunner

    shown = CliRunner().invoke(cli, ["sandbox"])
    assert shown.exit_code == 0, shown.output
    line = next(line for line in shown.output.splitlines() if "network: lists:" in line)
    if CAPS["network_namespace"] == "net":
        assert "relay on the loopback of bash's own network namespace" in line, line
    assert "bash commands under a network: list: only the hosts it names" in shown.output


async def test_web_fetch_is_done_by_the_parent_and_checks_every_hop(
    spawned: SpawnRecorder,
    tmp_path: Path,
    served: ModelServer,
    page: int,
    other: tuple[int, list[socket.socket]],
) -> None:
    other_port, accepted = other
    base = f"http://127.0.0.1:{page}"
    urls = [
        f"{base}/doc",  # HTML, as markdown
        f"{base}/hop",  # a redirect to the same allowed host: followed
        f"{base}/redirect-to-127.0.0.1:{other_port}",  # to a host not in the list
        f"{base}/redirect-to-localhost:{page}",  # in the list: loopback by definition
        f"{base}/big",  # over the size cap
    ]
    calls = [("web_fetch", {"url": url, "prompt": "the title"}) for url in urls]
    network = [f"127.0.0.1:{page}", f"localhost:{page}"]
    # bash is not among its tools: the sub-agent itself never opens a socket to the page.
    result = await run_calls(tmp_path, calls, served, tools=["WebFetch"], network=network)
    assert result.status is RunStatus.COMPLETED, result
    out = result.text.split(SEP)
    assert len(out) == len(urls), result.text
    for fetched in out[0], out[1]:
        assert "# The Title" in fetched and "**bold**" in fetched, fetched
        assert "stealCookies" not in fetched and "<p>" not in fetched, fetched
    assert "/doc (200)" in out[1]
    assert f"redirects to http://127.0.0.1:{other_port}/doc" in out[2], out[2]
    assert "not followed" in out[2] and not accepted
    assert f"http://localhost:{page}/doc (200)" in out[3] and "# The Title" in out[3], out[3]
    assert "larger than 2048 KiB" in out[4], out[4]


async def test_web_fetch_of_a_host_outside_the_list_asks(
    spawned: SpawnRecorder, tmp_path: Path, served: ModelServer, page: int
) -> None:
    calls = [("web_fetch", {"url": f"http://127.0.0.1:{page}/doc"})]
    result = await run_calls(tmp_path, calls, served, tools=["WebFetch"], approval="deny")
    assert result.status is RunStatus.COMPLETED, result
    assert "did not allow it" in result.text and "The Title" not in result.text, result.text


async def test_todo_write_keeps_the_agents_list_in_its_record(
    spawned: SpawnRecorder, tmp_path: Path, served: ModelServer
) -> None:
    todos = [
        {"content": "Read the code", "status": "completed", "activeForm": "Reading the code"},
        {"content": "Fix the bug", "status": "in_progress", "activeForm": "Fixing the bug"},
        {"content": "Run the tests", "status": "pending", "activeForm": "Running the tests"},
    ]
    calls = [("todo_write", {"todos": todos})]
    result = await run_calls(
        tmp_path, calls, served, tools=["Read", "TodoWrite", "WebSearch"], record=True
    )
    assert result.status is RunStatus.COMPLETED, result
    assert "(1/3 done)" in result.text and "[>] Fix the bug" in result.text, result.text
    assert any("web_search is not offered" in line for line in result.warnings), result.warnings
    records = [p for p in (tmp_path / ".agentcell").rglob("*") if p.is_file()]
    recorded = "".join(p.read_text(errors="replace") for p in records)
    assert "todo_write" in recorded and "Fix the bug" in recorded


_HOOK = """\
import json, sys
doc = json.load(sys.stdin)
with open(sys.argv[1], "a") as log:
    log.write(json.dumps(doc) + "\\n")
if doc["tool_name"] == "WebFetch" and "blocked" in doc["tool_input"]["url"]:
    print("Blocked: no fetching that", file=sys.stderr)
    sys.exit(2)
"""


async def test_hooks_see_web_fetch_and_todo_write_under_claude_codes_names(
    spawned: SpawnRecorder, tmp_path: Path, served: ModelServer, page: int
) -> None:
    hook, log = tmp_path / "hook.py", tmp_path / "hook.log"
    hook.write_text(_HOOK)
    command = f"python3 {hook} {log}"
    hooks = {"PreToolUse": [{"matcher": "WebFetch|TodoWrite", "hooks": [{"command": command}]}]}
    todo = {"content": "Fetch", "status": "in_progress", "activeForm": "Fetching"}
    calls = [
        ("web_fetch", {"url": f"http://127.0.0.1:{page}/blocked"}),
        ("todo_write", {"todos": [todo]}),
    ]
    served.responder = call_script(calls)
    definition = AgentDefinition(
        name="fetcher",
        description="fetcher",
        tools=["WebFetch", "TodoWrite"],
        model="openai:test",
        network=[f"127.0.0.1:{page}"],
    )
    settings = Settings(model="openai:test", approval="allow", warm_spares=0, hooks=hooks)
    orch = Orchestrator(
        settings=settings, workdir=tmp_path, agents=[definition], load_agent_files=False
    )
    async with orch:
        result = await asyncio.wait_for(orch.delegate("fetcher", "go"), 90)
    assert result.status is RunStatus.COMPLETED, result
    fetched, listed = result.text.split(SEP)
    assert "Blocked: no fetching that" in fetched and PAGE not in fetched, fetched
    assert "[>] Fetch" in listed
    docs = [json.loads(line) for line in log.read_text().splitlines()]
    assert [d["tool_name"] for d in docs] == ["WebFetch", "TodoWrite"]
    assert docs[0]["tool_input"] == {"url": f"http://127.0.0.1:{page}/blocked"}
    assert docs[1]["tool_input"]["todos"][0]["activeForm"] == "Fetching"


def _sse(*events: dict[str, Any]) -> bytes:
    return b"".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in events)


_SEARCHED = _sse(
    {
        "type": "message_start",
        "message": {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "claude-t",
            "content": [],
            "usage": {"input_tokens": 10, "output_tokens": 1},
        },
    },
    {
        "type": "content_block_start",
        "index": 0,
        "content_block": {
            "type": "server_tool_use",
            "id": "srvtoolu_1",
            "name": "web_search",
            "input": {},
        },
    },
    {
        "type": "content_block_delta",
        "index": 0,
        "delta": {"type": "input_json_delta", "partial_json": '{"query": "agentcell"}'},
    },
    {"type": "content_block_stop", "index": 0},
    {
        "type": "content_block_start",
        "index": 1,
        "content_block": {
            "type": "web_search_tool_result",
            "tool_use_id": "srvtoolu_1",
            "content": [
                {
                    "type": "web_search_result",
                    "url": "https://docs.example.com/a",
                    "title": "Doc A",
                    "encrypted_content": "xx",
                }
            ],
        },
    },
    {"type": "content_block_stop", "index": 1},
    {"type": "content_block_start", "index": 2, "content_block": {"type": "text", "text": ""}},
    {
        "type": "content_block_delta",
        "index": 2,
        "delta": {
            "type": "citations_delta",
            "citation": {
                "type": "web_search_result_location",
                "url": "https://docs.example.com/a",
                "title": "Doc A",
                "encrypted_index": "e",
                "cited_text": "runs sub-agents",
            },
        },
    },
    {
        "type": "content_block_delta",
        "index": 2,
        "delta": {
            "type": "text_delta",
            "text": "agentcell runs each sub-agent in its own process.",
        },
    },
    {"type": "content_block_stop", "index": 2},
    {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 9}},
    {"type": "message_stop"},
)


async def test_web_search_is_anthropics_server_tool_and_its_sources_come_through(
    spawned: SpawnRecorder,
    tmp_path: Path,
    model_server: ModelServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ANTHROPIC_BASE_URL", model_server.anthropic_base_url)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-net-test-key")
    model_server.responder = lambda body, api: Reply(raw=_SEARCHED)
    definition = AgentDefinition(
        name="searcher", description="d", tools=["WebSearch"], model="anthropic:claude-t"
    )
    settings = Settings(model="anthropic:claude-t", approval="allow", warm_spares=0)
    orch = Orchestrator(
        settings=settings,
        workdir=tmp_path,
        agents=[definition],
        load_agent_files=False,
        record=False,
    )
    async with orch:
        result = await asyncio.wait_for(orch.delegate("searcher", "what is agentcell?"), 90)
    assert result.status is RunStatus.COMPLETED, result
    [request] = model_server.requests
    assert {"type": "web_search_20250305", "name": "web_search", "max_uses": 5} in (
        request.body.get("tools") or []
    ), request.body
    assert "its own process" in result.text
    assert "Sources:\n- Doc A: https://docs.example.com/a" in result.text, result.text
    assert not result.warnings


async def test_web_fetch_runs_its_prompt_over_the_page_with_the_configured_small_model(
    spawned: SpawnRecorder, tmp_path: Path, served: ModelServer, page: int
) -> None:
    calls = [("web_fetch", {"url": f"http://127.0.0.1:{page}/doc", "prompt": "Which title?"})]
    script = call_script(calls)
    asked: list[str] = []

    def respond(body: dict[str, Any], api: str) -> Reply:
        if body["model"] != "small":
            return script(body, api)
        asked.append(body["messages"][-1]["content"])
        return Reply(text="SMALL-MODEL-ANSWER: the title is The Title")

    done = run_calls(
        tmp_path,
        calls,
        served,
        tools=["WebFetch"],
        network=[f"127.0.0.1:{page}"],
        settings_extra={"webfetch_model": "openai:small"},
    )
    served.responder = respond  # after run_calls set its own: the coroutine has not run yet
    result = await done
    assert result.status is RunStatus.COMPLETED, result
    assert "SMALL-MODEL-ANSWER" in result.text and "**bold**" not in result.text, result.text
    [question] = asked
    assert "# The Title" in question and question.endswith("Which title?")
