"""An in-cluster client with no service account token mounted (issue 39, round nine): the ServiceAccount's
or the pod's automountServiceAccountToken false, client-go's and the Python client's wordings; no finding
for a log without the failure. Names appear in no case."""

from __future__ import annotations

from diagnostics.agent.evidence.analyzers import AnalysisState, ToolOutput, analyze
from diagnostics.agent.findings import Finding
from diagnostics.agent.request.subject import AlertContext

_DESCRIBE = """Name:             sweeper-7c9d8e6f5-qwert
Namespace:        infra
Service Account:  sweeper-sa
Containers:
  sweeper:
    State:          Waiting
"""
_ACCOUNT = """apiVersion: v1
kind: ServiceAccount
metadata:
  name: sweeper-sa
  namespace: infra
automountServiceAccountToken: false
"""
_POD_OFF = """apiVersion: v1
kind: Pod
metadata:
  name: sweeper-7c9d8e6f5-qwert
  namespace: infra
spec:
  serviceAccountName: sweeper-sa
  automountServiceAccountToken: false
  containers:
  - name: sweeper
"""


def _log(text: str) -> ToolOutput:
    return ToolOutput("fetch_pod_logs", {"pod_name": "sweeper-7c9d8e6f5-qwert", "namespace": "infra"}, text)


def _run(*outs: ToolOutput) -> list[Finding]:
    state = AnalysisState(AlertContext())
    found: list[Finding] = []
    for out in outs:
        found += analyze(out, state)
    return [f for f in found if f.kind == "service_account_token_not_mounted"]


def test_the_service_account_turns_the_token_off_client_go():
    line = (
        "E0101 00:00:01 main.go:30] in-cluster config: "
        "open /var/run/secrets/kubernetes.io/serviceaccount/token: no such file or directory"
    )
    (finding,) = _run(
        ToolOutput("kubectl_describe", {}, _DESCRIBE),
        _log(line),
        ToolOutput("kubectl_get_yaml", {}, _ACCOUNT),
    )
    assert finding.summary.startswith("The `sweeper` container of sweeper-7c9d8e6f5-qwert exits at start")
    assert "the ServiceAccount sweeper-sa sets automountServiceAccountToken: false" in finding.summary


def test_the_pod_turns_the_token_off_python_client():
    line = "kubernetes.config.config_exception.ConfigException: Service token file does not exist."
    (finding,) = _run(_log(line), ToolOutput("kubectl_get_yaml", {}, _POD_OFF))
    assert "the pod's spec sets automountServiceAccountToken: false" in finding.summary


def test_no_finding_without_the_failure():
    assert (
        _run(
            ToolOutput("kubectl_describe", {}, _DESCRIBE),
            _log("listening on :8080\n"),
            ToolOutput("kubectl_get_yaml", {}, _ACCOUNT),
        )
        == []
    )
