"""What every lab service shares: logging, Prometheus-format metrics, a small threaded HTTP server
and a minimal RESP (Redis protocol) client. Standard library only, so a service starts in ~0.1 s
and runs under supervisord without Django."""

from __future__ import annotations

import json
import logging
import os
import resource
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
_CLK_TCK = os.sysconf("SC_CLK_TCK")
_PAGE = os.sysconf("SC_PAGE_SIZE")


class ConfigError(Exception):
    """A config file a service cannot run with. The service logs it and exits with status 2."""


def setup_logging(service: str, level: str = "INFO") -> logging.Logger:
    """Log lines to stderr; supervisord writes them to var/lab/logs/<process>.log."""
    logging.basicConfig(
        stream=sys.stderr,
        level=level,
        format=f"%(asctime)s %(levelname)s {service}[%(process)d] %(message)s",
    )
    return logging.getLogger(service)


def load_json_config(path: str, required: Mapping[str, tuple[type, ...]]) -> dict[str, Any]:
    """Read a JSON config and check the type of every required key; raise ConfigError otherwise."""
    try:
        data = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {path}") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path} is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path} must hold a JSON object")
    for key, types in required.items():
        if key not in data:
            raise ConfigError(f"{path}: missing required key {key!r}")
        value = data[key]
        if isinstance(value, bool) and bool not in types:
            raise ConfigError(f"{path}: {key} must be {_names(types)}, got {value!r}")
        if not isinstance(value, types):
            raise ConfigError(f"{path}: {key} must be {_names(types)}, got {value!r}")
    return data


def _names(types: tuple[type, ...]) -> str:
    words = {int: "an integer", float: "a number", str: "a string", bool: "a boolean", list: "a list"}
    return " or ".join(words.get(t, t.__name__) for t in types)


# --- metrics -------------------------------------------------------------------------------------


def _labels(labels: dict[str, str] | None) -> str:
    if not labels:
        return ""
    inner = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    return "{" + inner + "}"


@dataclass
class _Histogram:
    counts: list[int]
    total: float = 0.0
    n: int = 0


class Metrics:
    """Counters, gauges and histograms rendered in the Prometheus text format, plus process_*."""

    def __init__(self, service: str) -> None:
        self.service = service
        self._lock = threading.Lock()
        self._counters: dict[str, dict[str, float]] = {}
        self._gauges: dict[str, dict[str, float]] = {}
        self._hists: dict[str, dict[str, _Histogram]] = {}
        self._help: dict[str, str] = {}
        self._gauge_fns: list[Callable[[], Iterable[tuple[str, dict[str, str] | None, float]]]] = []
        self.started = time.time()

    def describe(self, name: str, text: str) -> None:
        self._help[name] = text

    def inc(self, name: str, labels: dict[str, str] | None = None, value: float = 1.0) -> None:
        with self._lock:
            series = self._counters.setdefault(name, {})
            key = _labels(labels)
            series[key] = series.get(key, 0.0) + value

    def set(self, name: str, value: float, labels: dict[str, str] | None = None) -> None:
        with self._lock:
            self._gauges.setdefault(name, {})[_labels(labels)] = value

    def observe(self, name: str, seconds: float, labels: dict[str, str] | None = None) -> None:
        with self._lock:
            series = self._hists.setdefault(name, {})
            key = _labels(labels)
            hist = series.setdefault(key, _Histogram(counts=[0] * len(LATENCY_BUCKETS)))
            for i, bound in enumerate(LATENCY_BUCKETS):
                if seconds <= bound:
                    hist.counts[i] += 1
            hist.total += seconds
            hist.n += 1

    def gauge_fn(self, fn: Callable[[], Iterable[tuple[str, dict[str, str] | None, float]]]) -> None:
        """A callback evaluated at scrape time (queue depth, spool bytes...)."""
        self._gauge_fns.append(fn)

    def render(self) -> str:
        lines: list[str] = []
        with self._lock:
            for name, series in sorted(self._counters.items()):
                lines += [f"# HELP {name} {self._help.get(name, name)}", f"# TYPE {name} counter"]
                lines += [f"{name}{key} {value:g}" for key, value in sorted(series.items())]
            gauges = {name: dict(series) for name, series in self._gauges.items()}
            for name, hist_series in sorted(self._hists.items()):
                lines += [f"# HELP {name} {self._help.get(name, name)}", f"# TYPE {name} histogram"]
                for key, hist in sorted(hist_series.items()):
                    inner = key[1:-1] + "," if key else ""
                    for bound, count in zip(LATENCY_BUCKETS, hist.counts, strict=True):
                        lines.append(f'{name}_bucket{{{inner}le="{bound:g}"}} {count}')
                    lines.append(f'{name}_bucket{{{inner}le="+Inf"}} {hist.n}')
                    lines.append(f"{name}_sum{key} {hist.total:.6f}")
                    lines.append(f"{name}_count{key} {hist.n}")
        for fn in self._gauge_fns:
            try:
                for name, labels, value in fn():
                    gauges.setdefault(name, {})[_labels(labels)] = value
            except Exception as exc:  # a failing gauge must not break the scrape
                logging.getLogger(self.service).warning("gauge callback failed: %s", exc)
        for name, series in sorted(gauges.items()):
            lines += [f"# HELP {name} {self._help.get(name, name)}", f"# TYPE {name} gauge"]
            lines += [f"{name}{key} {value:g}" for key, value in sorted(series.items())]
        lines += process_metrics(self.started)
        return "\n".join(lines) + "\n"


