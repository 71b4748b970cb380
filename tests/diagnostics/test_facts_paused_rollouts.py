"""A paused Deployment whose new template never rolls out, and a suspended Flux object (issue 39, round
nine); no finding for a Deployment progressing normally."""

from __future__ import annotations

from diagnostics.agent.evidence.analyzers import AnalysisState, ToolOutput, analyze
from diagnostics.agent.findings import Finding
from diagnostics.agent.request.subject import AlertContext

_DESCRIBE = """Name:                   billing
Namespace:              fin
Replicas:               2 desired | 0 updated | 2 total | 2 available | 0 unavailable
Pod Template:
  Containers:
   billing:
    Image:      registry.test/billing:5.0.0
Conditions:
  Type           Status   Reason
  ----           ------   ------
  Available      True     MinimumReplicasAvailable
  Progressing    Unknown  DeploymentPaused
OldReplicaSets:  billing-6b5c4d3e2 (2/2 replicas created)
NewReplicaSet:   <none>
Events:          <none>
"""
_MANIFEST = """apiVersion: apps/v1
kind: Deployment
metadata:
  name: billing
  namespace: fin
spec:
  paused: true
status:
  conditions:
  - type: Progressing
    status: Unknown
    reason: DeploymentPaused
    lastTransitionTime: "2027-03-04T05:06:07Z"
"""
_FLUX = """apiVersion: helm.toolkit.fluxcd.io/v2
kind: HelmRelease
metadata:
  name: ledger
  namespace: flux-apps
spec:
  suspend: true
"""


def _run(*outs: ToolOutput) -> list[Finding]:
    state = AnalysisState(AlertContext())
    found: list[Finding] = []
    for out in outs:
        found += analyze(out, state)
    return [f for f in found if f.kind == "paused_rollout"]


def test_a_paused_deployment_keeps_its_old_pods():
    (finding,) = _run(
        ToolOutput("kubectl_describe", {}, _DESCRIBE), ToolOutput("kubectl_get_yaml", {}, _MANIFEST)
    )
    assert finding.summary == (
        "The Deployment billing is paused (spec.paused, Progressing condition DeploymentPaused since "
        "2027-03-04 05:06): its template's new image registry.test/billing:5.0.0 was never rolled out, "
        "no new ReplicaSet exists and the 2 pods of the old ReplicaSet billing-6b5c4d3e2 keep running."
    )


def test_a_suspended_flux_release_after_the_wait():
    filler = [ToolOutput("kubectl_get_by_kind_in_namespace", {}, "NAME  AGE\nx  1d\n") for _ in range(3)]
    (finding,) = _run(ToolOutput("kubectl_get_yaml", {}, _FLUX), *filler)
    assert finding.summary.startswith("The HelmRelease ledger is paused (spec.suspend)")


def test_no_finding_while_progressing():
    text = _DESCRIBE.replace("Unknown  DeploymentPaused", "True     NewReplicaSetAvailable")
    assert _run(ToolOutput("kubectl_describe", {}, text)) == []
