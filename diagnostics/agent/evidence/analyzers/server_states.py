"""What the datastore and broker analyzers share: a Prometheus vector grouped by the server it is about,
the time a log line carries, and the pod a read is about.

A server-side refusal (a datastore at its memory limit, a broker's resource alarm, a replica whose
applier stopped) shows in three places: the server's own metrics (its exporter's gauges), the server's
log (the moment the state was entered and left) and its clients' logs (the error the refusal returns).
Each analyzer reads whichever of them it is given; the facts it leaves on the state let the next read
complete the picture.
"""

from __future__ import annotations

from collections import defaultdict

from diagnostics.agent import rx
from diagnostics.agent.evidence.analyzers.base import AnalysisState, ToolOutput
from diagnostics.agent.evidence.analyzers.metrics.samples import Sample, has_samples, parse_samples
from diagnostics.agent.findings import ObjRef

_LINE_TIME = rx.compile(r"(\d{4}-\d{2}-\d{2})[T ](\d{2}:\d{2}:\d{2})")
SERVER_LABELS = ("pod", "instance", "node", "service", "job")


def samples_of(out: ToolOutput, prefixes: tuple[str, ...]) -> list[Sample]:
    """The samples of ``out`` whose metric name starts with one of ``prefixes`` (none: not metrics)."""
    if not any(p in out.text for p in prefixes) or not has_samples(out.text):
        return []
    return [s for s in parse_samples(out.text) if s.name.startswith(prefixes)]


def by_server(samples: list[Sample]) -> dict[tuple[str, str], dict[str, Sample]]:
    """(namespace, server) -> {metric name: sample}; the server is the first of SERVER_LABELS set."""
    grouped: dict[tuple[str, str], dict[str, Sample]] = defaultdict(dict)
    for sample in samples:
        server = next((sample.labels[k] for k in SERVER_LABELS if sample.labels.get(k)), "")
        grouped[(sample.labels.get("namespace", ""), server)][sample.name] = sample
    return grouped


def value(samples: dict[str, Sample], *names: str) -> float | None:
    """The first of ``names`` present (exporters renamed their gauges: slave -> replica)."""
    return next((samples[n].value for n in names if n in samples), None)


def line_time(line: str) -> str:
    """``YYYY-MM-DD HH:MM:SS`` of a log line that carries a date and time, else ""."""
    match = _LINE_TIME.search(line)
    return f"{match.group(1)} {match.group(2)}" if match else ""


def iso(moment: str) -> str:
    return moment.replace(" ", "T") + "Z" if moment else ""


def last_time(text: str) -> str:
    """The time of the last line of ``text`` that carries one."""
    for line in reversed(text.splitlines()):
        if moment := line_time(line):
            return moment
    return ""


def pod_of(out: ToolOutput) -> str:
    params = out.params
    return str(params.get("pod_name") or params.get("pod") or params.get("name") or "")


def lead_pod(state: AnalysisState, namespace: str, server: str, reason: str) -> None:
    """A pod named by a metric's labels is worth a look (its configuration, its own log)."""
    if server and ":" not in server and "." not in server:
        state.lead(ObjRef("pod", server, namespace), reason, 75)


def size_redis(value: float) -> str:
    """Bytes as Redis' configuration writes them: 2gb, 512mb, 64kb."""
    for unit, scale in (("gb", 2**30), ("mb", 2**20), ("kb", 2**10)):
        if value >= scale and abs(value / scale - round(value / scale)) < 0.01:
            return f"{round(value / scale)}{unit}"
    for unit, scale in (("gb", 2**30), ("mb", 2**20), ("kb", 2**10)):
        if value >= scale:
            return f"{value / scale:.1f}{unit}"
    return f"{value:.0f}b"
