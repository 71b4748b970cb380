"""An object refused over an API size limit (issue 39, round nine): a Secret's data over 1 MiB with the
size an ls -l row shows, kubectl apply's annotation limit; no finding for another invalid object."""

from __future__ import annotations

from diagnostics.agent.evidence.analyzers import AnalysisState, ToolOutput, analyze
from diagnostics.agent.findings import Finding
from diagnostics.agent.request.subject import AlertContext


def _run(text: str) -> list[Finding]:
    state = AnalysisState(AlertContext())
    out = ToolOutput("fetch_pod_logs", {"pod_name": "bundle-sync-28999000-zzzzz", "namespace": "tls"}, text)
    return [f for f in analyze(out, state) if f.kind == "object_over_size_limit"]


def test_data_over_one_mebibyte_with_the_size_sent():
    text = (
        "-rw-r--r--    1 root     root       2200000 Jan  3 04:00 /work/ca-bundle.pem\n"
        'The Secret "ca-bundle" is invalid: data: Too long: must have at most 1048576 bytes\n'
    )
    (finding,) = _run(text)
    assert finding.summary.startswith(
        "The `bundle-sync` job fails because the API server refuses the Secret `ca-bundle`"
    )
    assert "the new ca-bundle.pem is 2200000 bytes" in finding.summary
    assert "limit of 1048576 bytes (1 MiB)" in finding.summary


def test_the_last_applied_annotation_limit():
    text = (
        'The ConfigMap "rules" is invalid: metadata.annotations: Too long: must have at most 262144 bytes\n'
    )
    (finding,) = _run(text)
    assert "its annotations over a ConfigMap's limit of 262144 bytes (256 KiB)" in finding.summary


def test_no_finding_for_another_invalid_object():
    assert _run('The Deployment "x" is invalid: spec.replicas: Invalid value: -1\n') == []
