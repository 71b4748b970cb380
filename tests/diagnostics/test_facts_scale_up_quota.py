"""Pending pods the cluster autoscaler cannot get nodes for because of a cloud quota (issue 39, round
seven); a listing of Pending pods leads to one of them. Names and providers' wordings appear in no case."""

from __future__ import annotations

from diagnostics.agent.evidence.analyzers import AnalysisState, ToolOutput, analyze
from diagnostics.agent.findings import Finding
from diagnostics.agent.request.subject import AlertContext, Subject

_GCP = (
    "Name:         render-5f6d7c8b9-zz1aa\n"
    "Namespace:    video\n"
    "Status:       Pending\n"
    "Events:\n"
    "  Type     Reason             Age                From                Message\n"
    "  ----     ------             ----               ----                -------\n"
    "  Normal   TriggeredScaleUp   20m                cluster-autoscaler  pod triggered scale-up: "
    "[{gke-prod-gpu-pool-1a2b 2->5 (max: 8)}]\n"
    "  Warning  FailedScaleUp      1m (x5 over 19m)   cluster-autoscaler  Node scale up in zones "
    "us-central1-b associated with this pod failed: GCE quota exceeded. "
    "Error: QUOTA_EXCEEDED Quota 'NVIDIA_T4_GPUS' exceeded.  Limit: 4.0 in region us-central1.\n"
    "  Warning  FailedScheduling   21m                default-scheduler   0/6 nodes are available: "
    "6 Insufficient nvidia.com/gpu.\n"
)


def _quota(*outs: ToolOutput) -> tuple[AnalysisState, list[Finding]]:
    subject = Subject(name="nightly", namespace="video", names=["nightly"])
    state = AnalysisState(AlertContext(subject=subject))
    found: list[Finding] = []
    for out in outs:
        found += analyze(out, state)
    return state, [f for f in found if f.kind == "scale_up_quota_exceeded"]


def test_a_cloud_quota_refusal_keeps_the_pods_pending():
    _, (finding,) = _quota(ToolOutput("kubectl_describe", {"kind": "pod"}, _GCP))
    assert "cannot add nodes to node group gke-prod-gpu-pool-1a2b" in finding.summary
    assert "quota of 4 is used up (QUOTA_EXCEEDED)" in finding.summary
    assert "the video pods stay Pending on insufficient nvidia.com/gpu" in finding.summary


def test_capacity_without_a_quota_error_is_not_a_quota_and_pending_pods_are_led_to():
    listing = "NAME   READY   STATUS    RESTARTS   AGE\nrender-a   0/1   Pending   0   5m\n" + (
        "render-b   1/1   Running   0   5m\n"
    )
    state, found = _quota(
        ToolOutput("kubectl_get_by_kind_in_namespace", {"kind": "pod", "namespace": "video"}, listing),
        ToolOutput(
            "kubectl_describe",
            {},
            _GCP.replace("QUOTA_EXCEEDED Quota 'NVIDIA_T4_GPUS' exceeded", "ZONE_RESOURCE_POOL_EXHAUSTED"),
        ),
    )
    assert found == []
    assert any(lead.obj.name == "render-a" for lead in state.leads)
    assert not any(lead.obj.name == "render-b" for lead in state.leads)