def process_metrics(started: float) -> list[str]:
    """process_* metrics as the Prometheus client library names them, read from /proc/self."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    cpu = usage.ru_utime + usage.ru_stime
    try:
        size, resident = (int(x) for x in Path("/proc/self/statm").read_text().split()[:2])
    except OSError:
        size = resident = 0
    return [
        "# HELP process_cpu_seconds_total Total user and system CPU time spent in seconds.",
        "# TYPE process_cpu_seconds_total counter",
        f"process_cpu_seconds_total {cpu:.3f}",
        "# HELP process_resident_memory_bytes Resident memory size in bytes.",
        "# TYPE process_resident_memory_bytes gauge",
        f"process_resident_memory_bytes {resident * _PAGE}",
        "# HELP process_virtual_memory_bytes Virtual memory size in bytes.",
        "# TYPE process_virtual_memory_bytes gauge",
        f"process_virtual_memory_bytes {size * _PAGE}",
        "# HELP process_start_time_seconds Start time of the process since unix epoch in seconds.",
        "# TYPE process_start_time_seconds gauge",
        f"process_start_time_seconds {started:.3f}",
        "# HELP process_threads Number of OS threads in the process.",
        "# TYPE process_threads gauge",
        f"process_threads {threading.active_count()}",
    ]


# --- HTTP ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    body: bytes


@dataclass(frozen=True)
class Response:
    status: int
    body: str
    content_type: str = "application/json"

    @classmethod
    def json(cls, status: int, payload: Any) -> Response:
        return cls(status, json.dumps(payload))


Route = Callable[[Request], Response]


class RequestWindow:
    """Requests of the last period, summarized into one log line (access logs would be too noisy)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._latencies: list[float] = []
        self._errors = 0

    def record(self, seconds: float, error: bool) -> None:
        with self._lock:
            self._latencies.append(seconds)
            self._errors += int(error)

    def flush(self) -> str | None:
        with self._lock:
            latencies, errors = sorted(self._latencies), self._errors
            self._latencies, self._errors = [], 0
        if not latencies:
            return None
        p50 = latencies[len(latencies) // 2] * 1000
        p95 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.95))] * 1000
        return f"{len(latencies)} requests, {errors} errors (5xx), p50 {p50:.0f} ms, p95 {p95:.0f} ms"

    def log_every(self, period_s: float, log: logging.Logger) -> None:
        def loop() -> None:
            while True:
                time.sleep(period_s)
                line = self.flush()
                if line:
                    log.info("last %.0fs: %s", period_s, line)

        threading.Thread(target=loop, name="window", daemon=True).start()


_UNCOUNTED = ("/metrics", "/healthz")


