"""A local HTTP server that answers with recorded API responses (tests/diagnostics/fixtures/<api>/)
so the real clients (kubernetes, httpx) can be pointed at it. It records every request and can
emulate RBAC: a bearer token maps to the HTTP methods it may use."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

FIXTURES = Path(__file__).resolve().parents[1] / "diagnostics" / "fixtures"


@dataclass(frozen=True)
class Recorded:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: Any


def _status(code: int, reason: str, message: str) -> bytes:
    body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message}
    return json.dumps({**body, "reason": reason, "code": code}).encode()


class FixtureServer:
    def __init__(self, api: str, tokens: dict[str, set[str]] | None = None) -> None:
        self.root = FIXTURES / api
        self.routes: list[dict[str, Any]] = json.loads((self.root / "routes.json").read_text())["routes"]
        self.tokens = tokens
        self.requests: list[Recorded] = []
        self._server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def match(self, method: str, path: str, query: dict[str, str]) -> dict[str, Any] | None:
        for route in self.routes:
            wanted = route.get("query", {})
            if route["method"] != method or route["path"] != path:
                continue
            # A value of None in a route means the parameter must be absent.
            if all(query.get(k) == v for k, v in wanted.items()):
                return route
        return None

    def handle(
        self, method: str, raw_path: str, headers: dict[str, str], body: bytes
    ) -> tuple[int, str, bytes]:
        parts = urlsplit(raw_path)
        query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        try:
            parsed: Any = json.loads(body) if body else None
        except ValueError:
            parsed = body.decode(errors="replace")
        self.requests.append(Recorded(method, parts.path, query, headers, parsed))
        if self.tokens is not None:
            token = headers.get("authorization", "").removeprefix("Bearer ").strip()
            if token not in self.tokens:
                return 401, "application/json", _status(401, "Unauthorized", "Unauthorized")
            if method not in self.tokens[token]:
                message = f"the service account cannot {method.lower()} {parts.path}: RBAC: access denied"
                return 403, "application/json", _status(403, "Forbidden", message)
        route = self.match(method, parts.path, query)
        if route is None:
            return (
                404,
                "application/json",
                _status(404, "NotFound", "the server could not find the requested resource"),
            )
        data = (self.root / route["file"]).read_bytes()
        return route["status"], route.get("content_type", "application/json"), data

    @contextmanager
    def running(self) -> Iterator[FixtureServer]:
        fixture = self

        class Handler(BaseHTTPRequestHandler):
            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                headers = {k.lower(): v for k, v in self.headers.items()}
                status, content_type, data = fixture.handle(self.command, self.path, headers, body)
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_PATCH = do_POST = do_PUT = do_DELETE = _serve

            def log_message(self, format: str, *args: Any) -> None:
                return

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self._server.shutdown()
            self._server.server_close()
