"""`/metrics` in the Prometheus text format (prometheus_client's own exposition): as a route for an
HTTP listener's Starlette app, as an ASGI app of its own, or on a listener of its own (a stdio
server has no HTTP listener; `--metrics-listen http://HOST:PORT`), which on a loopback address
answers loopback Hosts only (DNS rebinding: a web page must not learn which tools are called).
"""

from __future__ import annotations

import contextlib
import socket
import sys
import threading
from collections.abc import Awaitable, Callable, Iterable
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer, choose_encoder
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ..errors import PreconditionsError
from ..rebinding import Security
from .metrics import Metrics

METRICS_PATH = "/metrics"
# A scraper connects, asks and reads within seconds. A client slower than this per read or write is
# dropped, and beyond this many connections at once a new one is answered 503 and closed: one
# thread per slow client is bounded, in time and in number.
SCRAPE_TIMEOUT_SECONDS = 10.0
MAX_SCRAPES = 32
_BUSY = (b"HTTP/1.0 503 Service Unavailable\r\nContent-Type: text/plain\r\nContent-Length: 20\r\n"
         b"Connection: close\r\n\r\nService Unavailable\n")


def metrics_endpoint(metrics: Metrics) -> Callable[[Request], Awaitable[Response]]:
    """A Starlette endpoint answering with the metrics, in the format the scraper asks for (the
    Prometheus text format, or OpenMetrics), encoded by prometheus_client."""
    registry = metrics.registry

    async def endpoint(request: Request) -> Response:
        encode, content_type = choose_encoder(request.headers.get("accept", ""))
        return Response(encode(registry), headers={"Content-Type": content_type})
    return endpoint


def metrics_route(metrics: Metrics, path: str = METRICS_PATH) -> Route:
    """The `GET /metrics` route, for `streamable_http_app(custom_starlette_routes=[...])`."""
    return Route(path, metrics_endpoint(metrics), methods=["GET"], include_in_schema=False)


def metrics_app(metrics: Metrics) -> Starlette:
    """An ASGI app serving only `GET /metrics` (404 elsewhere), to mount or serve on its own."""
    return Starlette(routes=[metrics_route(metrics)])


class _Quiet(WSGIRequestHandler):
    timeout = SCRAPE_TIMEOUT_SECONDS  # per socket read and write (StreamRequestHandler.setup)

    def log_message(self, format: str, *args: Any) -> None:
        """A scrape every few seconds is not worth a line on stderr."""


class _Bounded(ThreadingWSGIServer):
    """prometheus_client's thread-per-connection server, with at most MAX_SCRAPES threads."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._slots = threading.BoundedSemaphore(MAX_SCRAPES)
        super().__init__(*args, **kwargs)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            with contextlib.suppress(OSError):
                request.sendall(_BUSY)
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that timed out or went away is not worth a traceback on stderr."""
        if not isinstance(sys.exc_info()[1], OSError):
            super().handle_error(request, client_address)


_STATUS_TEXT = {421: "421 Misdirected Request", 403: "403 Forbidden"}


def _only(path: str, app: Callable[..., Iterable[bytes]], security: Security | None = None,
          metrics: Metrics | None = None) -> Callable[..., Iterable[bytes]]:
    def serve(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        refused = (security.refuse(environ.get("HTTP_HOST"), environ.get("HTTP_ORIGIN"), hostless=True)
                   if security is not None else None)
        if refused is not None:
            if metrics is not None:
                metrics.http_refused("host")
            start_response(_STATUS_TEXT[refused[0]], [("Content-Type", "text/plain")])
            return [refused[1]]
        if environ.get("PATH_INFO") != path:
            start_response("404 Not Found", [("Content-Type", "text/plain")])
            return [b"not found; the metrics are at /metrics\n"]
        return app(environ, start_response)
    return serve


class MetricsListener:
    """`/metrics` on a listener of its own, served from a daemon thread (so it answers even while
    the event loop is busy), one thread per connection, bounded (SCRAPE_TIMEOUT_SECONDS,
    MAX_SCRAPES). `port` 0 picks a free port: read it from `.port`."""

    def __init__(self, metrics: Metrics, host: str, port: int, option: str = "--metrics-listen"
                 ) -> None:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        server_class = type("MetricsServer", (_Bounded,), {"address_family": family})
        app = _only(METRICS_PATH, make_wsgi_app(metrics.registry), Security.for_host(host), metrics)
        try:
            self._server: WSGIServer = make_server(host, port, app, server_class, handler_class=_Quiet)
        except OSError as exc:
            raise PreconditionsError(f"{option}: cannot listen on {host}:{port}: "
                                     f"{exc.strerror or exc}") from None
        self.host = host
        self.port: int = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True,
                                        name=f"metrics:{self.port}")
        self._thread.start()

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}{METRICS_PATH}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()
