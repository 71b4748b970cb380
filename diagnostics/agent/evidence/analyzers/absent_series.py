"""An ``absent(...)`` alert on a series that is gone while the thing it measures is fine.

``absent(v)`` fires when the selector matches no series. When ``v`` is a recording rule
(``level:metric:operations``, the Prometheus naming convention), the rule's input metric is the
``metric`` part (``job:http_requests:rate5m`` reads ``http_requests_total``); if the target still answers
(``up == 1``) and still exposes a metric of the same meaning under another name (a client library's
rename: ``http_server_requests_seconds_count``), the rule computes nothing for it and the alert fires
although the service serves. Read from the alert's own expression (a query that ran it), the samples of
the job, the rule's definition when the rules API was read, and the workload's image (its version).
"""

from __future__ import annotations

from collections import defaultdict

from diagnostics.agent import rx
from diagnostics.agent.evidence.analyzers.base import AnalysisState, Analyzer, ToolOutput, register
from diagnostics.agent.evidence.analyzers.metrics.samples import has_samples, parse_samples
from diagnostics.agent.findings import Finding, Severity

_ABSENT = rx.compile(r"absent(?:_over_time)?\(\s*([a-zA-Z_:][\w:]*)\s*(\{[^}]*\})?")
_MATCHER = rx.compile(r"(\w+)\s*=\s*\"([^\"]*)\"")
_RULE = rx.compile(r"\"name\":\s*\"([\w:]+)\",\s*\"query\":\s*\"([^\"]*)\"[^{}]*\"type\":\s*\"recording\"")
_INPUT = rx.compile(r"\b([a-zA-Z_][\w]*)\s*(?:\{|\[)")
_IMAGE_TAG = rx.compile(r"^\s*Image:\s*\S+:([\w.-]+)\s*$", rx.MULTILINE)
_NAME = rx.compile(r"^Name:\s+(\S+)", rx.MULTILINE)
_COUNTER = ("_total", "_count")


def _tokens(name: str) -> set[str]:
    return {
        t for t in rx.split(r"[_:]", name) if t and t not in ("total", "count", "seconds", "bucket", "sum")
    }


@register
class AbsentSeriesAnalyzer(Analyzer):
    name = "absent_series"

    def applies(self, out: ToolOutput) -> bool:
        return (
            has_samples(out.text) or "absent" in out.text or "Image:" in out.text or "recording" in out.text
        )

    def analyze(self, out: ToolOutput, state: AnalysisState) -> list[Finding]:
        facts = state.fact_dict("absent_series")
        targets: dict[str, dict[str, str]] = facts.setdefault("targets", {})
        for text in (str(out.params.get("query") or ""), out.text if out.tool == "alert" else ""):
            for match in _ABSENT.finditer(text):
                targets[match.group(1)] = dict(_MATCHER.findall(match.group(2) or ""))
        rules: dict[str, str] = facts.setdefault("rules", {})
        for match in _RULE.finditer(out.text.replace('\\"', '"')):
            rules[match.group(1)] = match.group(2)
        if (image := _IMAGE_TAG.search(out.text)) and (name := _NAME.search(out.text)):
            facts.setdefault("versions", {})[name.group(1)] = image.group(1)
        exposed: dict[str, dict[str, float]] = facts.setdefault("exposed", defaultdict(dict))
        if has_samples(out.text):
            for s in parse_samples(out.text):
                if s.name and s.labels.get("job"):
                    exposed.setdefault(s.labels["job"], {})[s.name] = s.value
        return self._verdicts(state, targets, rules, exposed)

    @staticmethod
    def _verdicts(
        state: AnalysisState,
        targets: dict[str, dict[str, str]],
        rules: dict[str, str],
        exposed: dict[str, dict[str, float]],
    ) -> list[Finding]:
        reported = state.fact_set("absent_series_reported")
        versions: dict[str, str] = state.fact_dict("absent_series").get("versions", {})
        findings: list[Finding] = []
        for series, matchers in targets.items():
            job = matchers.get("job") or matchers.get("service") or ""
            metrics = exposed.get(job) or {}
            if not job or series in metrics or f"{series}/{job}" in reported or metrics.get("up") != 1:
                continue
            parts = series.split(":")
            rule = rules.get(series, "")
            source = next(iter(_INPUT.findall(rule)), "") if rule else ""
            if not source and len(parts) == 3:
                source = parts[1] + "_total"
            if not source or source in metrics:
                continue
            wanted = _tokens(source)
            instead = max(
                (m for m in metrics if m.endswith(_COUNTER) and wanted & _tokens(m)),
                key=lambda m: len(wanted & _tokens(m)),
                default="",
            )
            if not instead:
                continue
            reported.add(f"{series}/{job}")
            version = f" {versions[job]}" if job in versions else ""
            kind = "the recording rule" if rule or len(parts) == 3 else "the query"
            findings.append(
                Finding(
                    "absent_series_renamed",
                    f"{job}{version} exposes the counter {instead} instead of {source}, so {kind} "
                    f"{series} has no series for it and the absent alert fires: the service is up (up == 1) "
                    "and serving requests.",
                    Severity.WARNING,
                    f"job/{job}",
                    f"{instead} present for job {job}; {source} absent; up 1",
                    86,
                    f"Make {kind} {series} read {instead} (or add a compatibility rule for {source}); the "
                    "service itself needs no fix.",
                )
            )
        return findings
