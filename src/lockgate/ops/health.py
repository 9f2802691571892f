"""The HTTP endpoint of a worker command: ``/metrics``, ``/healthz`` and ``/readyz``.

Served by a thread of its own (stdlib ``ThreadingHTTPServer``) with prometheus_client's
own handler on ``/metrics`` (content negotiation, gzip, ``name[]`` filters), so it needs
the ``metrics`` extra. What it serves is put together in :mod:`lockgate.ops.metrics`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from http.server import ThreadingHTTPServer
from urllib.parse import urlparse

from lockgate.core.logs import get_logger
from lockgate.errors import ConfigError, MissingExtra

try:
    from prometheus_client.exposition import MetricsHandler
    from prometheus_client.registry import Collector
except ImportError as e:  # a core install: prometheus_client comes with the metrics extra
    raise MissingExtra("lockgate.ops.health", "metrics", "prometheus_client") from e

log = get_logger(__name__)

BIND_ALL = "0.0.0.0"  # as prometheus_client's start_http_server: scraped from outside


class _Handler(MetricsHandler):
    """prometheus_client's handler on ``/metrics``, and the two probes."""

    readiness: Callable[[], bool]

    def do_GET(self) -> None:
        path = urlparse(self.path).path
        if path == "/metrics":
            super().do_GET()
        elif path == "/healthz":
            self._reply(200, b"ok\n")
        elif path == "/readyz":
            try:
                ready = type(self).readiness()
            except Exception:
                log.exception("metrics: the readiness check failed")
                ready = False
            if ready:
                self._reply(200, b"ready\n")
            else:
                self._reply(503, b"not ready\n")
        else:
            self._reply(404, b"not found: try /metrics, /healthz or /readyz\n")

    def _reply(self, code: int, body: bytes) -> None:
        self.send_response(code)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class MetricsServer:
    """``/metrics``, ``/healthz`` and ``/readyz`` over HTTP, served by a thread of its own.

    The port is bound here, so a port in use fails before the worker connects.

    Args:
        registry: what ``/metrics`` serves.
        ready: what ``/readyz`` asks (from a server thread).
        port: the TCP port; 0 picks a free one (see :attr:`port`).
        host: the address to listen on (all IPv4 interfaces by default).

    Raises:
        ConfigError: the port cannot be bound (in use, or not allowed).
    """

    def __init__(
        self,
        registry: Collector,
        ready: Callable[[], bool],
        port: int,
        host: str = BIND_ALL,
    ) -> None:
        handler = type(
            "LockgateMetricsHandler", (_Handler,),
            {"registry": registry, "readiness": staticmethod(ready)},
        )  # fmt: skip
        try:
            self._server = ThreadingHTTPServer((host, port), handler)
        except OSError as e:
            raise ConfigError(f"cannot serve metrics on {host}:{port}: {e.strerror or e}") from e
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        """The port it listens on."""
        return int(self._server.server_address[1])

    def start(self) -> None:
        """Serve from a daemon thread."""
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="lockgate-metrics", daemon=True
        )
        self._thread.start()
        log.info("metrics on http://%s:%d/metrics (probes /healthz, /readyz)",
                 self._server.server_address[0], self.port)  # fmt: skip

    def close(self) -> None:
        """Stop serving and release the port."""
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join()
            self._thread = None
        self._server.server_close()
