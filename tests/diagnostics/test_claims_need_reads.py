"""A finding names only what a read showed (issue 39: claims without reads). Every analyzer is walked over
partial evidence (one kind of read alone: metrics, a log, a listing) and no finding may name a Kubernetes
condition or container state that no output read shows. Names appear in no case."""

from __future__ import annotations

import json

import pytest

from diagnostics.agent.evidence.analyzers import AnalysisState, ToolOutput, analyze
from diagnostics.agent.request.subject import AlertContext, Subject

# Conditions and states an object reports about itself: only a read of it can show them.
CLAIMS = (
    "PIDPressure",
    "MemoryPressure",
    "DiskPressure",
    "NetworkUnavailable",
    "NotReady",
    "OOMKilled",
    "Evicted",
    "CrashLoopBackOff",
    "ImagePullBackOff",
    "SchedulingDisabled",
)


def _prom(*samples: tuple[str, dict[str, str], float]) -> str:
    result: list[dict[str, object]] = [
        {"metric": {"__name__": n} | labels, "value": [1_790_000_000, str(v)]} for n, labels, v in samples
    ]
    return json.dumps({"status": "success", "data": {"resultType": "vector", "result": result}})


PARTIAL = {
    "pid metrics alone": ToolOutput(
        "execute_prometheus_instant_query",
        {"query": "container_processes"},
        _prom(
            ("container_processes", {"node": "n-41", "namespace": "img", "pod": "resizer-q"}, 3800),
            ("container_processes", {"node": "n-41", "namespace": "web", "pod": "front-p"}, 30),
            ("node_processes_pids", {"instance": "n-41"}, 3900),
            ("node_processes_max_processes", {"instance": "n-41"}, 4096),
        ),
    ),
    "pid metrics of the subject's node without its limit": ToolOutput(
        "execute_prometheus_instant_query",
        {"query": "container_processes"},
        _prom(
            ("container_processes", {"node": "n-42", "namespace": "img", "pod": "resizer-r"}, 900),
            ("container_processes", {"node": "n-42", "namespace": "web", "pod": "front-s"}, 20),
        ),
    ),
    "an allocation failure in a log": ToolOutput(
        "fetch_pod_logs",
        {"pod_name": "resizer-q", "namespace": "img"},
        "2026-02-01T10:00:00Z ERROR worker: mmap failed: Cannot allocate memory\n"
        "2026-02-01T10:00:05Z ERROR worker: mmap failed: Cannot allocate memory\n",
    ),
    "a runtime out of memory in a log": ToolOutput(
        "fetch_pod_logs",
        {"pod_name": "resizer-q", "namespace": "img"},
        '2026-02-01T10:00:00Z Exception in thread "main" java.lang.OutOfMemoryError: Java heap space\n',
    ),
    "a pod listing": ToolOutput(
        "kubectl_get_by_kind_in_namespace",
        {"kind": "pod", "namespace": "img"},
        "NAME        READY   STATUS    RESTARTS   AGE\nresizer-q   0/1     Pending   0          5m\n",
    ),
}


@pytest.mark.parametrize("case", sorted(PARTIAL))
def test_no_finding_names_a_condition_no_read_showed(case: str):
    out = PARTIAL[case]
    subject = Subject(kind="node", name="n-42", names=["n-42", "resizer-q"])
    state = AnalysisState(AlertContext(subject=subject))
    state.record(out)
    findings = analyze(out, state)
    for finding in findings:
        said = f"{finding.summary} {finding.fix}"
        unread = [c for c in CLAIMS if c.lower() in said.lower() and c.lower() not in out.text.lower()]
        assert not unread, (finding.kind, unread, finding.summary)


def test_the_walk_sees_findings_so_it_can_fail():
    """The partial reads above do produce findings: the property is checked on something."""
    produced = set()
    for case in ("pid metrics alone", "an allocation failure in a log"):
        state = AnalysisState(AlertContext())
        state.record(PARTIAL[case])
        produced |= {f.kind for f in analyze(PARTIAL[case], state)}
    assert "node_pids_exhausted" in produced and "oom_killed" in produced
