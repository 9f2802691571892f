"""lockgate over TLS: a private redis-server that listens with TLS only (``--port 0``) and
requires client certificates, reached through ``rediss://`` URLs.

The module makes its own CA, a server certificate for 127.0.0.1 and localhost, and a
client certificate with ``openssl``; the server and the certificates are deleted at the
end. Nothing here touches the shared server on 6379.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest
import redis
from cli_runs import cli_app_in, invoke, one_error_line

from clusters import Node, ServerSet, wait_for
from faults.support import free_port, redis_server_binary
from lockgate import App, ConnectionFailed, Worker, WorkerConfig
from lockgate.ops.inspect import queue_stats

SPEC = "cli_app:app"
RUN_TIMEOUT = 60  # loose: a bound against hangs


@dataclass(frozen=True)
class Certificates:
    """A CA's certificate, and the server's and a client's certificate and key it signed."""

    ca: Path
    server: Path
    server_key: Path
    client: Path
    client_key: Path


def openssl(directory: Path, *args: str) -> None:
    subprocess.run(["openssl", *args], cwd=directory, check=True, capture_output=True, timeout=60)


def make_certificates(directory: Path) -> Certificates:
    """A CA, a server certificate for IP:127.0.0.1 and DNS:localhost, a client one."""
    directory.mkdir(parents=True, exist_ok=True)
    key = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    openssl(directory, "req", "-x509", *key, "-keyout", "ca.key", "-out", "ca.crt",
            "-days", "2", "-subj", "/CN=lockgate test CA")  # fmt: skip
    (directory / "server.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    for name, serial, extensions in (("server", "1", "server.ext"), ("client", "2", None)):
        openssl(directory, "req", *key, "-keyout", f"{name}.key", "-out", f"{name}.csr",
                "-subj", f"/CN=lockgate test {name}")  # fmt: skip
        openssl(directory, "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt",
                "-CAkey", "ca.key", "-set_serial", serial, "-days", "2", "-out", f"{name}.crt",
                *(("-extfile", extensions) if extensions else ()))  # fmt: skip
    return Certificates(
        ca=directory / "ca.crt",
        server=directory / "server.crt",
        server_key=directory / "server.key",
        client=directory / "client.crt",
        client_key=directory / "client.key",
    )


@dataclass
class TlsServer(ServerSet):
    """One private redis-server with TLS only, requiring a client certificate."""

    certificates: Certificates
    root: Path
    nodes: list[Node] = field(default_factory=list)

    def processes(self) -> list[Node]:
        return list(self.nodes)

    @property
    def port(self) -> int:
        return self.nodes[0].port

    def start(self) -> TlsServer:
        certs = self.certificates
        node = Node(free_port(), self.root / "redis")
        self.nodes.append(node)
        # Node.start's own --port comes first; this later one wins: no plain listener.
        node.start(
            redis_server_binary(), "--port", "0", "--tls-port", str(node.port),
            "--tls-cert-file", str(certs.server), "--tls-key-file", str(certs.server_key),
            "--tls-ca-cert-file", str(certs.ca), "--tls-auth-clients", "yes",
        )  # fmt: skip
        wait_for(self._answers, "an answer from the TLS server")
        return self

    def _answers(self) -> bool:
        node = self.nodes[0]
        if not node.alive:  # not an error wait_for waits through: the port was taken
            log = (node.directory / "redis.log").read_text(errors="replace")
            raise RuntimeError(f"redis-server exited:\n{log[-2000:]}")
        client = self.client()
        try:
            return bool(client.ping())
        finally:
            client.close()

    def url(self, *, client_certificate: bool = True, **options: str) -> str:
        """A ``rediss://`` URL of the server, with the client's certificate or without,
        and any more query ``options``."""
        certs = self.certificates
        query = {"ssl_ca_certs": str(certs.ca)}
        if client_certificate:
            query |= {"ssl_certfile": str(certs.client), "ssl_keyfile": str(certs.client_key)}
        query |= options
        return f"rediss://127.0.0.1:{self.port}/0?{urlencode(query)}"

    def client(self) -> redis.Redis:
        """A plain redis-py client with the client certificate (for inspection)."""
        certs = self.certificates
        return redis.Redis(
            port=self.port, ssl=True, ssl_ca_certs=str(certs.ca),
            ssl_certfile=str(certs.client), ssl_keyfile=str(certs.client_key),
            socket_timeout=5, socket_connect_timeout=2,
        )  # fmt: skip


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsServer]:
    root = tmp_path_factory.mktemp("tls")
    with TlsServer(make_certificates(root / "certs"), root) as server:
        yield server


