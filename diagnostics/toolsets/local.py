"""The `local` environment: the lab under supervisord on this machine (lab/).

LocalReadToolset holds only the lab's frozen config (paths, ports) and a SupervisorReader, which
keeps a socket path and allows only read XML-RPC methods; it reads files, GETs /metrics and
/healthz, and sends Redis INFO. LocalWriteToolset holds the Lab (the full supervisord client);
each action has a JSON schema and anything off the allow-list is refused.
"""

from __future__ import annotations

import ast
import json
import re
import time
import xmlrpc.client
from collections.abc import Callable
from typing import Any, ClassVar

from diagnostics.toolsets.base import (
    ActionResult,
    HealthResult,
    ReadToolset,
    ToolResult,
    ToolSpec,
    WriteToolset,
    object_schema,
    validation_error,
)
from lab import deploy
from lab.changes import render_changes
from lab.config import CONFIGURABLE, MAX_WORKERS, SERVICES, LabConfig
from lab.control import Lab, LabError
from lab.health import HealthChecker
from lab.probes import (
    cpu_percent,
    http_get,
    parse_metrics,
    proc_stat,
    resp_once,
    summarize_http,
)
from lab.spool import largest_files, spool_usage
from lab.state import desired_workers
from lab.supervisor import SupervisorReader

MAX_OUTPUT = 12_000
ACTOR = "skillgate-executor"  # who the change log and the deploy log name for approved actions
_SERVICE = {"type": "string", "enum": list(SERVICES)}
_LOG_SOURCES = [*SERVICES, "supervisord"]


def _clip(text: str) -> str:
    return text if len(text) <= MAX_OUTPUT else "...(truncated)\n" + text[-MAX_OUTPUT:]


def _tail_lines(text: str, lines: int, grep: str | None) -> str:
    rows = text.splitlines()
    if grep:
        rows = [row for row in rows if grep.lower() in row.lower()]
    return "\n".join(rows[-lines:])


