"""Issue 39: status conditions of any object (a custom resource's too) and Ingress backends, read by
Kubernetes' semantics. Names appear in no case."""

from __future__ import annotations

from diagnostics.agent.evidence.analyzers import AnalysisState, ToolOutput, analyze
from diagnostics.agent.evidence.analyzers.kubernetes.conditions import conditions_of
from diagnostics.agent.findings import ObjRef
from diagnostics.agent.request.subject import from_text
from tests.support.findings import findings_of

HPA = """Name:                     mill
Namespace:                granary
Reference:                Deployment/mill
Min replicas:             1
Max replicas:             4
Conditions:
  Type            Status  Reason               Message
  ----            ------  ------               -------
  AbleToScale     True    SucceededGetScale    the HPA controller was able to get the target's current scale
  ScalingActive   False   FailedGetPodsMetric  unable to compute the replica count: no metrics returned
Events:           <none>
"""

CUSTOM = """Name:         harvest
Namespace:    granary
API Version:  farm.example.io/v1
Kind:         Combine
Status:
  Conditions:
    Last Transition Time:  2030-01-01T00:00:00Z
    Message:               waiting for dependencies
    Reason:                Pending
    Status:                False
    Type:                  Ready
    Last Transition Time:  2030-01-01T00:00:00Z
    Message:               storage bucket "grain-7" is not reachable
    Reason:                BucketUnreachable
    Status:                False
    Type:                  Synced
    Last Transition Time:  2030-01-01T00:00:00Z
    Message:               all good
    Reason:                Fine
    Status:                False
    Type:                  Degraded
Events:  <none>
"""


def test_a_failing_condition_of_any_kind_is_a_finding_with_its_message():
    found, _ = findings_of(
        HPA, tool="kubectl_describe", params={"kind": "horizontalpodautoscaler", "name": "mill"}
    )
    failing = [f for f in found if f.kind == "condition_failing"]
    assert len(failing) == 1 and "ScalingActive is False (FailedGetPodsMetric)" in failing[0].summary
    assert "no metrics returned" in failing[0].summary


def test_a_custom_resources_specific_condition_outranks_its_ready_summary_and_a_false_negative_is_fine():
    conditions = conditions_of(CUSTOM)
    assert [(c.type, c.status, c.failing) for c in conditions] == [
        ("Ready", "False", True),
        ("Synced", "False", True),
        ("Degraded", "False", False),
    ]
    found, _ = findings_of(CUSTOM, tool="kubectl_describe", params={"kind": "combine", "name": "harvest"})
    failing = sorted((f for f in found if f.kind == "condition_failing"), key=lambda f: -f.rank)
    assert 'storage bucket "grain-7" is not reachable' in failing[0].summary
    assert "Ready" in failing[1].summary and failing[1].rank < failing[0].rank
    assert failing[0].summary.startswith("Combine harvest: condition Synced is False")


INGRESS = """Name:             granary-web
Namespace:        granary
Ingress Class:    nginx
Rules:
  Host              Path  Backends
  ----              ----  --------
  granary.example
                    /   silo:9000 (<error: endpoints "silo" not found>)
Events:           <none>
"""

SERVICE = """Name:              silo
Namespace:         granary
Selector:          app=silo
Port:              web  81/TCP
TargetPort:        8081/TCP
Endpoints:         10.0.0.9:8081
"""


def test_an_ingress_backend_on_a_port_its_service_does_not_expose_is_the_cause():
    state = AnalysisState(from_text("granary-web returns 503"))
    first = analyze(
        ToolOutput("kubectl_describe", {"kind": "ingress", "name": "granary-web"}, INGRESS), state
    )
    state.record(ToolOutput("kubectl_describe", {"kind": "ingress", "name": "granary-web"}, INGRESS))
    assert [f.kind for f in first if f.is_problem] == ["ingress_backend_missing"]
    assert any(lead.obj.name == "silo" and lead.obj.kind == "service" for lead in state.leads)
    out = ToolOutput("kubectl_describe", {"kind": "service", "name": "silo", "namespace": "granary"}, SERVICE)
    state.record(out)
    second = analyze(out, state)
    mismatch = [f for f in second if f.kind == "ingress_port_mismatch"]
    assert mismatch and "port 9000 of Service silo, which only exposes port 81" in mismatch[0].summary


def test_a_client_refused_at_a_port_its_service_does_not_declare_is_told_the_right_port():
    state = AnalysisState(from_text("mill-3 keeps crashing in namespace granary"))
    log = "2030-01-01 10:00:00 ERROR Error 111 connecting to hopper:7001. Connection refused."
    logs = ToolOutput("fetch_pod_logs", {"pod_name": "mill-3", "namespace": "granary"}, log)
    state.record(logs)
    analyze(logs, state)
    assert any(lead.obj == ObjRef("service", "hopper", "granary") for lead in state.leads)
    service = SERVICE.replace("silo", "hopper").replace("81/TCP", "7000/TCP")
    out = ToolOutput(
        "kubectl_describe", {"kind": "service", "name": "hopper", "namespace": "granary"}, service
    )
    state.record(out)
    found = [f for f in analyze(out, state) if f.kind == "dialed_port_mismatch"]
    assert found and "hopper:7001, but Service hopper listens on port 7000" in found[0].summary, found


def test_a_client_refused_at_a_declared_port_is_not_told_a_wrong_port():
    state = AnalysisState(from_text("mill-3 keeps crashing in namespace granary"))
    logs = ToolOutput(
        "fetch_pod_logs", {"pod_name": "mill-3", "namespace": "granary"}, "connecting to hopper:81 refused"
    )
    state.record(logs)
    analyze(logs, state)
    out = ToolOutput(
        "kubectl_describe", {"kind": "service", "name": "hopper"}, SERVICE.replace("silo", "hopper")
    )
    state.record(out)
    assert not [f for f in analyze(out, state) if f.kind == "dialed_port_mismatch"]
