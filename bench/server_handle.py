"""Start the load server as a separate process and read its records.

with LoadServer(latency_ms=100) as server:
    os.environ["OPENAI_BASE_URL"] = server.base_url
    ...
    log = server.run_log(run_id)
"""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

_ROOT = Path(__file__).resolve().parent.parent


class LoadServer:
    """``tls=True``: HTTPS as well, on ``tls_port``, with a certificate from a test CA
    made here (trustme); ``ca_file`` is that CA, for every client's SSL_CERT_FILE."""

    def __init__(self, *, latency_ms: float = 100.0, tps: float = 0.0, tls: bool = False) -> None:
        self.latency_ms = latency_ms
        self.tps = tps
        self.tls = tls
        self.port = 0
        self.tls_port = 0
        self.ca_file = ""
        self._certs: tempfile.TemporaryDirectory[str] | None = None
        self._process: subprocess.Popen[str] | None = None

    @property
    def tls_base_url(self) -> str:
        return f"https://127.0.0.1:{self.tls_port}/v1"

    def _tls_args(self) -> list[str]:
        import trustme

        self._certs = tempfile.TemporaryDirectory(prefix="bench-tls-")
        folder = Path(self._certs.name)
        ca = trustme.CA()
        cert = ca.issue_cert("127.0.0.1", "localhost")
        self.ca_file = str(folder / "ca.pem")
        ca.cert_pem.write_to_path(self.ca_file)
        cert.private_key_pem.write_to_path(str(folder / "key.pem"))
        cert.private_key_and_cert_chain_pem.write_to_path(str(folder / "cert.pem"))
        return ["--tls-cert", str(folder / "cert.pem"), "--tls-key", str(folder / "key.pem")]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def pid(self) -> int:
        assert self._process is not None
        return self._process.pid

    def start(self) -> LoadServer:
        env = dict(os.environ, PYTHONPATH=str(_ROOT))
        self._process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "bench.load_server",
                "--latency-ms",
                str(self.latency_ms),
                "--tps",
                str(self.tps),
                *(self._tls_args() if self.tls else []),
            ],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
            cwd=_ROOT,
        )
        assert self._process.stdout is not None
        line = self._process.stdout.readline()
        if not line.startswith("READY "):
            self.stop()
            raise RuntimeError(f"the load server did not start (it said {line!r})")
        ports = line.split()[1:]
        self.port = int(ports[0])
        self.tls_port = int(ports[1]) if len(ports) > 1 else 0
        return self

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if process.stdout is not None:
            process.stdout.close()
        if self._certs is not None:
            self._certs.cleanup()
            self._certs = None

    def __enter__(self) -> LoadServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- records -----------------------------------------------------------------------
    def get(self, path: str) -> Any:
        return get_json(self.port, path)

    def stats(self) -> dict[str, Any]:
        return dict(self.get("/bench/stats"))

    def run_log(self, run_id: str) -> dict[str, Any]:
        return dict(self.get(f"/bench/run/{run_id}"))


def get_json(port: int, path: str) -> Any:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        return json.loads(response.read())
    finally:
        conn.close()


async def wait_for_jobs(port: int, run_id: str, count: int) -> dict[str, Any]:
    """Return once ``count`` sub-agents of the run have sent a request (30 s at most).

    Raw asyncio streams, so that the system under test's HTTP client pools are untouched.
    """
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(
            f"GET /bench/wait/{run_id}/{count} HTTP/1.1\r\nhost: 127.0.0.1\r\n"
            "connection: close\r\n\r\n".encode()
        )
        await writer.drain()
        raw = await reader.read()
    finally:
        writer.close()
    return dict(json.loads(raw.partition(b"\r\n\r\n")[2]))
