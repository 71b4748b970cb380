"""Issue 39: the key line is the cause (errors read by what they mean: file descriptors, a bound port, a
database's connection slots, HTTP 429, clock skew, a missing dependency, inodes), Kubernetes' own semantics
(pod capacity, admission refusing a workload's pods, an init container that never completes, a pod not
ready with nothing else to say why), and alert labels named after a kind. Names appear in no case."""

from __future__ import annotations

import pytest

from diagnostics.agent.investigation.diagnosis import rank_findings
from diagnostics.agent.request.subject import subject_from_labels
from tests.support.findings import findings_of

CRASH = """Name:             quill-7d8f9-abcde
Namespace:        ink
Status:           Running
Containers:
  quill:
    State:          Waiting
      Reason:       CrashLoopBackOff
    Last State:     Terminated
      Reason:       Error
      Exit Code:    1
    Ready:          False
    Restart Count:  12
Events:
  Type     Reason   Age  From     Message
  ----     ------   ---  ----     -------
  Warning  BackOff  1m   kubelet  Back-off restarting failed container quill
"""


@pytest.mark.parametrize(
    ("line", "kind", "needles"),
    [
        ("2030-01-01 ERROR accept4: too many open files", "fd_exhausted", ["open file limit"]),
        ('level=error err="listen tcp :7443: bind: address already in use"', "port_in_use", [":7443"]),
        (
            "FATAL:  sorry, too many clients already",
            "db_connections_exhausted",
            ["PostgreSQL", "max_connections"],
        ),
        ("ERROR Too many connections", "db_connections_exhausted", ["MySQL"]),
        (
            "WARN tiles.example.net answered 429 Too Many Requests",
            "rate_limited",
            ["tiles.example.net", "429"],
        ),
        ("auth: jwt rejected: token used before issued", "clock_skew", ["clock", "not yet valid"]),
        ("x509: certificate has expired or is not yet valid", "clock_skew", ["clock skew"]),
        ("ImportError: cannot import name 'frob' from 'widgets'", "missing_dependency", ["dependency"]),
        ("Error: Cannot find module 'left-pad'", "missing_dependency", ["left-pad"]),
        ("java.lang.NoClassDefFoundError: org/acme/Thing", "missing_dependency", ["org/acme/Thing"]),
        ("write failed: No space left on device (df: 12% used, 100% inodes)", "inodes_exhausted", ["inodes"]),
        (
            "WARN ready? GET http://quarry.mine.svc:7000/health -> 503 Service Unavailable",
            "dependency_unavailable",
            ["quarry", "503"],
        ),
    ],
)
def test_a_key_line_is_read_for_the_cause_it_states(line, kind, needles):
    found, _ = findings_of(
        f"starting\n{line}\n", tool="fetch_pod_logs", params={"pod_name": "q-1", "namespace": "ink"}
    )
    match = [f for f in found if f.kind == kind]
    assert match, [f.summary for f in found]
    assert all(n in match[0].summary for n in needles), match[0].summary


def test_an_ordinary_log_states_no_cause():
    found, _ = findings_of(
        "GET /ok 200\nconnected to cache\n429 items synced\nclock tick\n",
        tool="fetch_pod_logs",
        params={"pod_name": "q-1", "namespace": "ink"},
    )
    assert not [f for f in found if f.rank >= 70], [f.summary for f in found]


def test_the_key_line_outranks_the_crash_loop_it_explains():
    crash, _ = findings_of(
        CRASH, tool="kubectl_describe", params={"kind": "pod", "name": "quill-7d8f9-abcde"}
    )
    logs, _ = findings_of(
        "boot\nModuleNotFoundError: No module named 'featherpen'\n",
        tool="fetch_pod_logs",
        params={"pod_name": "quill-7d8f9-abcde", "namespace": "ink"},
    )
    top = rank_findings([*crash, *logs])[0]
    assert top.kind == "missing_dependency" and "featherpen" in top.summary, top


def _pod(events: str, *, extra: str = "", status: str = "Pending", conditions: str = "") -> str:
    return f"""Name:             kiln-0
Namespace:        pottery
Status:           {status}
{extra}Containers:
  kiln:
    State:          Waiting
      Reason:       PodInitializing
    Ready:          False
    Restart Count:  0
Conditions:
  Type              Status
{conditions or "  PodScheduled      True"}
Events:
  Type     Reason            Age   From               Message
  ----     ------            ----  ----               -------
{events}
"""


def test_a_node_at_its_pod_capacity_is_named():
    text = _pod(
        "  Warning  FailedScheduling  2m  default-scheduler  0/7 nodes are available: 7 Too many pods.",
        conditions="  PodScheduled      False",
    )
    found, _ = findings_of(text, tool="kubectl_describe", params={"kind": "pod", "name": "kiln-0"})
    match = [f for f in found if f.kind == "node_pod_capacity"]
    assert match and "pod capacity" in match[0].summary and "maxPods" in match[0].summary, found


def test_an_init_container_that_never_completes_is_the_cause():
    init = (
        "Init Containers:\n  await-glaze:\n    Image:  busybox\n    Command:\n      sh\n      -c\n"
        "      until nc -z glaze 6000; do sleep 1; done\n    State:          Running\n"
        "      Started:      Mon, 01 Jan 2030 10:00:00 +0000\n"
        "    Ready:          False\n    Restart Count:  0\n"
    )
    text = _pod(
        "  <none>",
        extra=init,
        conditions="  Initialized       False\n  Ready             False\n  PodScheduled      True",
    )
    found, _ = findings_of(text, tool="kubectl_describe", params={"kind": "pod", "name": "kiln-0"})
    match = [f for f in found if f.kind == "init_incomplete"]
    assert match and "await-glaze" in match[0].summary and "nc -z glaze 6000" in match[0].summary, found
    assert match[0].is_problem


def test_a_workload_whose_pods_admission_forbids_is_named_with_the_reason():
    text = """Name:           kiln-6f7
Namespace:      pottery
Replicas:       0 current / 2 desired
Pods Status:    0 Running / 0 Waiting / 0 Succeeded / 0 Failed
Events:
  Type     Reason        Age   From                   Message
  ----     ------        ----  ----                   -------
  Warning  FailedCreate  1m    replicaset-controller  Error creating: pods "kiln-6f7-" is forbidden: {why}
""".format(why="maximum cpu usage per Container is 2, but limit is 4")
    found, _ = findings_of(text, tool="kubectl_describe", params={"kind": "replicaset", "name": "kiln-6f7"})
    match = [f for f in found if f.kind == "create_forbidden"]
    assert match and "maximum cpu usage per Container is 2" in match[0].summary, [f.summary for f in found]


@pytest.mark.parametrize(
    ("labels", "kind", "name"),
    [
        ({"alertname": "X", "namespace": "pottery", "ingress": "kiln-web"}, "ingress", "kiln-web"),
        (
            {"alertname": "X", "namespace": "pottery", "horizontalpodautoscaler": "kiln"},
            "horizontalpodautoscaler",
            "kiln",
        ),
        (
            {"alertname": "X", "namespace": "pottery", "customresource_kind": "Glaze", "name": "blue"},
            "glaze",
            "blue",
        ),
        (
            {
                "alertname": "X",
                "namespace": "pottery",
                "deployment": "kiln",
                "horizontalpodautoscaler": "kiln-hpa",
            },
            "deployment",
            "kiln",
        ),
    ],
)
def test_an_alert_label_named_after_a_kind_is_the_subject(labels, kind, name):
    subject = subject_from_labels(labels)
    assert (subject.kind, subject.name, subject.namespace) == (kind, name, "pottery")
