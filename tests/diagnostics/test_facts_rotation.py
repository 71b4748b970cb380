"""logrotate skipping files (a sidecar's prefixed lines or a plain log): rotation stopped, and the claim
the files live on is named from the pod's mounts. Names appear in no case."""

from __future__ import annotations

from diagnostics.agent.evidence.analyzers import AnalysisState, ToolOutput, analyze
from diagnostics.agent.findings import Finding
from diagnostics.agent.request.subject import AlertContext

POD = """Name:         api-gw-2
Namespace:    front
Containers:
  envoy:
    Mounts:
      /srv/logs from trail (rw)
  rotator:
    Mounts:
      /srv/logs from trail (rw)
Volumes:
  trail:
    Type:       PersistentVolumeClaim (a reference to a PersistentVolumeClaim in the same namespace)
    ClaimName:  gw-trail
    ReadOnly:   false
Events:  <none>
"""
SKIP = (
    'error: skipping "/srv/logs/{f}" because parent directory has insecure permissions (It\'s world writable)'
)


def _read(state: AnalysisState, tool: str, text: str, **params: str) -> list[Finding]:
    out = ToolOutput(tool, dict(params), text)
    state.record(out)
    return analyze(out, state)


def test_a_sidecar_skipping_rotation_is_why_the_claim_of_the_log_mount_fills():
    state = AnalysisState(AlertContext())
    _read(state, "kubectl_describe", POD, kind="pod", name="api-gw-2", namespace="front")
    log = "\n".join(
        [
            "[pod/api-gw-2/rotator] 2026-07-01T00:00:00Z " + SKIP.format(f="envoy.log"),
            "[pod/api-gw-2/envoy] 2026-07-01T00:00:01Z GET / 200",
        ]
    )
    (finding,) = [
        f
        for f in _read(state, "fetch_pod_logs", log, pod_name="api-gw-2")
        if f.kind == "log_rotation_skipped"
    ]
    assert "PVC gw-trail fills" in finding.summary and "/srv/logs/envoy.log" in finding.summary
    assert "rotator sidecar skips" in finding.summary and "insecure permissions" in finding.summary
    assert finding.subject == "persistentvolumeclaim/gw-trail" and "[pod/" not in finding.evidence


def test_a_plain_logrotate_log_without_a_pod_describe_names_the_files_only():
    state = AnalysisState(AlertContext())
    log = SKIP.format(f="a.log") + "\n" + SKIP.format(f="b.log").replace("insecure permissions", "no owner")
    (finding,) = [f for f in _read(state, "fetch_pod_logs", log) if f.kind == "log_rotation_skipped"]
    assert "/srv/logs/a.log, /srv/logs/b.log" in finding.summary and "PVC" not in finding.summary


def test_rotation_that_works_says_nothing():
    log = "rotating pattern: /srv/logs/*.log  1048576 bytes\nrotating log /srv/logs/a.log, rotateCount is 5\n"
    assert not [
        f
        for f in _read(AnalysisState(AlertContext()), "fetch_pod_logs", log)
        if f.kind == "log_rotation_skipped"
    ]
