"""The lab's web front: renders a page from the API and proxies job submissions to it."""

from __future__ import annotations

import argparse
import json
import random
import sys
import urllib.error
import urllib.request
from typing import Any

from lab.services.common import (
    ConfigError,
    Metrics,
    Request,
    Response,
    load_json_config,
    serve_http,
    setup_logging,
)

REQUIRED = {"api_url": (str,), "api_timeout_s": (int, float), "slow_request_ms": (int, float)}


class Web:
    def __init__(self, config: dict[str, Any], log: Any) -> None:
        self.api_url = config["api_url"].rstrip("/")
        self.timeout = float(config["api_timeout_s"])
        self.log = log
        self.metrics = Metrics("web")
        self.metrics.describe("lab_upstream_errors_total", "Failed calls to the API, by kind.")

    def _call(self, method: str, path: str, body: bytes | None = None) -> tuple[int, Any]:
        request = urllib.request.Request(
            self.api_url + path, data=body, method=method, headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                return response.status, json.loads(response.read() or b"null")
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")[:200]
            return exc.code, {"error": detail}

    def _upstream_failure(self, path: str, exc: Exception | None, status: int | None = None) -> Response:
        kind = "unreachable" if exc is not None else f"http_{status}"
        self.metrics.inc("lab_upstream_errors_total", {"kind": kind})
        if exc is not None:
            reason = getattr(exc, "reason", exc)
            self.log.error("upstream api unreachable for %s: %s (%s)", path, reason, self.api_url)
            return Response.json(502, {"error": f"api unreachable: {reason}"})
        self.log.error("upstream api error for %s: HTTP %s", path, status)
        return Response.json(502, {"error": f"api answered HTTP {status}"})

    def index(self, _request: Request) -> Response:
        path = f"/api/items/{random.randint(1, 20)}"
        try:
            status, item = self._call("GET", path)
        except (urllib.error.URLError, OSError) as exc:
            return self._upstream_failure(path, exc)
        if status >= 500:
            return self._upstream_failure(path, None, status)
        html = f"<html><body><h1>Shop</h1><p>{item.get('name')}: {item.get('price')}</p></body></html>"
        return Response(200, html, "text/html")

    def submit_job(self, request: Request) -> Response:
        try:
            status, payload = self._call("POST", "/api/jobs", request.body or b"{}")
        except (urllib.error.URLError, OSError) as exc:
            return self._upstream_failure("/api/jobs", exc)
        if status >= 500:
            return self._upstream_failure("/api/jobs", None, status)
        return Response.json(status, payload)

    def healthz(self, _request: Request) -> Response:
        try:
            status, payload = self._call("GET", "/healthz")
        except (urllib.error.URLError, OSError) as exc:
            return Response.json(503, {"status": "degraded", "reason": f"api unreachable: {exc}"})
        if status != 200:
            return Response.json(503, {"status": "degraded", "reason": f"api unhealthy: {payload}"})
        return Response.json(200, {"status": "ok"})


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", required=True)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    log = setup_logging("web")
    try:
        config = load_json_config(args.config, REQUIRED)
    except ConfigError as exc:
        log.critical("FATAL config error, exiting: %s", exc)
        sys.exit(2)
    web = Web(config, log)
    routes = {("GET", "/"): web.index, ("POST", "/jobs"): web.submit_job, ("GET", "/healthz"): web.healthz}
    serve_http(args.port, routes, web.metrics, log, slow_ms=float(config["slow_request_ms"])).serve_forever()


if __name__ == "__main__":
    main()
