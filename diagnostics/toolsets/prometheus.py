"""The `prometheus` environment: read tools over the Prometheus HTTP API (/api/v1). Off unless
SKILLGATE_PROMETHEUS_URL is set. The toolset holds only the URL and an optional bearer token; each
call opens an httpx client, sends one GET and closes it (the query API reads; nothing here can
reach the admin API, which is also off unless Prometheus runs with --web.enable-admin-api)."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, ClassVar

import httpx
from django.core.exceptions import ImproperlyConfigured

from diagnostics import conf as diagnostics_conf
from diagnostics.toolsets.base import ReadToolset, ToolResult, ToolSpec, object_schema, validation_error

MAX_SERIES = 50
MAX_OUTPUT = 12_000
_RELATIVE = re.compile(r"^-(\d+)([smhdw])$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_TIME = {"type": "string", "description": "RFC 3339, unix seconds, 'now' or relative like '-15m', '-2h'"}


class ToolsetNotConfigured(ImproperlyConfigured):
    """SKILLGATE_PROMETHEUS_URL is not set (the integration is off)."""


@dataclass(frozen=True)
class PrometheusConfig:
    url: str | None = None
    bearer_token: str | None = None
    timeout_s: float = 10.0

    @classmethod
    def from_settings(cls) -> PrometheusConfig:
        return cls(
            url=diagnostics_conf.get().environments.prometheus_url,
            bearer_token=diagnostics_conf.get().environments.prometheus_token,
            timeout_s=diagnostics_conf.get().environments.prometheus_timeout_s,
        )


class PrometheusError(Exception):
    pass


def parse_time(value: str, now: float | None = None) -> float:
    """Unix seconds from RFC 3339, unix seconds, 'now' or a relative '-15m'."""
    now = time.time() if now is None else now
    value = value.strip()
    if value == "now":
        return now
    relative = _RELATIVE.match(value)
    if relative:
        return now - int(relative.group(1)) * _UNITS[relative.group(2)]
    try:
        return float(value)
    except ValueError:
        pass
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        raise PrometheusError(f"cannot parse time {value!r}") from None


def _ts(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _labels(metric: dict[str, str]) -> str:
    name = metric.get("__name__", "")
    rest = ", ".join(f'{k}="{v}"' for k, v in sorted(metric.items()) if k != "__name__")
    return f"{name}{{{rest}}}"


class PrometheusReadToolset(ReadToolset):
    name: ClassVar[str] = "prometheus"

    def __init__(self, config: PrometheusConfig | None = None) -> None:
        config = config or PrometheusConfig.from_settings()
        if not config.url:
            raise ToolsetNotConfigured("Set SKILLGATE_PROMETHEUS_URL to use the prometheus toolset.")
        self._url = config.url.rstrip("/")
        self._token = config.bearer_token
        self._timeout = config.timeout_s

    def tools(self) -> list[ToolSpec]:
        query = {"type": "string", "minLength": 1, "description": "PromQL"}
        return [
            ToolSpec(
                "execute_prometheus_instant_query",
                "Evaluate a PromQL expression at one time (default now): GET /api/v1/query",
                object_schema({"query": query, "time": _TIME}, ["query"]),
            ),
            ToolSpec(
                "execute_prometheus_range_query",
                "Evaluate a PromQL expression over a time range: GET /api/v1/query_range. start defaults "
                "to -1h, end to now, step (seconds) to about 120 points.",
                object_schema(
                    {"query": query, "start": _TIME, "end": _TIME, "step": {"type": "number", "minimum": 1}},
                    ["query"],
                ),
            ),
            ToolSpec(
                "list_prometheus_alerts",
                "Active alerts (firing and pending) with labels and annotations: GET /api/v1/alerts",
                object_schema({"state": {"type": "string", "enum": ["firing", "pending"]}}, []),
            ),
            ToolSpec(
                "list_prometheus_targets",
                "Scrape targets, their health and last error: GET /api/v1/targets",
                object_schema({"health": {"type": "string", "enum": ["up", "down", "unknown"]}}, []),
            ),
        ]

    def call(self, tool: str, params: dict[str, Any]) -> ToolResult:
        specs = {spec.name: spec for spec in self.tools()}
        if tool not in specs:
            return ToolResult(tool, params, f"unknown tool {tool!r}", ok=False)
        error = validation_error(specs[tool].parameters, params)
        if error:
            return ToolResult(tool, params, f"invalid parameters: {error}", ok=False)
        handler: Callable[..., str] = getattr(self, f"_{tool}")
        try:
            output = handler(**params)
        except PrometheusError as exc:
            return ToolResult(tool, params, str(exc), ok=False)
        except httpx.HTTPError as exc:
            return ToolResult(tool, params, f"prometheus unreachable at {self._url}: {exc}", ok=False)
        if len(output) > MAX_OUTPUT:
            output = output[:MAX_OUTPUT] + "\n...(truncated)"
        return ToolResult(tool, params, output, no_data=output.startswith("no data"))

    def _get(self, path: str, params: dict[str, str]) -> Any:
        headers = {"Authorization": f"Bearer {self._token}"} if self._token else {}
        with httpx.Client(base_url=self._url, timeout=self._timeout, headers=headers) as http:
            response = http.get(path, params=params)
        try:
            body = response.json()
        except ValueError:
            raise PrometheusError(f"HTTP {response.status_code} from {path}: {response.text[:300]}") from None
        if body.get("status") != "success":
            kind = body.get("errorType")
            raise PrometheusError(
                f"prometheus error (HTTP {response.status_code}, {kind}): {body.get('error')}"
            )
        warnings = body.get("warnings") or []
        return body["data"], warnings

    # --- tools -----------------------------------------------------------------------------------

    def _execute_prometheus_instant_query(self, query: str, time: str | None = None) -> str:
        params = {"query": query}
        if time:
            params["time"] = str(parse_time(time))
        data, warnings = self._get("/api/v1/query", params)
        return _render(data, warnings)

    def _execute_prometheus_range_query(
        self, query: str, start: str = "-1h", end: str = "now", step: float | None = None
    ) -> str:
        now = time.time()
        t0, t1 = parse_time(start, now), parse_time(end, now)
        if t1 <= t0:
            raise PrometheusError("end must be after start")
        step = step or max(15.0, round((t1 - t0) / 120))
        params = {"query": query, "start": f"{t0:.3f}", "end": f"{t1:.3f}", "step": f"{step:g}"}
        data, warnings = self._get("/api/v1/query_range", params)
        return _render(data, warnings)

    def _list_prometheus_alerts(self, state: str | None = None) -> str:
        data, _ = self._get("/api/v1/alerts", {})
        alerts = [a for a in data.get("alerts", []) if state is None or a.get("state") == state]
        if not alerts:
            return "no data: no active alerts" + (f" in state {state}" if state else "")
        lines = []
        for alert in alerts:
            labels = dict(alert.get("labels", {}))
            name = labels.pop("alertname", "?")
            notes = alert.get("annotations", {})
            lines.append(
                f"{name} [{alert.get('state')}] since {alert.get('activeAt')} value={alert.get('value')} "
                f"{_labels(labels)}"
            )
            for key in ("summary", "description", "runbook_url"):
                if notes.get(key):
                    lines.append(f"    {key}: {notes[key]}")
        return "\n".join(lines)

    def _list_prometheus_targets(self, health: str | None = None) -> str:
        data, _ = self._get("/api/v1/targets", {"state": "active"})
        targets = [t for t in data.get("activeTargets", []) if health is None or t.get("health") == health]
        if not targets:
            return "no data: no targets" + (f" with health {health}" if health else "")
        lines = []
        for target in targets:
            labels = target.get("labels", {})
            job = labels.get("job", target.get("scrapePool"))
            line = (
                f"{job} {target.get('scrapeUrl')} health={target.get('health')} "
                f"last_scrape={target.get('lastScrape')} duration={target.get('lastScrapeDuration')}s"
            )
            if target.get("lastError"):
                line += f" last_error={target['lastError']!r}"
            lines.append(line)
        return "\n".join(lines)


def _render(data: dict[str, Any], warnings: list[str]) -> str:
    kind, result = data.get("resultType"), data.get("result")
    lines = [f"warning: {w}" for w in warnings]
    if kind in ("scalar", "string"):
        stamp, value = result  # type: ignore[misc]
        return "\n".join([*lines, f"{kind}: {value} @ {_ts(float(stamp))}"])
    if not result:
        return "\n".join([*lines, f"no data: the query returned an empty {kind}"])
    series = list(result)
    if kind == "vector":
        for item in series[:MAX_SERIES]:
            stamp, value = item["value"]
            lines.append(f"{_labels(item['metric'])} => {value} @ {_ts(float(stamp))}")
    else:  # matrix
        for item in series[:MAX_SERIES]:
            points = [(float(t), float(v)) for t, v in item["values"]]
            values = [v for _, v in points]
            span = f"{_ts(points[0][0])} .. {_ts(points[-1][0])}"
            lines.append(
                f"{_labels(item['metric'])}: {len(points)} points {span}; "
                f"min={min(values):g} max={max(values):g} last={values[-1]:g}"
            )
            stride = max(1, len(points) // 12)
            sample = points[::stride] + ([points[-1]] if (len(points) - 1) % stride else [])
            lines.append("    " + " ".join(f"{_ts(t)[11:19]}={v:g}" for t, v in sample))
    if len(series) > MAX_SERIES:
        lines.append(f"... {len(series) - MAX_SERIES} more series")
    return "\n".join(lines)
