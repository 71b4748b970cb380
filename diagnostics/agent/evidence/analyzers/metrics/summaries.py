"""Plain-text usage summaries -> error rate, latency, full disks, CPU hogs: ``key=value`` request
summaries, disk usage rows (``df`` or a quota), per-process CPU tables."""

from __future__ import annotations

from diagnostics import conf as diagnostics_conf
from diagnostics.agent import rx
from diagnostics.agent.evidence.analyzers.base import AnalysisState, Analyzer, ToolOutput, register
from diagnostics.agent.evidence.analyzers.metrics.baselines import objective_s
from diagnostics.agent.findings import Finding, Remedy, Severity

_SECTION = rx.compile(r"^==\s*([\w.-]+)\s*:?", rx.MULTILINE)
_KV = rx.compile(r"\b(error_ratio|p50_ms|p95_ms|p99_ms|errors_5xx|requests)=([\d.]+)")


def _over_objective(values: dict[str, float], objective: float | None) -> str:
    """The lowest quantile of a summary over the alert's latency objective (seconds), said, or ''."""
    for key in ("p50_ms", "p95_ms", "p99_ms"):
        if objective is not None and key in values and values[key] / 1000 >= objective:
            return (
                f"{key.removesuffix('_ms')} {values[key]:.0f} ms is over the alert's objective of "
                f"{objective * 1000:.0f} ms"
            )
    return ""


@register
class MetricsSummaryAnalyzer(Analyzer):
    """``key=value`` request summaries (``requests=120 errors_5xx=30 error_ratio=0.25 p95_ms=2400``)."""

    name = "metrics_summary"

    def applies(self, out: ToolOutput) -> bool:
        return _KV.search(out.text) is not None

    def analyze(self, out: ToolOutput, state: AnalysisState) -> list[Finding]:
        error_threshold = diagnostics_conf.get().analyzers.error_rate
        latency_ms = diagnostics_conf.get().analyzers.latency_s * 1000
        objective = objective_s(state)
        findings = []
        default = str(out.params.get("service") or out.params.get("name") or "")
        for line in out.text.splitlines():
            values = {k: float(v) for k, v in _KV.findall(line)}
            if not values:
                continue
            section = _SECTION.match(line)
            target = section.group(1) if section else default
            if "requests" in values and target:  # counted since the process started (a counter)
                state.fact_dict("request_counts")[target] = (values["requests"], values.get("p50_ms"))
            ratio = values.get("error_ratio")
            if ratio is not None and ratio >= error_threshold and values.get("requests", 10) >= 10:
                findings.append(
                    Finding(
                        "error_rate",
                        f"Error-rate spike in {target or 'the service'}: {ratio:.0%} of requests fail with "
                        f"HTTP 5xx ({values.get('errors_5xx', 0):.0f} of {values.get('requests', 0):.0f}).",
                        Severity.CRITICAL,
                        target,
                        line.strip()[:200],
                        66,
                        remedy=Remedy(("rollback", "restart"), target, {}, f"roll back or restart {target}"),
                    )
                )
            p95 = values.get("p99_ms") or values.get("p95_ms")
            over = _over_objective(values, objective)
            if over:
                findings.append(
                    Finding(
                        "high_latency",
                        f"High latency in {target or 'the service'}: {over}.",
                        Severity.WARNING,
                        target,
                        line.strip()[:200],
                        60,
                        remedy=Remedy(("rollback", "restart"), target, {}, f"roll back or restart {target}"),
                    )
                )
            elif p95 is not None and p95 >= latency_ms:
                findings.append(
                    Finding(
                        "high_latency",
                        f"High latency in {target or 'the service'}: p95 {p95:.0f} ms (threshold "
                        f"{latency_ms:.0f} ms).",
                        Severity.WARNING,
                        target,
                        line.strip()[:200],
                        58,
                        remedy=Remedy(("rollback", "restart"), target, {}, f"roll back or restart {target}"),
                    )
                )
        return findings


