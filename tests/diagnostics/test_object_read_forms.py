"""Reads that reach the evidence (issue 39): one named object whose description (or plain get) comes back
empty is read as its manifest, and the reverse; a form already read is not read again; a client's
resolution failure on a stack trace's continuation line is dated by the timed line it continues."""

from __future__ import annotations

from diagnostics.agent.evidence.analyzers import AnalysisState, ToolOutput, analyze
from diagnostics.agent.investigation.adapt import next_forms
from diagnostics.agent.request.subject import AlertContext
from diagnostics.toolsets.base import ToolSpec

_OBJECT = {
    "type": "object",
    "properties": {"kind": {"type": "string"}, "name": {"type": "string"}, "namespace": {"type": "string"}},
    "required": ["kind", "name"],
}
_TOOLS = [
    ToolSpec("k8s_describe", "Describe one object.", _OBJECT),
    ToolSpec("k8s_get_resource", "Get one object.", _OBJECT),
    ToolSpec("k8s_get_manifest_yaml", "One object as YAML.", _OBJECT),
    ToolSpec("k8s_events_for", "Events of an object.", _OBJECT),
]
_CM = {"kind": "configmap", "name": "resolver-conf", "namespace": "infra"}


def test_an_empty_description_is_read_as_the_manifest_and_the_reverse() -> None:
    (form,) = next_forms("k8s_describe", _CM, _TOOLS)
    assert (form.tool, form.params) == ("k8s_get_manifest_yaml", _CM)
    (form,) = next_forms("k8s_get_resource", _CM, _TOOLS)
    assert form.tool == "k8s_get_manifest_yaml"
    (form,) = next_forms("k8s_get_manifest_yaml", _CM, _TOOLS)
    assert form.tool == "k8s_describe"
    # Events, lists and reads of no named object have no such form.
    assert next_forms("k8s_events_for", _CM, _TOOLS) == []
    assert next_forms("k8s_describe", {"kind": "configmap", "namespace": "infra"}, _TOOLS) == []


def test_a_form_already_read_is_not_read_again() -> None:
    done = [{"tool": "k8s_get_manifest_yaml", "params": dict(_CM), "ok": True, "no_data": True}]
    assert next_forms("k8s_describe", _CM, _TOOLS, done) == []
    other = {**_CM, "name": "other-conf"}
    assert [f.tool for f in next_forms("k8s_describe", other, _TOOLS, done)] == ["k8s_get_manifest_yaml"]


def test_a_resolution_failure_on_a_continuation_line_is_dated_by_its_timed_line() -> None:
    client = (
        "2027-03-02 08:00:01,100 INFO  [auth] login ok\n"
        "2027-03-02 08:21:40,500 ERROR [auth] directory query failed\n"
        "Caused by: java.net.UnknownHostException: dir.corp.example: Temporary failure in name resolution\n"
        "\tat java.base/java.net.InetAddress.getAllByName0(InetAddress.java:1505)\n"
    )
    corefile = (
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: coredns\n  managedFields:\n"
        '  - manager: kubectl-edit\n    time: "2027-03-02T08:20:05Z"\ndata:\n  Corefile: |\n'
        "    .:53 {\n        forward . /etc/resolv.conf\n    }\n"
        "    corp.example:53 {\n        forward . 192.168.40.4\n    }\n"
    )
    state = AnalysisState(AlertContext())
    analyze(ToolOutput("fetch_pod_logs", {"pod_name": "auth-0", "namespace": "sec"}, client), state)
    found = analyze(ToolOutput("kubectl_get_yaml", {"kind": "configmap"}, corefile), state)
    (changed,) = [f for f in found if f.kind == "dns_forwarder_changed"]
    assert "at 08:20" in changed.summary and "first at 2027-03-02 08:21:40" in changed.summary
