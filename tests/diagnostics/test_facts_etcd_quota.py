"""etcd out of space (issue 39, round eight): the NOSPACE alarm and the quota from etcd's log (zap JSON,
the older text form, etcdctl's alarm list), the file's size and bytes in use from Prometheus (current and
etcd_debugging_ names) or compaction lines, the refused writes from a client's log; disarmed is history.
Names and numbers appear in no case."""

from __future__ import annotations

from diagnostics.agent.evidence.analyzers import AnalysisState, ToolOutput, analyze
from diagnostics.agent.findings import Finding
from diagnostics.agent.request.subject import AlertContext

_ZAP = """{"level":"info","ts":"2027-02-01T03:00:01.000Z","msg":"finished scheduled compaction",\
"current-db-size-bytes":2147000000,"current-db-size-in-use-bytes":610000000}
{"level":"warn","ts":"2027-02-01T03:10:00.000Z","msg":"alarm raised","alarm":"NOSPACE","from":"aa","to":"aa"}
{"level":"warn","ts":"2027-02-01T03:10:00.001Z","msg":"mvcc: database space exceeded; quota exceeded",\
"quota-size-bytes":2147483648}
"""


def _metrics(prefix: str, size: int, in_use: int, quota: int) -> str:
    rows = [
        (f"{prefix}mvcc_db_total_size_in_bytes", size),
        (f"{prefix}mvcc_db_total_size_in_use_in_bytes", in_use),
        ("etcd_server_quota_backend_bytes", quota),
    ]
    result = ",".join(
        f'{{"metric":{{"__name__":"{n}","instance":"10.9.0.1:2379","job":"etcd"}},"value":[1800000000,"{v}"]}}'
        for n, v in rows
    )
    return f'{{"status":"success","data":{{"resultType":"vector","result":[{result}]}}}}'


_OTHER = ToolOutput("kubectl_get_by_kind_in_namespace", {"kind": "pod"}, "NAME READY\nx 1/1\n")


def _run(*outs: ToolOutput) -> list[Finding]:
    state = AnalysisState(AlertContext())
    found: list[Finding] = []
    for out in outs:
        found += analyze(out, state)
    return [f for f in found if f.kind == "etcd_nospace"]


def _log(text: str, pod: str = "etcd-m1") -> ToolOutput:
    return ToolOutput("fetch_pod_logs", {"pod_name": pod, "namespace": "kube-system"}, text)


def test_the_zap_log_alone_names_the_alarm_the_quota_and_the_undefragmented_file():
    assert _run(_log(_ZAP)) == []  # it waits a few reads for a client refused
    (finding,) = _run(_log(_ZAP), _OTHER, _OTHER, _OTHER)
    assert finding.summary.startswith(
        "etcd has raised its NOSPACE alarm: its database file reached its backend quota of 2147483648 bytes"
    )
    assert "refuses every write with database space exceeded" in finding.summary
    assert "Only about 0.6 GB of the etcd database is in use after compaction" in finding.summary
    assert "never defragmented" in finding.summary and not finding.history
    assert finding.at.startswith("2027-02-01T03:10:00")  # the alarm's time, not the later read's


def test_old_metric_names_and_a_client_refused_by_an_etcdctl_alarm_list():
    metrics = ToolOutput(
        "execute_prometheus_instant_query", {}, _metrics("etcd_debugging_", 4.2e9, 9e8, 4294967296)
    )
    alarms = ToolOutput("run_command", {}, "memberID:8211f1d0f64f3269 alarm:NOSPACE\n")
    client = _log(
        "E0201 04:00:00.1 1 controller.go:99] update status: etcdserver: mvcc: database space exceeded\n",
        "kube-apiserver-m2",
    )
    (finding,) = _run(metrics, alarms, client)
    assert "backend quota of 4294967296 bytes" in finding.summary
    assert "(seen refused in the logs of kube-apiserver-m2)" in finding.summary
    assert "Only about 0.9 GB" in finding.summary


def test_refused_writes_at_the_quota_without_an_alarm_line_and_a_disarmed_alarm():
    metrics = ToolOutput("q", {}, _metrics("etcd_", 8_580_000_000, 8_000_000_000, 8_589_934_592))
    client = _log(
        "2027-02-01T04:00:00Z error apply failed: etcdserver: mvcc: database space exceeded\n", "ci"
    )
    (finding,) = _run(metrics, client)
    assert finding.summary.startswith("etcd is out of space: its database file reached its backend quota")
    assert "defragmented" not in finding.summary  # most of the file is in use: not a defrag case
    disarmed = (
        _ZAP + '{"level":"info","ts":"2027-02-01T05:00:00Z","msg":"alarm disarmed","alarm":"NOSPACE"}\n'
    )
    (over,) = _run(_log(disarmed), _OTHER, _OTHER, _OTHER)
    assert over.history and over.rank < 50


def test_a_roomy_database_or_a_full_disk_elsewhere_says_nothing():
    roomy = ToolOutput("q", {}, _metrics("etcd_", 900_000_000, 700_000_000, 8_589_934_592))
    assert _run(roomy) == []
    disk = _log("2027-02-01T04:00:00Z ERROR write /data/x: no space left on device\n", "postgres-0")
    assert _run(roomy, disk) == []
