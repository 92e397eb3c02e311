"""web_fetch against a rebinding DNS name: the parent connects to the address it checked.

The attack: a name in the agent's network: list answers a public address to web_fetch's
check and a loopback one a moment later, to the connection. The parent (unsandboxed)
would then fetch from a service on the user's own loopback. Here, from a real sub-agent:
``rebind.test`` resolves to 127.0.0.2 for the check (standing in for a public address:
the test counts it as one) and to 127.0.0.1 for any later lookup, where a "local service"
listens on the same port. The page must come from the checked address."""

from __future__ import annotations

import http.server
import socket
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from agentcell.orchestrator.network import _egress
from agentcell.protocol import RunStatus
from conftest import SpawnRecorder
from model_servers import ModelServer, serving
from network_runs import run_calls, served

__all__ = ["served"]  # the fixture

PUBLIC, PRIVATE = "127.0.0.2", "127.0.0.1"


def _handler(body: bytes) -> type[http.server.BaseHTTPRequestHandler]:
    class Page(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    return Page


@pytest.fixture
def two_servers() -> Iterator[int]:
    """The "public" page on 127.0.0.2:P and a "local service" on 127.0.0.1:P; P."""
    public = http.server.ThreadingHTTPServer((PUBLIC, 0), _handler(b"the public page"))
    port = public.server_address[1]
    private = http.server.ThreadingHTTPServer(
        (PRIVATE, port), _handler(b"SECRET of a local service")
    )
    # a short poll interval: shutdown() waits for the loop's next poll (0.5 s by default)
    threads = [
        threading.Thread(target=s.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)
        for s in (public, private)
    ]
    for thread in threads:
        thread.start()
    try:
        yield port
    finally:
        for server in (public, private):
            server.shutdown()
            server.server_close()
        for thread in threads:
            thread.join()


@pytest.fixture
def rebinding_name(monkeypatch: pytest.MonkeyPatch) -> None:
    """``rebind.test``: public to the check, loopback to every lookup after it."""
    special = _egress._special

    async def check_resolver(host: str, port: int) -> list[str]:
        assert host == "rebind.test", host
        return [PUBLIC]

    real_getaddrinfo = socket.getaddrinfo

    def later_lookups(host: Any, *args: Any, **kwargs: Any) -> Any:
        if host in ("rebind.test", b"rebind.test"):
            return real_getaddrinfo(PRIVATE, *args, **kwargs)
        return real_getaddrinfo(host, *args, **kwargs)

    monkeypatch.setattr(_egress, "_system_resolver", check_resolver)
    monkeypatch.setattr(_egress, "_special", lambda a: a != PUBLIC and special(a))
    monkeypatch.setattr(socket, "getaddrinfo", later_lookups)


async def test_web_fetch_connects_to_the_address_it_checked_not_a_rebound_one(
    spawned: SpawnRecorder,
    tmp_path: Any,
    served: ModelServer,
    two_servers: int,
    rebinding_name: None,
) -> None:
    url = f"http://rebind.test:{two_servers}/page"
    calls = [("web_fetch", {"url": url})]
    network = [f"rebind.test:{two_servers}"]
    result = await run_calls(tmp_path, calls, served, tools=["WebFetch"], network=network)
    assert result.status is RunStatus.COMPLETED, result
    assert "the public page" in result.text, result.text
    assert "SECRET" not in result.text


@pytest.fixture
def tls_page(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[int]:
    """An HTTPS page on 127.0.0.1 with a test CA the parent trusts (SSL_CERT_FILE)."""
    import ssl

    import trustme

    ca = trustme.CA()
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(context)
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "ca.pem"))
    with serving(_handler(b"the page over TLS"), host=PRIVATE, tls=context) as port:
        yield port


async def test_web_fetch_over_https_verifies_the_certificate_through_the_pinned_connection(
    spawned: SpawnRecorder, tmp_path: Any, served: ModelServer, tls_page: int
) -> None:
    calls = [("web_fetch", {"url": f"https://127.0.0.1:{tls_page}/page"})]
    network = [f"127.0.0.1:{tls_page}"]
    result = await run_calls(tmp_path, calls, served, tools=["WebFetch"], network=network)
    assert result.status is RunStatus.COMPLETED, result
    assert "the page over TLS" in result.text, result.text
