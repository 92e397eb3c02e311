"""A walled bash command that tries the network gets a line naming the sandbox and
``network:`` after its own error (``_egress_relay.network_hint``), whatever tool failed:
the outputs below are the literal ones of a walled sub-agent's bash on this machine."""

from __future__ import annotations

import pytest
from agentcell.worker.sandbox._egress_relay import network_hint

PYTHON_SOCKET = """\
Traceback (most recent call last):
  File "<string>", line 1, in <module>
  File "/usr/lib/python3.11/socket.py", line 836, in create_connection
    sock.connect(sa)
PermissionError: [Errno 13] Permission denied"""
CURL = "curl: (7) Failed to connect to 127.0.0.1 port 9 after 0 ms: Couldn't connect to server"
URLLIB = "urllib.error.URLError: <urlopen error [Errno 13] Permission denied>"
PIP = "ERROR: No matching distribution found for requests"
NOT_NETWORK = "bash: line 1: .git/config: Permission denied"


@pytest.mark.parametrize("output", [PYTHON_SOCKET, CURL, URLLIB, PIP])
def test_a_refused_connection_is_said_to_be_the_sandboxs(output: str) -> None:
    walled = network_hint(output, walled=True, proxied=False)
    assert walled is not None and "has no network" in walled and "network: [" in walled
    proxied = network_hint(output, walled=False, proxied=True)
    assert proxied is not None and "`network:` list" in proxied
    assert network_hint(output, walled=False, proxied=False) is None  # network: true


def test_a_file_permission_error_is_not_blamed_on_the_network() -> None:
    assert network_hint(NOT_NETWORK, walled=True, proxied=False) is None
