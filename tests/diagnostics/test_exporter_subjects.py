"""Issue 39, class 4: an alert about an exporter itself (its targets missing or down) is about the
exporter's workload, which its ``job`` label names, not about a node the prose mentions."""

from __future__ import annotations

from diagnostics.agent.request.subject import from_investigation, subject_from_labels


def test_an_alert_that_spells_its_exporter_is_about_that_exporter() -> None:
    absent = subject_from_labels({"alertname": "BlackboxExporterAbsent", "job": "blackbox-exporter"})
    assert absent.name == "blackbox-exporter"
    down = subject_from_labels(
        {"alertname": "KubeStateMetricsDown", "job": "kube-state-metrics", "namespace": "observability"}
    )
    assert (down.name, down.namespace) == ("kube-state-metrics", "observability")


def test_an_exporters_labels_on_other_alerts_still_name_nothing() -> None:
    # The exporter's job rides on a workload's series: the workload is the subject.
    stuck = subject_from_labels(
        {"alertname": "KubeStatefulSetReplicasMismatch", "job": "kube-state-metrics", "statefulset": "ledger"}
    )
    assert (stuck.kind, stuck.name) == ("statefulset", "ledger")
    assert "kube-state-metrics" not in stuck.names
    # An alert that only partly spells the exporter's name is not about it.
    assert subject_from_labels({"alertname": "NodeDiskFull", "job": "node-exporter"}).name != "node-exporter"


def test_prose_about_nodes_does_not_replace_the_exporter_the_labels_name() -> None:
    ctx = from_investigation(
        {
            "title": "HostExporterMissing",
            "description": "Targets missing on 2 of 6 hosts; host panels are blank.",
        },
        {
            "labels": {"alertname": "HostExporterMissing", "job": "host-exporter", "severity": "warning"},
            "annotations": {"description": "No host-exporter target on gpu-pool-a1, gpu-pool-b2."},
        },
    )
    assert ctx.subject.name == "host-exporter"
    assert ctx.subject.kind != "node"
