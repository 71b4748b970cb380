"""A log-shipping sidecar OOMKilled while its destination answers 429 (issue 39, round eight): the
sidecar's restarts and limit from the pod's describe, the refusal in several shippers' words, the
buffer settings from its configuration, the application container that never restarted. A sidecar
killed without a refusal, or a refusal without a kill, says nothing. Names appear in no case."""

from __future__ import annotations

from diagnostics.agent.evidence.analyzers import AnalysisState, ToolOutput, analyze
from diagnostics.agent.findings import Finding
from diagnostics.agent.request.subject import AlertContext

_POD = "checkout-7a8b9c0d1e-xy7zt"


def _describe(last_reason: str = "OOMKilled", restarts: int = 6) -> str:
    return f"""Name:             {_POD}
Namespace:        shop
Containers:
  checkout:
    Image:          registry.example/shop/checkout:3.1.0
    State:          Running
    Ready:          True
    Restart Count:  0
    Environment:
      LOG_LEVEL:  trace
  shipper:
    Image:          timberio/vector:0.39.0-debian
    State:          Running
    Last State:     Terminated
      Reason:       {last_reason}
      Exit Code:    137
    Ready:          True
    Restart Count:  {restarts}
    Limits:
      memory:  128Mi
Volumes:
  shipper-config:
    Type:      ConfigMap (a volume populated by a ConfigMap)
    Name:      checkout-shipper
"""


def _run(*outs: ToolOutput) -> list[Finding]:
    state = AnalysisState(AlertContext())
    found: list[Finding] = []
    for out in outs:
        found += analyze(out, state)
    return [f for f in found if f.kind.startswith("sidecar_buffering")]


def _read(text: str) -> ToolOutput:
    return ToolOutput("kubectl_describe", {"kind": "pod", "name": _POD, "namespace": "shop"}, text)


def _log(text: str) -> ToolOutput:
    return ToolOutput("fetch_pod_logs", {"pod_name": _POD, "namespace": "shop"}, text)


def test_each_shippers_refusal_with_the_sidecar_killed_for_memory():
    vector = (
        "2027-04-02T09:00:00Z WARN sink{component_id=es}: vector::sinks::util::retries: "
        "Retrying after response. reason=too many requests: 429 Too Many Requests\n"
    )
    fluent = (
        "[2027/04/02 09:00:00] [error] [output:loki:loki.0] loki:3100, HTTP status=429\n"
        "ingestion rate limit exceeded for user shop (limit: 1048576 bytes/sec) while attempting to ingest\n"
        "[2027/04/02 09:00:00] [ warn] [engine] failed to flush chunk '1-1.flb', retry in 9 seconds\n"
    )
    otel = "2027-04-02T09:00:00Z error exporterhelper: Exporting failed, will retry: status code: 429\n"
    for text in (vector, fluent, otel):
        root, lost = _run(_read(_describe()), _log(text))
        assert (
            "The shipper sidecar of the checkout pods is OOMKilled at its 128Mi memory limit" in root.summary
        )
        assert "(6 restarts)" in root.summary and "answers 429" in root.summary
        assert "the checkout container runs with LOG_LEVEL=trace" in root.summary
        assert "the checkout container itself never restarted" in lost.summary
    (fluent_root, _) = _run(_read(_describe()), _log(fluent))
    assert (
        "Loki answers 429 because tenant shop exceeds its ingestion rate limit (1048576"
        in fluent_root.summary
    )


def test_the_configuration_read_after_says_what_bounds_the_buffers():
    config = "[INPUT]\n    Name tail\n[OUTPUT]\n    Name loki\n    Retry_Limit no_limits\n"
    refused = "[2027/04/02 09:00:00] [error] [output:loki:loki.0] HTTP status=429\n"
    found = _run(
        _read(_describe()), _log(refused), ToolOutput("kubectl_get_yaml", {"kind": "configmap"}, config)
    )
    assert "(no Mem_Buf_Limit, Retry_Limit no_limits, memory buffers only)" in found[-1].summary


def test_a_kill_without_a_refusal_or_a_refusal_without_a_kill_says_nothing():
    refused = "2027-04-02T09:00:00Z error exporterhelper: Exporting failed, will retry: status code: 429\n"
    assert _run(_read(_describe("Error")), _log(refused)) == []
    assert _run(_read(_describe(restarts=1)), _log(refused)) == []
    app_killed = _describe().replace("timberio/vector:0.39.0-debian", "registry.example/shop/pricer:1.0")
    assert _run(_read(app_killed.replace("  shipper:", "  pricer:")), _log(refused)) == []
    healthy = "2027-04-02T09:00:00Z info exporterhelper: batch sent, status code: 200\n"
    assert _run(_read(_describe()), _log(healthy)) == []