class LocalReadToolset(ReadToolset):
    name: ClassVar[str] = "local"

    def __init__(self, config: LabConfig | None = None) -> None:
        config = config or LabConfig.from_settings()
        self._config = config
        self._supervisor = SupervisorReader(str(config.socket_path))

    def tools(self) -> list[ToolSpec]:
        lines = {"type": "integer", "minimum": 1, "maximum": 500, "default": 50}
        return [
            ToolSpec(
                "list_processes",
                "Every supervised process: state, pid, uptime, last exit status; the worker count and "
                "its recent changes.",
            ),
            ToolSpec(
                "process_top", "CPU % (sampled over 0.5 s) and resident memory of every running process."
            ),
            ToolSpec(
                "tail_log",
                "Last lines of a service's log (stdout and stderr), optionally only lines containing `grep`.",
                object_schema(
                    {
                        "service": {"type": "string", "enum": _LOG_SOURCES},
                        "lines": lines,
                        "grep": {"type": "string"},
                    },
                    ["service"],
                ),
            ),
            ToolSpec(
                "supervisor_events",
                "supervisord's own log: spawned, exited (with exit status), gave up (FATAL), stopped.",
                object_schema({"lines": lines, "grep": {"type": "string"}}),
            ),
            ToolSpec(
                "read_metrics",
                "A service's Prometheus metrics (the store: Redis INFO), with a request/error/latency "
                "summary; `match` keeps only lines containing it.",
                object_schema({"service": _SERVICE, "match": {"type": "string"}}, ["service"]),
            ),
            ToolSpec(
                "http_check",
                "GET a service's /healthz: status code, latency and body.",
                object_schema({"service": {"type": "string", "enum": ["api", "web", "worker"]}}, ["service"]),
            ),
            ToolSpec(
                "read_config",
                "A service's config file (JSON) and its recent changes (who changed which key, when).",
                object_schema({"service": {"type": "string", "enum": list(CONFIGURABLE)}}, ["service"]),
            ),
            ToolSpec(
                "disk_usage",
                "Bytes used in the quota folder against its quota, and its largest files.",
                object_schema({"folder": {"type": "string", "enum": ["spool"]}}),
            ),
            ToolSpec(
                "deploy_history",
                "A service's releases, the current one, and its recent deploys and rollbacks.",
                object_schema({"service": {"type": "string", "enum": list(deploy.DEPLOYABLE)}}, ["service"]),
            ),
        ]

    def call(self, tool: str, params: dict[str, Any]) -> ToolResult:
        specs = {spec.name: spec for spec in self.tools()}
        if tool not in specs:
            return ToolResult(tool, params, f"unknown tool {tool!r}; tools: {', '.join(specs)}", ok=False)
        error = validation_error(specs[tool].parameters, params)
        if error:
            return ToolResult(tool, params, f"invalid parameters: {error}", ok=False)
        handler: Callable[..., str] = getattr(self, f"_{tool}")
        try:
            return ToolResult(tool, params, _clip(handler(**params)))
        except Exception as exc:  # supervisord down, file missing, port closed: a result, not a raise
            output = f"{type(exc).__name__}: {exc}"
            if not self._config.socket_path.exists():
                output = f"the lab is not running (no supervisord at {self._config.socket_path}): {output}"
            return ToolResult(tool, params, output, ok=False)

    # --- tools -----------------------------------------------------------------------------------

    def _list_processes(self) -> str:
        rows = [f"{'NAME':<10} {'STATE':<9} {'PID':>7}  {'EXIT':>4}  DESCRIPTION"]
        for p in self._supervisor.processes():
            # supervisord's exitstatus means something only in EXITED; the exits of a crash
            # loop (BACKOFF, FATAL) are in supervisor_events.
            exit_status = p["exitstatus"] if p["statename"] == "EXITED" else "-"
            pid = p["pid"] or "-"
            rows.append(
                f"{p['name']:<10} {p['statename']:<9} {pid:>7}  {exit_status!s:>4}  {p['description']}"
            )
            if p.get("spawnerr"):
                rows.append(f"{'':<10} spawn error: {p['spawnerr']}")
        rows.append(f"(workers configured: {desired_workers(self._config)})")
        rows.append(render_changes(self._config, "worker"))
        return "\n".join(rows)

    def _process_top(self) -> str:
        running = [p for p in self._supervisor.processes() if p["pid"]]
        cpu = cpu_percent([int(p["pid"]) for p in running], 0.5)
        rows = [f"{'NAME':<10} {'PID':>7} {'CPU%':>6} {'RSS_MiB':>8} {'UPTIME_S':>9}"]
        for p in running:
            stat = proc_stat(int(p["pid"]))
            rss = stat.rss_bytes / 2**20 if stat else 0.0
            uptime = int(p["now"]) - int(p["start"])
            rows.append(
                f"{p['name']:<10} {p['pid']:>7} {cpu.get(int(p['pid']), 0.0):>6.1f} {rss:>8.1f} {uptime:>9}"
            )
        return "\n".join(rows)

    def _tail_log(self, service: str, lines: int = 50, grep: str | None = None) -> str:
        if service == "worker":
            files = sorted(self._config.logs_dir.glob("worker_*.log"))
        else:
            files = [self._config.logs_dir / f"{service}.log"]
        out = []
        for path in files:
            if not path.exists():
                out.append(f"== {path.name}: no log yet")
                continue
            with path.open("rb") as handle:
                handle.seek(max(0, path.stat().st_size - 512 * 1024))
                text = handle.read().decode(errors="replace")
            out.append(f"== {path.name}\n{_tail_lines(text, lines, grep)}")
        return "\n".join(out)

    def _supervisor_events(self, lines: int = 50, grep: str | None = None) -> str:
        size = self._config.logs_dir / "supervisord.log"
        nbytes = min(256 * 1024, size.stat().st_size) if size.exists() else 64 * 1024
        return _tail_lines(self._supervisor.main_log(max(nbytes, 1)), lines, grep)

    def _metrics_urls(self, service: str) -> list[tuple[str, str]]:
        if service == "worker":
            names = [str(p["name"]) for p in self._supervisor.processes() if p["group"] == "worker"]
            return [
                (n, f"http://127.0.0.1:{self._config.worker_port_base + int(n.split('_')[1])}") for n in names
            ]
        port = self._config.http_port(service)
        return [(service, f"http://127.0.0.1:{port}")] if port else []

    def _read_metrics(self, service: str, match: str | None = None) -> str:
        if service == "store":
            try:
                info = resp_once("127.0.0.1", self._config.store_port, "INFO")
            except OSError as exc:
                return f"store 127.0.0.1:{self._config.store_port}: INFO failed: {exc}"
            return _tail_lines(info, 400, match)
        if service == "loadgen":
            return "loadgen exposes no metrics; see tail_log service=loadgen"
        urls = self._metrics_urls(service)
        if not urls:
            return f"no {service} process is configured"
        out = []
        for name, base in urls:
            reply = http_get(base + "/metrics")
            if reply.status != 200:
                out.append(f"== {name}: /metrics unreachable ({reply.body[:200]})")
                continue
            samples = [line for line in reply.body.splitlines() if line and not line.startswith("#")]
            if match:
                samples = [line for line in samples if match in line]
            out.append(f"== {name}: {summarize_http(parse_metrics(reply.body))}\n" + "\n".join(samples))
        return "\n".join(out)

    def _http_check(self, service: str) -> str:
        urls = self._metrics_urls(service)
        if not urls:
            return f"no {service} process is configured"
        out = []
        for name, base in urls:
            reply = http_get(base + "/healthz")
            status = reply.status or "unreachable"
            out.append(f"{name}: GET /healthz -> {status} in {reply.ms:.0f} ms: {reply.body[:300]}")
        return "\n".join(out)

    def _read_config(self, service: str) -> str:
        path = self._config.config_path(service)
        return f"# {path}\n{path.read_text()}\n{render_changes(self._config, service)}"

    def _disk_usage(self, folder: str = "spool") -> str:
        spool, quota = self._config.spool_dir, self._config.spool_quota_bytes
        used = spool_usage(spool)
        rows = [f"{folder} ({spool}): {used} of {quota} bytes used ({100 * used / quota:.1f}% of quota)"]
        rows += [f"  {size:>10}  {name}" for name, size in largest_files(spool)]
        return "\n".join(rows)

    def _deploy_history(self, service: str) -> str:
        current = deploy.current(self._config, service)
        rows = [
            f"current release: {current}",
            f"releases: {', '.join(deploy.releases(self._config, service))}",
        ]
        rows += ["recent deploys (oldest first):"]
        rows += [f"  {json.dumps(entry)}" for entry in deploy.history(self._config, service)[-10:]]
        return "\n".join(rows)


