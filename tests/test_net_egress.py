"""Network by name: a sub-agent's bash reaches the hosts of its ``network:`` list, nothing else.

Every run is a real sub-agent process behind the default ``workspace`` sandbox, driven by a
scripted model over a local model server; every server here listens on 127.0.0.1 only.
"""

from __future__ import annotations

import asyncio
import http.server
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from agentcell.orchestrator import AgentDefinition, Orchestrator, Settings
from agentcell.orchestrator.config import narrow_network
from agentcell.protocol import RunStatus
from agentcell.worker import probe_sandbox
from conftest import SpawnRecorder
from model_servers import Call, ModelServer, Reply

CAPS = probe_sandbox()
pytestmark = pytest.mark.skipif(
    not CAPS["landlock_tcp"], reason="needs Landlock ABI 4 (TCP rules; this project's CI has 7)"
)
SEP = "\n=====\n"
PAGE = "HELLO-FROM-THE-ALLOWED-HOST"


def bash_script(commands: list[str]) -> Any:
    def respond(body: dict[str, Any], api: str) -> Reply:
        outputs = [m["content"] for m in body["messages"] if m["role"] == "tool"]
        if len(outputs) < len(commands):
            command = commands[len(outputs)]
            return Reply(tool_calls=[Call("bash", {"command": command, "timeout_s": 30})])
        return Reply(text=SEP.join(outputs))

    return respond


def run_bash(tmp_path: Path, commands: list[str], served: ModelServer, **fields: Any) -> Any:
    served.responder = bash_script(commands)
    definition = AgentDefinition(
        name="fetcher", description="fetcher", tools=["bash"], model="openai:test", **fields
    )
    settings = Settings(model="openai:test", approval="allow", max_workers=1, warm_spares=0)
    orch = Orchestrator(
        settings=settings,
        workdir=tmp_path,
        agents=[definition],
        load_agent_files=False,
        record=False,
    )

    async def go() -> Any:
        async with orch:
            return await asyncio.wait_for(orch.delegate("fetcher", "go"), 90)

    return go()


@pytest.fixture
def served(model_server: ModelServer, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModelServer]:
    monkeypatch.setenv("OPENAI_BASE_URL", model_server.openai_base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-net-test-key")
    yield model_server


class _Page(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = f"{PAGE} {self.path}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def page() -> Iterator[int]:
    """A web server on 127.0.0.1 (the "allowed host"); its port."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Page)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@pytest.fixture
def other() -> Iterator[tuple[int, list[socket.socket]]]:
    """A listener on 127.0.0.1 NOT in the list; what it accepted."""
    server = socket.create_server(("127.0.0.1", 0))
    server.setblocking(False)
    accepted: list[socket.socket] = []
    try:
        yield server.getsockname()[1], accepted
    finally:
        while True:
            try:
                accepted.append(server.accept()[0])
            except BlockingIOError:
                break
        for conn in accepted:
            conn.close()
        server.close()


_URLLIB = (
    "python3 -c 'import urllib.request,sys; "
    "print(urllib.request.urlopen(sys.argv[1], timeout=20).read().decode())' "
)
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
        # a name in the list that resolves to a loopback address
        f"curl -sS http://localhost:{page}/private",
    ]
    network = [f"127.0.0.1:{page}", f"localhost:{page}", "*.example.com"]
    result = await run_bash(tmp_path, commands, served, network=network)
    assert result.status is RunStatus.COMPLETED, result
    assert "bash network: the parent's proxy only" in result.sandbox, result.sandbox
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
    assert PAGE not in out[7] and "private or loopback address 127.0.0.1" in out[7], out[7]
    log = result.network_log
    assert f"reached 127.0.0.1:{page}" in log, log
    assert any(line.startswith(f"refused 127.0.0.1:{other_port}:") for line in log), log
    assert any(line.startswith(f"refused localhost:{page}:") for line in log), log


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


def test_an_untrusted_list_only_narrows_the_users_own() -> None:
    assert narrow_network(["pypi.org", "evil.test"], ["PyPI.org"]) == (["pypi.org"], ["evil.test"])
    assert narrow_network(["pypi.org"], True) == (["pypi.org"], [])
    assert narrow_network(["pypi.org"], False) == ([], ["pypi.org"])
