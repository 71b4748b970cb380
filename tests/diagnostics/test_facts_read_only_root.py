"""A write that fails with EROFS because the root filesystem is read-only (issue 39, round eight): the
failing path from the log in several runtimes' words, the setting from the pod manifest or the
admission policy's patch annotation, the mounts (a writable volume at the path clears it), the policy's
creation time against the ages of the pods that still run. Names and paths appear in no case."""

from __future__ import annotations

from diagnostics.agent.evidence.analyzers import AnalysisState, ToolOutput, analyze
from diagnostics.agent.findings import Finding
from diagnostics.agent.request.subject import AlertContext

_POD = "ledger-5f6a7b8c9d-qw3er"

_MANIFEST = """apiVersion: v1
kind: Pod
metadata:
  name: ledger-5f6a7b8c9d-qw3er
  namespace: books
spec:
  containers:
  - name: ledger
    image: registry.example/ledger:1.2.0
    securityContext:
      readOnlyRootFilesystem: true
    volumeMounts:
    - mountPath: /srv/conf
      name: conf
      readOnly: true
{extra}"""

_PATCH = "harden-pods.ro-root.kyverno.io: added /spec/containers/0/securityContext/readOnlyRootFilesystem"
_DESCRIBE = f"""Name:             ledger-5f6a7b8c9d-qw3er
Namespace:        books
Start Time:       Mon, 04 Jan 2027 10:00:00 +0000
Annotations:      policies.kyverno.io/last-applied-patches: {_PATCH}
Containers:
  ledger:
    Mounts:
      /srv/conf from conf (ro)
"""

_POLICY = """apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata:
  name: harden-pods
  creationTimestamp: "2027-01-03T09:00:00Z"
spec:
  rules:
  - name: ro-root
    mutate:
      patchStrategicMerge:
        spec:
          containers:
          - (name): "*"
            securityContext:
              readOnlyRootFilesystem: true
"""

_LISTING = """NAME                         READY   STATUS             RESTARTS      AGE
ledger-5f6a7b8c9d-qw3er      0/1     CrashLoopBackOff   4 (1m ago)    10m
ledger-7c8d9e0f1a-zx9cv      1/1     Running            0             3d
ledger-7c8d9e0f1a-po8iu      1/1     Running            0             2h
"""


def _run(*outs: ToolOutput) -> list[Finding]:
    state = AnalysisState(AlertContext())
    found: list[Finding] = []
    for out in outs:
        found += analyze(out, state)
    return [f for f in found if f.kind.startswith("read_only_root")]


def _log(text: str) -> ToolOutput:
    return ToolOutput("kubectl_previous_logs", {"pod_name": _POD, "namespace": "books"}, text)


def _yaml(extra: str = "") -> ToolOutput:
    return ToolOutput("kubectl_get_yaml", {"kind": "pod", "name": _POD}, _MANIFEST.format(extra=extra))


def test_each_runtimes_wording_names_the_path_and_the_setting():
    go = "2027/01/04 10:09:58 fatal: mkdir /var/lib/ledger/journal: read-only file system\n"
    node = "Error: EROFS: read-only file system, open '/home/node/.npm/_cacache/tmp'\n"
    nginx = (
        '2027/01/04 10:09:58 [emerg] 1#1: open() "/var/cache/nginx/client_temp" failed '
        "(30: Read-only file system)\n"
    )
    for line, path in (
        (go, "/var/lib/ledger/journal"),
        (node, "/home/node/.npm/_cacache/tmp"),
        (nginx, "/var/cache/nginx/client_temp"),
    ):
        (finding,) = _run(_yaml(), _log(line))
        assert f"ledger exits at start with errno 30 (EROFS, Read-only file system) creating {path}" in (
            finding.summary
        )
        assert "readOnlyRootFilesystem true, and no writable volume" in finding.summary


def test_the_policy_that_set_it_and_the_older_pods_that_still_run():
    java = "java.nio.file.FileSystemException: /opt/app/tmp/work: Read-only file system\n"
    found = _run(
        ToolOutput("kubectl_describe", {"kind": "pod", "name": _POD}, _DESCRIBE),
        _log(java),
        ToolOutput("kubectl_get_yaml", {"kind": "clusterpolicy", "name": "harden-pods"}, _POLICY),
        ToolOutput("kubectl_get_by_kind_in_namespace", {"kind": "pod"}, _LISTING),
    )
    root, policy, older = found
    assert "set by the Kyverno policy harden-pods (rule ro-root)" in root.summary and root.rank > 90
    assert "ClusterPolicy harden-pods, created 2027-01-03T09:00:00Z" in policy.summary
    # 3 days old: before the policy (created 25 h before the failing pod's start); 2 h old: after it.
    assert "(ledger-7c8d9e0f1a-zx9cv, 3d old)" in older.summary and "po8iu" not in older.summary


def test_a_writable_volume_at_the_path_or_a_writable_root_says_nothing():
    py = "OSError: [Errno 30] Read-only file system: '/data/cache/x'\n"
    emptydir = "    - mountPath: /data\n      name: scratch\n"
    assert _run(_yaml(emptydir), _log(py)) == []
    plain = _MANIFEST.replace("      readOnlyRootFilesystem: true\n", "").format(extra="")
    assert _run(ToolOutput("kubectl_get_yaml", {}, plain), _log(py)) == []
    assert _run(_yaml(), _log("INFO cache ready at /data/cache\n")) == []