def serve_http(
    port: int,
    routes: dict[tuple[str, str], Route],
    metrics: Metrics,
    log: logging.Logger,
    *,
    slow_ms: float = 1000.0,
) -> ThreadingHTTPServer:
    """Serve `routes` (keyed by method and path prefix; the longest prefix wins) on 127.0.0.1."""
    metrics.describe("lab_http_requests_total", "HTTP requests served, by route and status code.")
    metrics.describe("lab_http_request_errors_total", "HTTP requests answered with a 5xx status.")
    metrics.describe("lab_http_request_duration_seconds", "HTTP request latency.")
    routes.setdefault(
        ("GET", "/metrics"), lambda _r: Response(200, metrics.render(), "text/plain; version=0.0.4")
    )
    ordered = sorted(routes.items(), key=lambda item: -len(item[0][1]))
    window = RequestWindow()
    window.log_every(10.0, log)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _dispatch(self, method: str) -> None:
            start = time.perf_counter()
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            path = self.path.split("?", 1)[0]
            route_name = "unmatched"
            response = Response.json(404, {"error": "not found"})
            for (route_method, prefix), fn in ordered:
                if route_method == method and (path == prefix or path.startswith(prefix.rstrip("/") + "/")):
                    route_name = prefix
                    try:
                        response = fn(Request(method, path, body))
                    except Exception as exc:
                        log.exception(
                            "unhandled error on %s %s: %s: %s", method, path, type(exc).__name__, exc
                        )
                        response = Response.json(500, {"error": f"{type(exc).__name__}: {exc}"})
                    break
            data = response.body.encode()
            self.send_response(response.status)
            self.send_header("Content-Type", response.content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            elapsed = time.perf_counter() - start
            if path in _UNCOUNTED:
                return
            labels = {"route": route_name, "method": method, "code": str(response.status)}
            metrics.inc("lab_http_requests_total", labels)
            metrics.observe("lab_http_request_duration_seconds", elapsed, {"route": route_name})
            window.record(elapsed, response.status >= 500)
            if response.status >= 500:
                metrics.inc("lab_http_request_errors_total", {"route": route_name})
            if elapsed * 1000 >= slow_ms:
                log.warning("slow request %s %s took %.0f ms", method, path, elapsed * 1000)

        def do_GET(self) -> None:
            self._dispatch("GET")

        def do_POST(self) -> None:
            self._dispatch("POST")

        def log_message(self, format: str, *args: Any) -> None:  # access logs are too noisy
            return

    ThreadingHTTPServer.allow_reuse_address = True
    ThreadingHTTPServer.daemon_threads = True
    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    log.info("listening on http://127.0.0.1:%d", port)
    return server


def start_in_thread(server: ThreadingHTTPServer) -> threading.Thread:
    thread = threading.Thread(target=server.serve_forever, name="http", daemon=True)
    thread.start()
    return thread


# --- RESP client ---------------------------------------------------------------------------------


class StoreError(Exception):
    """The store could not be reached or answered with an error."""


class RespClient:
    """A minimal, thread-safe Redis-protocol client (one connection, reconnect on failure)."""

    def __init__(self, host: str, port: int, timeout: float = 2.0) -> None:
        self.host, self.port, self.timeout = host, port, timeout
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._file: Any = None

    def command(self, *args: str | int | bytes) -> Any:
        with self._lock:
            try:
                if self._sock is None:
                    self._sock = socket.create_connection((self.host, self.port), timeout=self.timeout)
                    self._file = self._sock.makefile("rb")
                self._sock.sendall(encode_command(args))
                return read_reply(self._file)
            except (OSError, EOFError) as exc:
                self._close()
                raise StoreError(f"{exc} (store {self.host}:{self.port})") from exc

    def _close(self) -> None:
        if self._sock is not None:
            self._sock.close()
        self._sock, self._file = None, None


def encode_command(args: Iterable[str | int | bytes]) -> bytes:
    parts = [a if isinstance(a, bytes) else str(a).encode() for a in args]
    out = [f"*{len(parts)}\r\n".encode()]
    for part in parts:
        out += [f"${len(part)}\r\n".encode(), part, b"\r\n"]
    return b"".join(out)


def read_reply(file: Any) -> Any:
    line = file.readline()
    if not line:
        raise EOFError("store closed the connection")
    kind, rest = line[:1], line[1:-2]
    if kind == b"+":
        return rest.decode()
    if kind == b"-":
        raise StoreError(rest.decode())
    if kind == b":":
        return int(rest)
    if kind == b"$":
        size = int(rest)
        if size < 0:
            return None
        data = file.read(size + 2)
        return data[:-2].decode()
    if kind == b"*":
        count = int(rest)
        return None if count < 0 else [read_reply(file) for _ in range(count)]
    raise StoreError(f"unexpected reply {line!r}")