# --- write ---------------------------------------------------------------------------------------

PATCHABLE: dict[tuple[str, str], dict[str, Any]] = {
    ("api", "request_timeout_s"): {"type": "number", "exclusiveMinimum": 0, "maximum": 30},
    ("api", "cache_enabled"): {"type": "boolean"},
    ("api", "log_level"): {"type": "string", "enum": ["DEBUG", "INFO", "WARNING", "ERROR"]},
    ("web", "api_timeout_s"): {"type": "number", "exclusiveMinimum": 0, "maximum": 30},
    ("worker", "batch_size"): {"type": "integer", "minimum": 1, "maximum": 64},
    ("worker", "memory_limit_mb"): {"type": "integer", "minimum": 64, "maximum": 1024},
    ("worker", "job_cost_ms"): {"type": "integer", "minimum": 0, "maximum": 1000},
}


class LocalWriteToolset(WriteToolset):
    name: ClassVar[str] = "local"

    def __init__(self, config: LabConfig | None = None) -> None:
        config = config or LabConfig.from_settings()
        self._lab = Lab(config)
        self._health = HealthChecker(config)

    def actions(self) -> list[ToolSpec]:
        allowed = "; ".join(f"{s}.{k}: {json.dumps(v)}" for (s, k), v in PATCHABLE.items())
        return [
            ToolSpec(
                "restart_service",
                "Restart a service's processes (starts them if stopped or FATAL).",
                object_schema({"service": _SERVICE}, ["service"]),
            ),
            ToolSpec(
                "rollback_deploy",
                "Point the service's `current` release back at the one deployed before it, and restart it.",
                object_schema({"service": {"type": "string", "enum": list(deploy.DEPLOYABLE)}}, ["service"]),
            ),
            ToolSpec(
                "scale_workers",
                f"Set the number of worker processes (1..{MAX_WORKERS}).",
                object_schema(
                    {"count": {"type": "integer", "minimum": 1, "maximum": MAX_WORKERS}}, ["count"]
                ),
            ),
            ToolSpec(
                "patch_config",
                "Set one allow-listed key of a service's config file and restart the service. "
                f"Allowed: {allowed}",
                object_schema(
                    {
                        "service": {"type": "string", "enum": sorted({s for s, _ in PATCHABLE})},
                        "key": {"type": "string", "enum": sorted({k for _, k in PATCHABLE})},
                        "value": {"type": ["number", "boolean", "string"]},
                    },
                    ["service", "key", "value"],
                ),
            ),
            ToolSpec(
                "clear_quota_folder",
                "Delete every file in the quota folder (the worker's spool of results).",
                object_schema({"folder": {"type": "string", "enum": ["spool"]}}, ["folder"]),
            ),
        ]

    def run(self, action: str, args: dict[str, Any]) -> ActionResult:
        specs = {spec.name: spec for spec in self.actions()}
        if action not in specs:
            return ActionResult(action, args, False, f"refused: {action!r} is not on the allow-list")
        error = validation_error(specs[action].parameters, args)
        if error:
            return ActionResult(action, args, False, f"refused: invalid arguments: {error}")
        handler: Callable[..., str] = getattr(self, f"_{action}")
        try:
            return ActionResult(action, args, True, handler(**args))
        except PermissionError as exc:
            return ActionResult(action, args, False, f"refused: {exc}")
        except (LabError, OSError, xmlrpc.client.Error) as exc:
            return ActionResult(action, args, False, f"failed: {exc}")

    def health(self, target: str) -> HealthResult:
        target = target or "lab"  # an action on no one service (clear_quota_folder, scale_workers)
        if target not in (*SERVICES, "lab"):
            return HealthResult(False, f"unknown target {target!r}; one of {', '.join((*SERVICES, 'lab'))}")
        check = self._health.wait(target)
        return HealthResult(check.ok, f"{target}: {check.detail}")

    def system_health(self, *, settle: bool = False) -> HealthResult:
        """Every service: which of them fail now (one round), or, with ``settle``, after waiting for the
        whole lab to be stable (the health timeout) and naming what still fails then."""
        if settle and self._health.wait("lab").ok:
            return HealthResult(True, "all services healthy (stable)")
        failing: list[str] = []
        details: list[str] = []
        for service in SERVICES:
            check = self._health.check(service)
            if not check.ok:
                failing.append(service)
                details.append(f"{service}: {check.detail}")
        return HealthResult(not failing, "; ".join(details) or "all services healthy", tuple(failing))

    def inverse(self, action: str, args: dict[str, Any], output: str) -> tuple[str, dict[str, Any]] | None:
        """patch_config back to the value it replaced; scale_workers back to the count before."""
        if action == "patch_config":
            match = re.match(
                rf"{re.escape(str(args.get('service')))}\.{re.escape(str(args.get('key')))}: (.+?) -> ",
                output,
            )
            if match is None:
                return None
            try:
                old = ast.literal_eval(match.group(1))
            except (ValueError, SyntaxError):
                return None
            schema = PATCHABLE.get((str(args.get("service")), str(args.get("key"))))
            valid = schema is not None and not validation_error(
                {"type": "object", "properties": {"value": schema}}, {"value": old}
            )
            if not valid or old == args.get("value"):
                return None  # nothing to go back to, or a value the key does not allow
            return ("patch_config", {"service": args["service"], "key": args["key"], "value": old})
        if action == "scale_workers":
            match = re.match(r"workers scaled from (\d+) to ", output)
            if match and 1 <= int(match.group(1)) <= MAX_WORKERS and int(match.group(1)) != args.get("count"):
                return ("scale_workers", {"count": int(match.group(1))})
        return None

    # --- actions ---------------------------------------------------------------------------------

    def _restart_service(self, service: str) -> str:
        start = time.monotonic()
        self._lab.restart(service)
        names = ", ".join(self._lab.process_names(service))
        return f"{service} restarted in {time.monotonic() - start:.1f}s: {names}"

    def _rollback_deploy(self, service: str) -> str:
        previous, target = self._lab.rollback(service, actor=ACTOR)
        return f"{service} rolled back from {previous} to {target} and restarted"

    def _scale_workers(self, count: int) -> str:
        previous = self._lab.scale_workers(count, actor=ACTOR)
        return f"workers scaled from {previous} to {count}"

    def _patch_config(self, service: str, key: str, value: Any) -> str:
        schema = PATCHABLE.get((service, key))
        if schema is None:
            raise PermissionError(f"{service}.{key} is not an allow-listed config key")
        error = validation_error({"type": "object", "properties": {"value": schema}}, {"value": value})
        if error:
            raise PermissionError(f"{service}.{key}: {error}")
        old = self._lab.set_config_key(service, key, value, actor=ACTOR)
        self._lab.restart(service)
        return f"{service}.{key}: {old!r} -> {value!r}; {service} restarted"

    def _clear_quota_folder(self, folder: str) -> str:
        files, freed = self._lab.clear_spool()
        return f"{folder}: deleted {files} files, freed {freed} bytes"
