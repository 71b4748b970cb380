"""A built-in API version a Kubernetes upgrade removed, named by an upgrade's "no matches for kind" error:
not a missing CRD. Names appear in no case."""

from __future__ import annotations

from diagnostics.agent.evidence.analyzers import AnalysisState, ToolOutput, analyze
from diagnostics.agent.evidence.analyzers.removed_apis import removed_version
from diagnostics.agent.findings import Finding
from diagnostics.agent.request.subject import AlertContext

RELEASE = """apiVersion: helm.toolkit.fluxcd.io/v2
kind: HelmRelease
metadata:
  name: billing-jobs
  namespace: finance
status:
  lastAttemptedRevision: 2.0.0
  lastAppliedRevision: 1.9.4
  conditions:
  - type: Ready
    status: "False"
    reason: UpgradeFailed
    message: 'Helm upgrade failed: resource mapping not found for name: "nightly" namespace: "finance"
      from "": no matches for kind "{kind}" in version "{version}" ensure CRDs are installed first'
"""


def _findings(kind: str, version: str) -> list[Finding]:
    out = ToolOutput("kubectl_get_yaml", {"kind": "helmrelease"}, RELEASE.format(kind=kind, version=version))
    state = AnalysisState(AlertContext())
    state.record(out)
    return analyze(out, state)


def test_a_removed_built_in_version_is_named_with_its_release_and_the_revision_that_stays():
    found = _findings("CronJob", "batch/v1beta1")
    (removed,) = [f for f in found if f.kind == "removed_api_version"]
    assert "HelmRelease billing-jobs" in removed.summary and "apiVersion batch/v1beta1" in removed.summary
    assert "removed in Kubernetes 1.25" in removed.summary and "stays at chart 1.9.4" in removed.summary
    assert "batch/v1" in removed.fix and removed.rank >= 90
    assert not [f for f in found if f.kind == "crd_missing"]


def test_a_custom_resource_version_is_still_a_missing_crd():
    found = _findings("Kafka", "kafka.strimzi.io/v1beta2")
    assert not [f for f in found if f.kind == "removed_api_version"]
    assert [f for f in found if f.kind == "crd_missing"]
    assert removed_version('no matches for kind "Ingress" in version "extensions/v1beta1"')
    assert removed_version('no matches for kind "Ingress" in version "networking.k8s.io/v1"') is None
