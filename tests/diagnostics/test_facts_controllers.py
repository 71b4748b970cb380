"""Issue 39, second round: what Kubernetes' controllers say in an object's status, read by its meaning.

A PodDisruptionBudget that allows no disruption, a CronJob skipping its schedules behind a run that never
ends, abnormal-true conditions (an HPA capped at its maximum, a namespace whose deletion waits on
finalizers, with the timestamps ``describe`` prints for some kinds) and alerts named by a budget's or
a namespace's label. Names appear in no case."""

from __future__ import annotations

from diagnostics.agent.evidence.analyzers.kubernetes.conditions import Condition, conditions_of
from diagnostics.agent.request.subject import subject_from_labels
from tests.support.findings import findings_of, kinds

PDB = """Name:           vault-quorum
Namespace:      keys
Min available:  {floor}
Selector:       app=vault
Status:
    Allowed disruptions:  {allowed}
    Current:              {current}
    Desired:              {desired}
    Total:                5
Events:                   <none>
"""


def test_a_budget_that_asks_for_every_pod_blocks_every_eviction():
    findings, _ = findings_of(PDB.format(floor=5, allowed=0, current=5, desired=5))
    (finding,) = [f for f in findings if f.kind == "pdb_blocks_evictions"]
    assert "allows 0 disruptions" in finding.summary and "requires 5 pods available" in finding.summary
    assert "only 5 exist" in finding.summary and "evict" in finding.summary and finding.rank >= 80


def test_a_budget_short_of_healthy_pods_blocks_until_they_recover():
    findings, _ = findings_of(PDB.format(floor=4, allowed=0, current=3, desired=4))
    (finding,) = [f for f in findings if f.kind == "pdb_blocks_evictions"]
    assert "only 3 are healthy" in finding.summary and "recover" in finding.summary


def test_a_budget_with_room_says_nothing():
    findings, _ = findings_of(PDB.format(floor=3, allowed=2, current=5, desired=3))
    assert "pdb_blocks_evictions" not in kinds(findings)


CRONJOB = """Name:                          tally
Namespace:                     counts
Schedule:                      */30 * * * *
Concurrency Policy:            {policy}
Suspend:                       {suspend}
Last Schedule Time:            Fri, 04 Dec 2026 06:00:00 +0000
Active Jobs:                   {active}
Events:
  Type     Reason            Age               From                Message
  ----     ------            ----              ----                -------
{events}
"""
SKIPPED = (
    "  Warning  JobAlreadyActive  3m (x40 over 20h)  cronjob-controller  "
    "Not starting job because prior execution is running and concurrency policy is Forbid"
)


def test_a_cronjob_behind_a_run_that_never_ends_starts_nothing():
    text = CRONJOB.format(policy="Forbid", suspend="False", active="tally-29410000", events=SKIPPED)
    findings, state = findings_of(text)
    (finding,) = [f for f in findings if f.kind == "cronjob_blocked_by_active_run"]
    assert "tally-29410000 is still running" in finding.summary and "Forbid" in finding.summary
    assert any(lead.obj.name == "tally-29410000" for lead in state.leads)


def test_a_suspended_cronjob_is_said_suspended():
    text = CRONJOB.format(policy="Allow", suspend="True", active="<none>", events="  <none>")
    findings, _ = findings_of(text)
    assert kinds(findings) == {"cronjob_suspended"}


def test_abnormal_true_conditions_fail_and_times_are_skipped():
    text = """Name:         scratch-7
Labels:       kubernetes.io/metadata.name=scratch-7
Status:       Terminating
Conditions:
  Type                          Status  LastTransitionTime               Reason                Message
  ----                          ------  ------------------               ------                -------
  NamespaceDeletionContentFailure  False   Fri, 04 Dec 2026 01:02:03 +0000  ContentDeleted  All deleted
  NamespaceFinalizersRemaining  True    Fri, 04 Dec 2026 01:02:03 +0000  SomeFinalizersRemain  {message}
""".format(
        message="Some content in the namespace has finalizers remaining: gizmos.acme.dev/drain in 4 resource "
        "instances"
    )
    conditions = conditions_of(text)
    assert [(c.type, c.reason, c.failing) for c in conditions] == [
        ("NamespaceDeletionContentFailure", "ContentDeleted", False),
        ("NamespaceFinalizersRemaining", "SomeFinalizersRemain", True),
    ]
    findings, _ = findings_of(text, params={"kind": "namespace", "name": "scratch-7"})
    (finding,) = [f for f in findings if f.kind == "condition_failing"]
    assert "stays Terminating" in finding.summary and "4 gizmos.acme.dev resources" in finding.summary
    assert "gizmos.acme.dev/drain" in finding.summary
    assert Condition("ScalingLimited", "True").failing and not Condition("AbleToScale", "True").failing


def test_an_hpa_at_its_maximum_says_its_numbers():
    text = """Name:                                                  dial
Namespace:                                             tone
Reference:                                             Deployment/dial
Metrics:                                               ( current / target )
  resource memory on pods  (as a percentage of request):  140% (700Mi) / 80%
Min replicas:                                          1
Max replicas:                                          4
Deployment pods:                                       4 current / 4 desired
Conditions:
  Type            Status  Reason            Message
  ----            ------  ------            -------
  AbleToScale     True    ReadyForNewScale  recommended size matches current size
  ScalingLimited  True    TooManyReplicas   the desired replica count is more than the maximum replica count
Events:           <none>
"""
    findings, _ = findings_of(text, params={"kind": "horizontalpodautoscaler"})
    (finding,) = [f for f in findings if f.kind == "condition_failing"]
    assert "maximum of 4 replicas" in finding.summary and "140% (700Mi) of its 80% target" in finding.summary


def test_alerts_named_by_a_budget_or_only_a_namespace():
    subject = subject_from_labels(
        {"alertname": "X", "namespace": "keys", "poddisruptionbudget": "vault-quorum"}
    )
    assert (subject.kind, subject.name) == ("poddisruptionbudget", "vault-quorum")
    subject = subject_from_labels({"alertname": "KubeNamespaceStuck", "namespace": "scratch-7"})
    assert (subject.kind, subject.name) == ("namespace", "scratch-7")
    # the exporter's own pod label is skipped, and the alert is still not about the namespace
    subject = subject_from_labels(
        {"alertname": "KubePodCrashLooping", "namespace": "obs", "pod": "node-exporter-x1y2z", "job": "k"}
    )
    assert subject.kind != "namespace"
