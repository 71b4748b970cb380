"""A finding that waits a few reads for its evidence (analyzers/waits.py): which reads count, where the
wait starts again, and when it is over; and, through two analyzers, that a failed or empty read is no
read waited for where the analyzer counts only reads with data, while one that counts every read does."""

from __future__ import annotations

from typing import Any

from diagnostics.agent.evidence.analyzers import AnalysisState, ToolOutput, analyze
from diagnostics.agent.evidence.analyzers.waits import note_wait, start_wait, still_waiting, waited
from diagnostics.agent.findings import Finding
from diagnostics.agent.request.subject import AlertContext

_DATA = ToolOutput("kubectl_get_by_kind_in_namespace", {}, "NAME  AGE\nx  1d\n")
_EMPTY = ToolOutput("kubectl_get_by_kind_in_namespace", {}, "", no_data=True)
_FAILED = ToolOutput("kubectl_get_by_kind_in_namespace", {}, "error: the server is down", ok=False)


def test_only_reads_with_data_count_when_the_read_is_given():
    facts: dict[str, Any] = {}
    assert waited(facts) == 0 and still_waiting(facts, 0)
    assert note_wait(facts, _EMPTY) == 0 and note_wait(facts, _FAILED) == 0
    assert note_wait(facts, _DATA) == 1 and waited(facts) == 1
    assert note_wait(facts) == 2  # without the read, every read counts


def test_the_wait_is_over_past_its_limit_and_starts_again():
    facts: dict[str, Any] = {}
    for _ in range(2):
        note_wait(facts)
    assert still_waiting(facts, 2) and not still_waiting(facts, 1)
    start_wait(facts)
    assert waited(facts) == 0 and still_waiting(facts, 0)


_PAUSED = """apiVersion: helm.toolkit.fluxcd.io/v2
kind: HelmRelease
metadata:
  name: ledger
  namespace: fin
spec:
  suspend: true
"""


def _paused(*outs: ToolOutput) -> list[Finding]:
    state = AnalysisState(AlertContext())
    found: list[Finding] = []
    for out in (ToolOutput("kubectl_get_yaml", {}, _PAUSED), *outs):
        found += analyze(out, state)
    return [f for f in found if f.kind == "paused_rollout"]


def test_a_paused_release_waits_through_empty_and_failed_reads():
    # Its wait is 2 reads with data: any number of empty or failed ones does not end it.
    assert _paused(_EMPTY, _FAILED, _EMPTY, _FAILED, _DATA, _DATA) == []
    (finding,) = _paused(_EMPTY, _DATA, _FAILED, _DATA, _DATA)
    assert finding.summary.startswith("The HelmRelease ledger is paused (spec.suspend)")


_FORBIDDEN = (
    "2027-03-02T08:00:01Z E0302 reflector.go:138] leases.coordination.k8s.io is forbidden: User "
    '"system:serviceaccount:jobs:batch" cannot update resource "leases" in API group '
    '"coordination.k8s.io" in the namespace "jobs"\n'
)


def test_a_refusal_with_no_role_counts_every_read():
    state = AnalysisState(AlertContext())
    outs = [ToolOutput("fetch_pod_logs", {"pod_name": "batch-1", "namespace": "jobs"}, _FORBIDDEN)]
    found: list[Finding] = []
    for out in [*outs, _FAILED, _EMPTY, _FAILED, _EMPTY]:
        found += analyze(out, state)
    (finding,) = [f for f in found if f.kind == "rbac_forbidden"]
    assert "its Role or ClusterRole does not grant it" in finding.summary
