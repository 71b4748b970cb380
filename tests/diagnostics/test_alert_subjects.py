"""Diagnosis that generalizes: an alert's subject and topics from any alert's labels, and its expression
from its generator link."""

from __future__ import annotations

from urllib.parse import quote_plus

from diagnostics.agent.request.subject import alert_queries, from_alertmanager, from_investigation


def test_an_alert_named_only_by_alertname_and_labels_gets_its_subject():
    issue = {
        "labels": {
            "alertname": "KubeContainerWaiting",
            "namespace": "billing",
            "pod": "invoicer-55f-abcde",
            "container": "main",
        }
    }
    alert = from_investigation({"title": "KubeContainerWaiting", "subject": {"name": None}}, issue)
    assert (alert.subject.kind, alert.subject.name, alert.subject.namespace) == (
        "pod",
        "invoicer-55f-abcde",
        "billing",
    )
    assert "main" in alert.subject.names
    job = from_alertmanager({"labels": {"alertname": "KubeJobFailed", "job_name": "etl-7", "namespace": "d"}})
    assert (job.subject.kind, job.subject.name) == ("job", "etl-7")
    assert "job" in job.topics
    probe = from_alertmanager({"labels": {"alertname": "ProbeFailed", "instance": "ledger.money.svc:9443"}})
    assert probe.subject.name == "ledger" and "network" in probe.topics
    assert "cpu" in from_alertmanager({"labels": {"alertname": "CPUThrottlingHigh"}}).topics
    assert "quota" in from_alertmanager({"labels": {"alertname": "KubeMemoryOvercommit"}}).topics


def test_the_alert_expression_comes_from_its_generator_link():
    expr = 'sum(rate(x_total{a="b"}[5m])) > 1'
    url = "http://prom:9090/graph?g0.expr=" + quote_plus(expr) + "&g0.tab=1"
    assert alert_queries(url, "not a url", "http://prom/graph?g0.tab=1") == [expr]
    alert = from_alertmanager({"labels": {"alertname": "X"}, "generatorURL": url})
    assert alert.queries == [expr]