_PERCENT_USED = rx.compile(r"(\d+(?:\.\d+)?)%\s*(?:of quota|used|full)")
_DF_ROW = rx.compile(r"^(\S+)\s+\S+\s+\S+\s+\S+\s+(\d+)%\s+(\S+)$")


def _usage_rows(text: str) -> list[tuple[str, float]]:
    rows = []
    for line in text.splitlines():
        if "%" not in line or len(line) > 500:
            continue
        if match := _PERCENT_USED.search(line):
            rows.append((line.split()[0], float(match.group(1))))
        elif match := _DF_ROW.match(line.strip()):
            rows.append((match.group(3), float(match.group(2))))
    return rows


@register
class DiskUsageAnalyzer(Analyzer):
    name = "disk_usage"

    def applies(self, out: ToolOutput) -> bool:
        return "%" in out.text and bool(_usage_rows(out.text))

    def analyze(self, out: ToolOutput, state: AnalysisState) -> list[Finding]:
        threshold = diagnostics_conf.get().analyzers.disk_percent
        findings = []
        seen: set[str] = set()
        rows = _usage_rows(out.text)
        for where, used in rows:
            if used < threshold or where in seen:
                continue
            seen.add(where)
            folder = str(out.params.get("folder") or where)
            findings.append(
                Finding(
                    "disk_full",
                    f"The disk space of {where} is {used:.0f}% used (threshold {threshold:.0f}%): writes "
                    "will fail when it is full.",
                    Severity.CRITICAL if used >= 99 else Severity.WARNING,
                    f"disk/{where}",
                    f"{where} {used:.1f}%",
                    78,
                    "Free space (delete old files) or grow the volume/quota.",
                    Remedy(
                        ("clear_quota_folder", "clear", "clean_disk", "cleanup", "free_disk"),
                        folder,
                        {"folder": folder},
                        f"free space in {folder}",
                    ),
                )
            )
        return findings


_TOP_ROW = rx.compile(r"^(\S+)\s+(\d+)\s+(\d+(?:\.\d+)?)\s+(\d+(?:\.\d+)?)\s+\d+\s*$", rx.MULTILINE)


@register
class ProcessTopAnalyzer(Analyzer):
    """Per-process CPU% tables (``NAME PID CPU% RSS UPTIME``): a process burning a whole CPU."""

    name = "process_top"

    def applies(self, out: ToolOutput) -> bool:
        return "CPU%" in out.text and _TOP_ROW.search(out.text) is not None

    def analyze(self, out: ToolOutput, state: AnalysisState) -> list[Finding]:
        # A busy loop in a Python thread shows at 60-90% (it shares the GIL with the serving threads);
        # on a machine whose cores are busy with other work it gets less, so a process that burns
        # many times the CPU of every other one is flagged too (an outlier, not a level).
        threshold = diagnostics_conf.get().analyzers.cpu_percent
        outlier = diagnostics_conf.get().analyzers.cpu_outlier_percent
        rows = [(name, pid, float(cpu)) for name, pid, cpu, _rss in _TOP_ROW.findall(out.text)]
        findings = []
        for name, pid, cpu in rows:
            others = max([c for n, _p, c in rows if n != name] or [0.0])
            if cpu < threshold and not (len(rows) >= 3 and cpu >= outlier and cpu >= 5 * max(others, 1.0)):
                continue
            findings.append(
                Finding(
                    "cpu_saturation",
                    f"Process {name} uses {cpu:.0f}% CPU (a CPU hog or a busy loop; the busiest other "
                    f"process uses {others:.0f}%).",
                    Severity.WARNING,
                    f"process/{name}",
                    f"{name} pid {pid} CPU {cpu:.1f}%",
                    64,
                    f"Find what {name} is busy with; restart it if it is stuck.",
                    Remedy(("restart",), name.split("_")[0], {}, f"restart {name}"),
                )
            )
        return findings
