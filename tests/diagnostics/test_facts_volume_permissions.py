"""A non-root process denied a write on a volume owned by root, without fsGroup (issue 39, round nine): the
path's mount and its claim from the pod's describe, the user and fsGroup from the workload's manifest, in
Node's and Go's wordings; no finding on an emptyDir, or when fsGroup is set. Names appear in no case."""

from __future__ import annotations

from diagnostics.agent.evidence.analyzers import AnalysisState, ToolOutput, analyze
from diagnostics.agent.findings import Finding
from diagnostics.agent.request.subject import AlertContext

_DESCRIBE = """Name:             gallery-5f6d7c8b9-abcde
Namespace:        photos
Controlled By:    ReplicaSet/gallery-5f6d7c8b9
Containers:
  gallery:
    State:          Waiting
      Reason:       CrashLoopBackOff
    Mounts:
      /srv/media from media (rw)
      /cache from scratch (rw)
Volumes:
  media:
    Type:       PersistentVolumeClaim (a reference to a PersistentVolumeClaim in the same namespace)
    ClaimName:  gallery-media
  scratch:
    Type:       EmptyDir (a temporary directory that shares a pod's lifetime)
"""


def _deployment(fs_group: str = "") -> str:
    group = f"\n        fsGroup: {fs_group}" if fs_group else ""
    return f"""apiVersion: apps/v1
kind: Deployment
metadata:
  name: gallery
  namespace: photos
spec:
  template:
    spec:
      securityContext:
        runAsUser: 2000{group}
      containers:
      - name: gallery
        image: registry.test/gallery:1.0
"""


def _log(text: str) -> ToolOutput:
    return ToolOutput("fetch_pod_logs", {"pod_name": "gallery-5f6d7c8b9-abcde", "namespace": "photos"}, text)


def _run(*outs: ToolOutput) -> list[Finding]:
    state = AnalysisState(AlertContext())
    found: list[Finding] = []
    for out in outs:
        found += analyze(out, state)
    return [f for f in found if f.kind == "volume_permission_non_root"]


def test_node_and_go_wordings_name_the_user_the_claim_and_the_mount():
    for line, path in (
        ("Error: EACCES: permission denied, mkdir '/srv/media/thumbs'", "/srv/media/thumbs"),
        ("fatal: mkdir /srv/media/originals: permission denied", "/srv/media/originals"),
    ):
        (finding,) = _run(
            ToolOutput("kubectl_describe", {}, _DESCRIBE),
            _log(f"starting\n{line}\n"),
            ToolOutput("kubectl_get_yaml", {}, _deployment()),
        )
        assert "runs as user 2000 with no fsGroup" in finding.summary
        assert "volume gallery-media mounted at /srv/media is not writable" in finding.summary
        assert f"creating {path} fails with permission denied" in finding.summary
        assert finding.summary.startswith("The pods of gallery crash at start")


def test_no_finding_on_an_empty_dir_or_with_fs_group():
    empty_dir = _run(
        ToolOutput("kubectl_describe", {}, _DESCRIBE),
        _log("PermissionError: [Errno 13] Permission denied: '/cache/x'\n"),
        ToolOutput("kubectl_get_yaml", {}, _deployment()),
    )
    with_group = _run(
        ToolOutput("kubectl_describe", {}, _DESCRIBE),
        _log("PermissionError: [Errno 13] Permission denied: '/srv/media/x'\n"),
        ToolOutput("kubectl_get_yaml", {}, _deployment("2000")),
    )
    assert empty_dir == [] and with_group == []