@pytest.fixture
def fresh_namespace(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A fresh namespace, which ``cli_app`` (imported afresh by the CLI) takes too."""
    with cli_app_in(uuid.uuid4().hex, monkeypatch) as namespace:
        yield namespace


def waiting(stats: dict[str, Any]) -> int:
    return sum(int(row["waiting"]) for row in stats["levels"])


async def test_jobs_run_exactly_once_over_tls(tls_server: TlsServer, fresh_namespace: str) -> None:
    app = App(redis_url=tls_server.url(), namespace=fresh_namespace)
    ran: list[int] = []

    @app.task
    async def record(n: int) -> None:
        ran.append(n)

    try:
        assert all([(await record.enqueue_async(n)).created for n in range(10)])
        messages = [record.message(n) for n in range(10, 20)]
        assert all(result.created for result in await app.enqueue_many_async(messages))
        assert sum(row.waiting for row in (await queue_stats(app)).levels) == 20
        worker = Worker(app, WorkerConfig(concurrency=4, idle_wait=1.0))
        await asyncio.wait_for(worker.run(burst=True), RUN_TIMEOUT)
        assert Counter(ran) == dict.fromkeys(range(20), 1)
        stats = await queue_stats(app)
        assert all(row.waiting == row.pending == row.delayed == 0 for row in stats.levels)
    finally:
        await app.aclose()
        app.close()


async def test_stats_cli_over_tls(tls_server: TlsServer, fresh_namespace: str) -> None:
    app = App(redis_url=tls_server.url(), namespace=fresh_namespace)
    later = app.task(name="later")(lambda n: None)  # a task of cli_app's
    try:
        for n in range(3):
            await later.enqueue_async(n)
    finally:
        await app.aclose()
        app.close()

    result = await asyncio.to_thread(invoke, "stats", SPEC, "--url", tls_server.url(), "--json")
    assert result.exit_code == 0, result.output
    stats = json.loads(result.stdout)
    # Only the TLS server holds these jobs: the count proves the CLI went there.
    assert (stats["namespace"], waiting(stats)) == (fresh_namespace, 3)


def test_sync_enqueue_and_dlq_list_over_tls(tls_server: TlsServer, fresh_namespace: str) -> None:
    # Whether a URL names a cluster node is asked once per URL and process, by whichever
    # client comes first: a URL of its own makes the sync client ask, as in a producer
    # process that never runs async code.
    url = tls_server.url(client_name=f"sync-{fresh_namespace}")
    app = App(redis_url=url, namespace=fresh_namespace)
    later = app.task(name="later")(lambda n: None)
    try:
        assert later.enqueue(1).created
    finally:
        app.close()
    client = tls_server.client()
    try:
        assert client.xlen(app.keys.stream("default", "normal")) == 1
    finally:
        client.close()
    listed = invoke("dlq", "--url", url, SPEC, "list", "--json")
    assert listed.exit_code == 0, listed.output
    assert json.loads(listed.stdout) == []


async def test_a_worker_without_the_client_certificate_fails_with_connection_failed(
    tls_server: TlsServer, fresh_namespace: str
) -> None:
    url = tls_server.url(client_certificate=False)
    app = App(redis_url=url, namespace=fresh_namespace)
    app.task(name="later")(lambda n: None)
    try:
        with pytest.raises(ConnectionFailed) as info:
            await asyncio.wait_for(Worker(app, WorkerConfig()).run(burst=True), RUN_TIMEOUT)
    finally:
        await app.aclose()
        app.close()
    assert info.value.url == url
    assert "\n" not in str(info.value)


def test_stats_cli_without_the_client_certificate_is_one_line_and_exit_2(
    tls_server: TlsServer, fresh_namespace: str
) -> None:
    url = tls_server.url(client_certificate=False)
    result = invoke("stats", SPEC, "--url", url)
    assert result.exit_code == 2, result.output
    line = one_error_line(result)
    assert line.startswith(
        f"error: cannot connect to Redis at rediss://127.0.0.1:{tls_server.port}"
    )
