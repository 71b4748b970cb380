"""Read-only observation helpers shared by the lab, its read toolset and its health checks:
HTTP GETs, Prometheus text parsing, /proc sampling and one-shot Redis INFO/PING."""

from __future__ import annotations

import os
import re
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

_CLK_TCK = os.sysconf("SC_CLK_TCK")
_PAGE = os.sysconf("SC_PAGE_SIZE")
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)$")


@dataclass(frozen=True)
class HttpReply:
    status: int  # 0 when unreachable
    body: str
    ms: float


def http_get(url: str, timeout: float = 2.0) -> HttpReply:
    start = time.perf_counter()
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            body = response.read().decode(errors="replace")
            return HttpReply(response.status, body, (time.perf_counter() - start) * 1000)
    except urllib.error.HTTPError as exc:
        return HttpReply(exc.code, exc.read().decode(errors="replace"), (time.perf_counter() - start) * 1000)
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        return HttpReply(0, f"unreachable: {reason}", (time.perf_counter() - start) * 1000)


# --- Prometheus text format ----------------------------------------------------------------------

Samples = dict[tuple[str, str], float]


def parse_metrics(text: str) -> Samples:
    """{(metric name, label string): value} for every sample line."""
    samples: Samples = {}
    for line in text.splitlines():
        match = _SAMPLE.match(line.strip())
        if match:
            try:
                samples[(match.group(1), match.group(2) or "")] = float(match.group(3))
            except ValueError:
                continue
    return samples


def total(samples: Samples, name: str) -> float:
    return sum(value for (metric, _labels), value in samples.items() if metric == name)


def histogram_quantile(samples: Samples, name: str, q: float) -> float | None:
    """The q-quantile of a histogram summed over its series (linear interpolation in a bucket)."""
    buckets: dict[float, float] = {}
    for (metric, labels), value in samples.items():
        if metric != f"{name}_bucket":
            continue
        le = re.search(r'le="([^"]+)"', labels)
        if le:
            bound = float("inf") if le.group(1) == "+Inf" else float(le.group(1))
            buckets[bound] = buckets.get(bound, 0.0) + value
    if not buckets or buckets.get(float("inf"), 0.0) == 0:
        return None
    rank = q * buckets[float("inf")]
    lower_bound, lower_count = 0.0, 0.0
    for bound in sorted(buckets):
        count = buckets[bound]
        if count >= rank:
            if bound == float("inf"):
                return lower_bound
            span = count - lower_count
            return lower_bound + (bound - lower_bound) * ((rank - lower_count) / span if span else 1.0)
        lower_bound, lower_count = bound, count
    return None


def summarize_http(samples: Samples) -> str:
    requests = total(samples, "lab_http_requests_total")
    errors = total(samples, "lab_http_request_errors_total")
    p50 = histogram_quantile(samples, "lab_http_request_duration_seconds", 0.5)
    p95 = histogram_quantile(samples, "lab_http_request_duration_seconds", 0.95)
    ratio = errors / requests if requests else 0.0
    parts = [f"requests={requests:.0f}", f"errors_5xx={errors:.0f}", f"error_ratio={ratio:.3f}"]
    if p50 is not None and p95 is not None:
        parts += [f"p50_ms={p50 * 1000:.0f}", f"p95_ms={p95 * 1000:.0f}"]
    return " ".join(parts) + " (since process start)"


# --- /proc ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ProcStat:
    pid: int
    state: str
    pgid: int
    sid: int
    cpu_ticks: int
    rss_bytes: int


def proc_stat(pid: int) -> ProcStat | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw[raw.rindex(")") + 2 :].split()
    # fields[0] is field 3 of stat(5): state, ppid, pgrp, session, ..., utime (14), stime (15), rss (24)
    return ProcStat(
        pid=pid,
        state=fields[0],
        pgid=int(fields[2]),
        sid=int(fields[3]),
        cpu_ticks=int(fields[11]) + int(fields[12]),
        rss_bytes=int(fields[21]) * _PAGE,
    )


def alive(pid: int) -> bool:
    stat = proc_stat(pid)
    return stat is not None and stat.state != "Z"


def cpu_percent(pids: list[int], interval: float = 0.5) -> dict[int, float]:
    """CPU use of each pid over `interval` seconds (100 = one core busy)."""
    before = {pid: proc_stat(pid) for pid in pids}
    time.sleep(interval)
    out: dict[int, float] = {}
    for pid in pids:
        first, second = before[pid], proc_stat(pid)
        if first is not None and second is not None:
            out[pid] = 100.0 * (second.cpu_ticks - first.cpu_ticks) / _CLK_TCK / interval
    return out


def processes_where(predicate: Callable[[ProcStat], bool]) -> list[ProcStat]:
    """Live (non-zombie) processes for which predicate(ProcStat) is true."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            stat = proc_stat(int(entry))
            if stat is not None and stat.state != "Z" and predicate(stat):
                found.append(stat)
    return found


# --- Redis protocol, one command per connection ---------------------------------------------------


def resp_once(host: str, port: int, command: str, timeout: float = 1.0) -> str:
    """Send one inline command (PING or INFO only) and return the reply's text."""
    if command not in ("PING", "INFO"):
        raise PermissionError(f"{command} is not a read command")
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.sendall(f"{command}\r\n".encode())
        file = sock.makefile("rb")
        line = file.readline()
        if line.startswith(b"$"):
            size = int(line[1:-2])
            return file.read(size).decode(errors="replace") if size >= 0 else ""
        return line[1:-2].decode(errors="replace")
