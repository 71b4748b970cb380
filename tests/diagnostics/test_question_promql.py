"""Questions that need a PromQL query written (issue 39, b15's class) and the reads that follow a
``predict_linear`` alert (n47's class), on inputs unlike those cases: other metric names, namespaces,
labels and result shapes. The replay folders record exact queries, so only the query the writer is expected
to write gets data; tests/diagnostics/lab/test_promql_real.py runs the same queries on a real Prometheus."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from diagnostics.agent.evidence.analyzers.metrics.results import (
    duration,
    number,
    parse_result,
    size,
    slope,
)
from diagnostics.agent.questions.promql import (
    CPU,
    ERRORS,
    LATENCY,
    MEMORY,
    REQUESTS,
    MetricAsk,
    metric_asks,
    predictions,
    query_for,
)
from diagnostics.agent.request.intent import classify
from diagnostics.agent.request.subject import from_alertmanager, from_text
from diagnostics.agent.runner import MemoryRecorder, investigate
from diagnostics.toolsets.replay import ReplayEnvironment

LATENCY_BY_SERVICE = (
    "histogram_quantile(0.99, sum by (le, namespace, service) "
    '(rate({__name__=~".+(duration|latency).*_seconds_bucket", service="orders-api", '
    'namespace="retail"}[5m])))'
)
LATENCY_BY_JOB = LATENCY_BY_SERVICE.replace("service", "job")
REQUESTS_BY_JOB = (
    'sum by (namespace, job) (rate({__name__=~".+_requests_total", job="ingest-worker", '
    'namespace="etl"}[5m]))'
)
STAMP = 1_801_000_000  # 2027-01-26T21:46:40Z


def _asks(question: str) -> list[MetricAsk]:
    return metric_asks(question, classify(question))


def test_the_measure_quantile_and_label_come_from_the_question_s_words() -> None:
    [latency] = _asks("what's the p99 latency of orders-api in namespace retail?")
    assert (latency.measure, latency.subject, latency.namespace, latency.quantile) == (
        LATENCY,
        "orders-api",
        "retail",
        0.99,
    )
    assert _asks("what is the 90th percentile response time of orders-api?")[0].quantile == 0.9
    assert _asks("median latency of orders-api")[0].quantile == 0.5
    [errors] = _asks("what's the error rate of the billing service?")
    assert (errors.measure, errors.subject, errors.label) == (ERRORS, "billing", "service")
    [requests] = _asks("how many requests per second does job ingest-worker handle?")
    assert (requests.measure, requests.label) == (REQUESTS, "job")
    grafana = _asks("how much memory and cpu does ingest-worker use in grafana?")
    assert [a.measure for a in grafana] == [MEMORY, CPU]


@pytest.mark.parametrize(
    "question",
    [
        "how many pods are running in retail?",
        "what errors is billing throwing?",
        "are there 5xx lines in the logs of billing?",
        "how much memory does ingest-worker use?",  # kubectl top answers it
        "why is orders-api failing?",
    ],
)
def test_questions_without_a_metric_measure_keep_their_own_plan(question: str) -> None:
    assert _asks(question) == []


def test_queries_follow_the_metric_types() -> None:
    ask = MetricAsk(LATENCY, "orders-api", "retail", quantile=0.99)
    assert query_for(ask, "service") == LATENCY_BY_SERVICE
    errors = query_for(MetricAsk(ERRORS, "billing"), "app")
    # a counter through rate(); the status code under code, status or status_code: the first that exists
    assert errors.count('rate({__name__=~".+_requests_total", app="billing", ') == 3
    assert ' code=~"5.."' in errors and ' status=~"5.."' in errors and " or " in errors
    memory = query_for(MetricAsk(MEMORY, "api.v2", "edge"), "pod")
    # a gauge as it is; a pod by its name's prefix, the dot a literal
    assert memory == (
        'sum by (namespace, pod) (container_memory_working_set_bytes{container!="", container!="POD", '
        'pod=~"api\\\\.v2|api\\\\.v2-.+", namespace="edge"})'
    )
    hostile = query_for(MetricAsk(REQUESTS, 'x"}) or vector(1) #'), "service")
    assert 'service="x\\"}) or vector(1) #"' in hostile


def test_a_predict_linear_alert_is_narrowed_to_its_object() -> None:
    expr = 'predict_linear(node_filesystem_avail_bytes{fstype!="tmpfs",job="node"}[12h], 24 * 3600) < 0'
    alert = from_alertmanager(
        {
            "labels": {
                "alertname": "NodeFilesystemSpaceFillingUp",
                "instance": "node-7:9100",
                "mountpoint": "/var/lib/containerd",
                "device": "/dev/nvme0n1p2",
            },
            "generatorURL": "http://prom:9090/graph?g0.expr=" + expr.replace(" ", "%20"),
        }
    )
    [prediction] = predictions(alert)
    assert prediction.series == (
        'node_filesystem_avail_bytes{fstype!="tmpfs", job="node", instance="node-7:9100", '
        'mountpoint="/var/lib/containerd", device="/dev/nvme0n1p2"}'
    )
    assert prediction.deriv == f"deriv({prediction.series}[12h])" and prediction.seconds == 43200
    assert prediction.capacity.startswith('{__name__=~"node_filesystem_(?:capacity|size)_bytes", fstype!=')


def test_results_in_every_shape_keep_their_times() -> None:
    vector = parse_result(
        '{"status":"success","data":{"resultType":"vector","result":[{"metric":{"job":"a"},"value":[1700000000,"2.5"]}]}}'
    )
    assert vector.kind == "vector" and vector.series[0].value == 2.5 and vector.series[0].at == 1700000000
    matrix = parse_result(
        '{"resultType":"matrix","result":[{"metric":{"__name__":"free"},"values":[[0,"100"],[60,"94"],[120,"88"]]}]}'
    )
    assert matrix.series[0].name == "free" and slope(matrix.series[0]) == pytest.approx(-0.1)
    rendered = parse_result(
        'free{pvc="a"}: 40 points 2027-01-01T00:00:00Z .. 2027-01-01T01:00:00Z; min=40 max=100 last=40\n'
        "    00:00:00=100 00:30:00=70 01:00:00=40\n"
        'up{job="b"} => 0 @ 2027-01-01T01:00:00Z'
    )
    free, up = rendered.series
    assert slope(free) == pytest.approx(-60 / 3600) and free.minimum() == 40 and free.count == 40
    assert up.labels == {"job": "b", "__name__": "up"} and up.value == 0
    assert parse_result("scalar: 3 @ 2027-01-01T00:00:00Z").series[0].value == 3
    assert parse_result("no data: the query returned an empty vector").series == []
    assert parse_result("not a result {").kind == ""
    assert (number(4.7), number(0.04213), number(1234.56), size(3.78e9), duration(275_000)) == (
        "4.7",
        "0.0421",
        "1235",
        "3.5Gi",
        "3.2 days",
    )


def _record(case: Path, name: str, tool: str, params: dict[str, Any], out: str) -> None:
    header = {"toolset_name": "prometheus/metrics", "tool_name": tool, "match_params": params}
    meta = {"status": "success", "params": params}
    (case / name).write_text(f"{json.dumps(header)}\n{json.dumps(meta)}\nstdout:\n\n{out}\nstderr:\n")


def _vector(*series: tuple[dict[str, str], float]) -> str:
    result = [{"metric": labels, "value": [STAMP, str(value)]} for labels, value in series]
    return json.dumps({"status": "success", "data": {"resultType": "vector", "result": result}})


def _ask(case: Path, question: str) -> Any:
    return investigate(
        alert=from_text(question),
        environment=ReplayEnvironment({"case_dir": str(case)}),
        recorder=MemoryRecorder(),
        mode="analyzers",
    )


def test_the_next_form_is_read_when_the_first_names_nothing(tmp_path: Path) -> None:
    """orders-api is labelled by job, not service: the second form answers, with its unit and time."""
    _record(
        tmp_path,
        "latency.txt",
        "execute_prometheus_instant_query",
        {"query": LATENCY_BY_JOB},
        _vector(
            ({"job": "orders-api", "namespace": "retail"}, 0.82),
            ({"job": "cart", "namespace": "retail"}, 3.1),
        ),
    )
    outcome = _ask(tmp_path, "what's the p99 latency of orders-api in namespace retail?")
    queries = [c["params"]["query"] for c in outcome.tool_calls]
    assert queries[:2] == [LATENCY_BY_SERVICE, LATENCY_BY_JOB]
    assert outcome.diagnosis.splitlines()[0] == (
        "The p99 latency of orders-api (namespace retail) is 0.82 s (820 ms) "
        "(rate over 5m, at 2027-01-26T21:46:40Z)."
    )
    assert "3.1" not in outcome.diagnosis  # another job's series is no answer
    assert outcome.answer["shape"] == "metric" and outcome.answer["rows"][0][2] == "0.82"


def test_a_count_of_requests_per_second_over_a_window_reads_the_range(tmp_path: Path) -> None:
    matrix = {
        "status": "success",
        "data": {
            "resultType": "matrix",
            "result": [
                {
                    "metric": {"job": "ingest-worker", "namespace": "etl"},
                    "values": [[STAMP - 7200, "120"], [STAMP - 3600, "310"], [STAMP, "95.5"]],
                }
            ],
        },
    }
    _record(
        tmp_path,
        "range.txt",
        "execute_prometheus_range_query",
        {"query": REQUESTS_BY_JOB, "start": "*", "end": "*"},
        json.dumps(matrix),
    )
    outcome = _ask(
        tmp_path,
        "how many requests per second did job ingest-worker handle in namespace etl in the last 2 hours?",
    )
    assert outcome.tool_calls[0]["tool"] == "execute_prometheus_range_query"
    params = outcome.tool_calls[0]["params"]
    start, end = (datetime.fromisoformat(params[k].replace("Z", "+00:00")) for k in ("start", "end"))
    assert end - start == timedelta(hours=2)
    assert outcome.diagnosis.splitlines()[0] == (
        "ingest-worker (namespace etl) serves 95.5 requests per second now (rate over 5m, at "
        "2027-01-26T21:46:40Z). Over the last 2 hours it peaked at 310 requests per second at "
        "2027-01-26T20:46:40Z, lowest 95.5 requests per second."
    )


def test_no_form_answering_falls_back_to_the_question_s_plan_and_says_so(tmp_path: Path) -> None:
    _record(
        tmp_path,
        "other.txt",
        "execute_prometheus_instant_query",
        {"query": "*"},
        _vector(({"service": "search", "namespace": "retail"}, 7.0)),
    )
    outcome = _ask(tmp_path, "what's the p99 latency of orders-api in namespace retail?")
    latency_reads = [c for c in outcome.tool_calls if "orders-api" in str(c["params"].get("query"))]
    assert len(latency_reads) == 4  # service, job, app, pod
    assert "Prometheus returned no series about orders-api for its latency (4 forms of the query tried)." in (
        outcome.diagnosis
    )
    assert "7" not in outcome.diagnosis.split("\n", 1)[0]
    assert outcome.answer["shape"] != "metric"


def test_a_filesystem_predicted_to_fill_says_how_fast_and_when(tmp_path: Path) -> None:
    """Node exporter's filesystem, no range tool: its value now, its size, deriv over the alert's window."""
    labels = {"instance": "node-7:9100", "mountpoint": "/var/lib/containerd", "device": "/dev/nvme0n1p2"}
    selector = 'instance="node-7:9100", mountpoint="/var/lib/containerd", device="/dev/nvme0n1p2"'
    avail = f"node_filesystem_avail_bytes{{{selector}}}"
    _record(tmp_path, "expr.txt", "execute_prometheus_instant_query", {"query": "*"}, _vector((labels, -1.0)))
    _record(
        tmp_path,
        "now.txt",
        "execute_prometheus_instant_query",
        {"query": avail},
        _vector(({"__name__": "node_filesystem_avail_bytes", **labels}, 20 * 2**30)),
    )
    _record(
        tmp_path,
        "size.txt",
        "execute_prometheus_instant_query",
        {"query": f'{{__name__=~"node_filesystem_(?:capacity|size)_bytes", {selector}}}'},
        _vector(({"__name__": "node_filesystem_size_bytes", **labels}, 250 * 2**30)),
    )
    _record(
        tmp_path,
        "deriv.txt",
        "execute_prometheus_instant_query",
        {"query": f"deriv({avail}[12h])"},
        _vector((labels, -2 * 2**30 / 86400)),  # 2Gi a day
    )
    expr = "predict_linear(node_filesystem_avail_bytes[12h], 24 * 3600) < 0"
    alert = from_alertmanager(
        {
            "labels": {"alertname": "NodeFilesystemSpaceFillingUp", **labels},
            "generatorURL": "http://prom:9090/graph?g0.expr=" + expr.replace(" ", "%20"),
        }
    )
    outcome = investigate(
        alert=alert,
        environment=ReplayEnvironment({"case_dir": str(tmp_path)}),
        recorder=MemoryRecorder(),
        mode="analyzers",
    )
    [filling] = [f for f in outcome.findings if "grows about" in f.summary]
    assert filling.summary == (
        "The filesystem /var/lib/containerd on node-7:9100 has 8.0% free (20Gi of 250Gi) and grows "
        "about 2Gi a day (the rate of the last 12h): at that rate it is full in about 10 days, around "
        "2027-02-05T21:46:40Z; predict_linear expects it to fill within 1 day."
    )
    assert filling.subject == "node-7:9100" and filling.is_problem


def test_several_subjects_and_a_namespace_alone() -> None:
    compared = _asks("compare the p95 latency of orders-api and payments-api")
    assert [(a.measure, a.subject) for a in compared] == [(LATENCY, "orders-api"), (LATENCY, "payments-api")]
    [whole] = _asks("what is the 5xx rate in namespace warehouse?")
    assert (whole.subject, whole.label) == ("warehouse", "namespace")
    query = query_for(whole, "namespace")
    assert query.startswith(
        'sum by (namespace) (rate({__name__=~".+_requests_total", namespace="warehouse", '
    )
    assert query.count('namespace="warehouse"') == 3  # one matcher in each status-label form


def test_a_namespace_s_pods_are_answered_highest_first(tmp_path: Path) -> None:
    query = (
        'sum by (namespace, pod) (container_memory_working_set_bytes{container!="", container!="POD", '
        'namespace="warehouse"})'
    )
    _record(
        tmp_path,
        "memory.txt",
        "execute_prometheus_instant_query",
        {"query": query},
        _vector(
            ({"namespace": "warehouse", "pod": "picker-0"}, 64 * 2**20),
            ({"namespace": "warehouse", "pod": "packer-7c9d-2xq"}, 1.5 * 2**30),
        ),
    )
    outcome = _ask(
        tmp_path, "how much memory do the pods in namespace warehouse use according to prometheus?"
    )
    first, second = outcome.diagnosis.splitlines()[:2]
    assert first.startswith("packer-7c9d-2xq (namespace warehouse) uses 1.5Gi of memory (working set)")
    assert second.startswith("picker-0 (namespace warehouse) uses 64Mi of memory")


def test_a_count_over_a_window_is_the_counter_s_increase(tmp_path: Path) -> None:
    counted = (
        'sum by (namespace, service) (increase({__name__=~".+_requests_total", service="checkout", '
        'code=~"5.."}[2h]))'
    )
    _record(
        tmp_path,
        "count.txt",
        "execute_prometheus_instant_query",
        {"query": "*"},
        _vector(({"service": "checkout", "namespace": "till"}, 283.4)),
    )
    _record(  # a range tool is there, but a count over a window is one value at its end
        tmp_path,
        "range.txt",
        "execute_prometheus_range_query",
        {"query": "*", "start": "*", "end": "*"},
        _vector(({"service": "checkout", "namespace": "till"}, 1.0)),
    )
    outcome = _ask(tmp_path, "how many 5xx did the checkout service return in the last 2 hours?")
    first = outcome.tool_calls[0]
    assert first["tool"] == "execute_prometheus_instant_query"
    assert first["params"]["query"].startswith(counted + " or ")
    assert outcome.diagnosis.startswith(
        "checkout (namespace till) returned 283 5xx responses in the last 2h (at 2027-01-26T21:46:40Z)."
    )
    [requests] = _asks("how many requests did job ingest-worker serve in the last hour?")
    assert (requests.measure, requests.total) == (REQUESTS, True)
    assert not _asks("how many requests per second does job ingest-worker serve?")[0].total


ACCESS_LOG = "\n".join(
    json.dumps({"time": f"2027-03-02T08:{minute:02d}:00Z", "path": path, "status": status})
    for minute, path, status in (
        (10, "/pay", 200),
        (41, "/pay", 503),
        (44, "/refund", 200),
        (47, "/pay", 500),
        (52, "/pay", 201),
        (58, "/refund", 502),
    )
)


def _logs_case(case: Path) -> None:
    pods = (
        "NAMESPACE   NAME                     READY   STATUS    RESTARTS   AGE\n"
        "billing     payd-5b7c9d8f6-qq2lm     1/1     Running   0          2d"
    )
    header = {"toolset_name": "kubernetes/core", "tool_name": "kubectl_find_resource"}
    for name, tool, params, out in (
        ("find.txt", "kubectl_find_resource", {"kind": "pod", "keyword": "payd"}, pods),
        (
            "logs.txt",
            "fetch_pod_logs",
            {"pod_name": "payd-5b7c9d8f6-qq2lm", "namespace": "billing"},
            ACCESS_LOG,
        ),
    ):
        meta = {"status": "success", "params": params}
        head = {**header, "tool_name": tool, "match_params": params}
        (case / name).write_text(f"{json.dumps(head)}\n{json.dumps(meta)}\nstdout:\n\n{out}\nstderr:\n")


def test_without_prometheus_a_5xx_count_is_read_from_the_access_log(tmp_path: Path) -> None:
    """JSON access lines; the window ends at the log's own last time (08:38 to 08:58)."""
    _logs_case(tmp_path)
    outcome = _ask(tmp_path, "how many 5xx did payd return in the last 20 minutes?")
    assert outcome.answer["value"] == 3, outcome.diagnosis
    assert outcome.diagnosis.startswith(
        "3 responses with a 5xx status in the last 20 minutes in the access log of payd-5b7c9d8f6-qq2lm "
        "(of 5 responses logged there in that window)."
    )
    assert "08:10:00" not in outcome.diagnosis  # outside the window
    counted = _ask(tmp_path, "how many requests did payd serve in the last 20 minutes?").answer
    assert counted["value"] == 5 and counted["counted"] == "responses"
