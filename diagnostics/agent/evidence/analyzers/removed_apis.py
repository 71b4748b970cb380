"""A manifest that uses a built-in API version the cluster no longer serves.

When a chart or manifest names a kind in an API version the API server does not serve, the client (Helm,
kubectl, a GitOps controller) fails with ``no matches for kind "K" in version "G/V"``. For a custom
resource that means its CRD is not installed; for a built-in group it means the version was removed by a
Kubernetes upgrade (the deprecated API migration guide: e.g. ``policy/v1beta1`` in 1.25), and the fix is
the chart's apiVersion, not a CRD. The last applied revision (``status.lastAppliedRevision`` of a GitOps
release) is what keeps running.
"""

from __future__ import annotations

from diagnostics.agent import rx
from diagnostics.agent.evidence.analyzers.base import AnalysisState, Analyzer, ToolOutput, register
from diagnostics.agent.evidence.analyzers.kubernetes.manifests import manifest_of
from diagnostics.agent.findings import Finding, Severity

# group/version -> (Kubernetes release that stopped serving it, the version to use instead)
REMOVED: dict[str, tuple[str, str]] = {
    "extensions/v1beta1": ("1.16 (Ingress: 1.22)", "apps/v1 or networking.k8s.io/v1"),
    "apps/v1beta1": ("1.16", "apps/v1"),
    "apps/v1beta2": ("1.16", "apps/v1"),
    "networking.k8s.io/v1beta1": ("1.22", "networking.k8s.io/v1"),
    "apiextensions.k8s.io/v1beta1": ("1.22", "apiextensions.k8s.io/v1"),
    "admissionregistration.k8s.io/v1beta1": ("1.22", "admissionregistration.k8s.io/v1"),
    "rbac.authorization.k8s.io/v1beta1": ("1.22", "rbac.authorization.k8s.io/v1"),
    "certificates.k8s.io/v1beta1": ("1.22", "certificates.k8s.io/v1"),
    "coordination.k8s.io/v1beta1": ("1.22", "coordination.k8s.io/v1"),
    "batch/v1beta1": ("1.25", "batch/v1"),
    "discovery.k8s.io/v1beta1": ("1.25", "discovery.k8s.io/v1"),
    "events.k8s.io/v1beta1": ("1.25", "events.k8s.io/v1"),
    "autoscaling/v2beta1": ("1.25", "autoscaling/v2"),
    "policy/v1beta1": ("1.25", "policy/v1 (PodSecurityPolicy has no successor: Pod Security Admission)"),
    "node.k8s.io/v1beta1": ("1.25", "node.k8s.io/v1"),
    "autoscaling/v2beta2": ("1.26", "autoscaling/v2"),
    "flowcontrol.apiserver.k8s.io/v1beta1": ("1.26", "flowcontrol.apiserver.k8s.io/v1"),
    "flowcontrol.apiserver.k8s.io/v1beta2": ("1.29", "flowcontrol.apiserver.k8s.io/v1"),
}
NO_MATCH = rx.compile(r"no matches for kind \"([A-Za-z]+)\" in version \"([a-z0-9.]+/[a-z0-9]+|v1\w*)\"")
_APPLIED = rx.compile(r"lastAppliedRevision\"?:\s*\"?([\w.+-]+)")


def removed_version(text: str) -> tuple[str, str, str, str] | None:
    """(kind, group/version, removed in, use instead) of the first removed built-in version in ``text``."""
    for kind, version in NO_MATCH.findall(text):
        if version in REMOVED:
            return kind, version, *REMOVED[version]
    return None


@register
class RemovedApiVersionAnalyzer(Analyzer):
    name = "k8s_removed_api_version"

    def applies(self, out: ToolOutput) -> bool:
        return "no matches for kind" in out.text

    def analyze(self, out: ToolOutput, state: AnalysisState) -> list[Finding]:
        removed = removed_version(out.text)
        if removed is None:
            return []
        kind, version, since, instead = removed
        obj = manifest_of(out.text)
        meta = obj.get("metadata") if obj else None
        name = str(meta.get("name") or "") if isinstance(meta, dict) else ""
        who = f"The {obj['kind']} {name}" if obj and name else "The release"
        applied = _APPLIED.search(out.text)
        stays = f", so it stays at chart {applied.group(1)}" if applied else ""
        namespace = str(meta.get("namespace") or "") if isinstance(meta, dict) else ""
        return [
            Finding(
                "removed_api_version",
                f"{who} fails to upgrade: its chart declares a {kind} with apiVersion {version}, which the "
                f"cluster no longer serves (removed in Kubernetes {since}; served now: {instead}){stays}. "
                "No CRD is missing: the chart must use the served version.",
                Severity.CRITICAL,
                f"{obj['kind'].lower()}/{namespace}/{name}" if obj and name else out.tool,
                f"no matches for kind {kind} in version {version}",
                90,
                f"Change the chart's {kind} to apiVersion {instead.split(' ', 1)[0]} (or use a chart version "
                "that does) and upgrade again.",
            )
        ]
