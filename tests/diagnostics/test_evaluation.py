"""Replay evaluation: cases, the analyzers-only agent on recorded cases, grading and best@k/avg@k."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import CommandError, call_command

from diagnostics.agent.runner import MemoryRecorder, investigate
from diagnostics.evaluation.cases import discover_cases, expected_facts, load_case
from diagnostics.evaluation.grading import entities, grade_fact, keyword_grade
from diagnostics.evaluation.metrics import avg_at_k, best_at_k, pass_rate
from diagnostics.toolsets.replay import ReplayEnvironment
from tests.support.fake_environment import CASES


def diagnose(case_name: str) -> tuple[str, list[str], list[dict[str, object]]]:
    case = load_case(CASES / case_name, CASES)
    outcome = investigate(
        alert=case.alert(),
        environment=ReplayEnvironment({"case_dir": str(case.path)}),
        recorder=MemoryRecorder(),
        mode="analyzers",
    )
    return outcome.diagnosis, case.expected or [], outcome.tool_calls


def test_cases_give_the_agent_the_alert_or_question_never_the_expected_facts():
    cases = {c.name: c for c in discover_cases(CASES)}
    assert len(cases) == 22
    pvc = cases["test_ask_holmes/24b_misconfigured_pvc_detailed"]
    assert pvc.alert().subject.name == "redis" and "standard-v2" not in pvc.alert().as_text()
    oom = cases["test_investigate/01_oom_kill"].alert()
    assert (oom.subject.kind, oom.subject.namespace) == ("pod", "default")
    assert expected_facts("- one\n- two\n") == ["one", "two"] and expected_facts("one fact") == ["one fact"]


@pytest.mark.parametrize(
    ("case", "needles"),
    [
        # the pod is not in the namespace the search reported: found again by listing namespaces
        ("test_ask_holmes/24b_misconfigured_pvc_detailed", ["standard-v2", "does not exist", "redis"]),
        # not a Kubernetes workload: found in the Argo CD app list, a namespace typo
        (
            "test_ask_holmes/37_argocd_wrong_namespace",
            ["`my-demoshop-namespaces`", "`my-demoshop-namespace`"],
        ),
        # found nowhere: says so
        ("test_ask_holmes/19_detect_missing_app_details", ["Could not find personal-certs-validator"]),
        # an alert with a subject: OOM and crash loop
        ("test_investigate/01_oom_kill", ["OOMKilled", "CrashLoopBackOff", "100Mi"]),
    ],
)
def test_the_analyzers_only_agent_on_recorded_cases(case, needles):
    diagnosis, expected, calls = diagnose(case)
    assert all(needle in diagnosis for needle in needles), diagnosis
    assert keyword_grade(expected, diagnosis).passed
    assert len(calls) <= 40


def test_keyword_grading_needs_every_entity_and_most_content_words():
    assert entities('The `DEPLOY_ENV` variable and "label=a" on prod-db:3333, 5 to 10 s') == [
        "DEPLOY_ENV",
        "label=a",
        "prod-db:3333",
        "5",
        "10",
    ]
    assert grade_fact(
        "The pod was killed due to it being out of memory", "Pod x was OOMKilled (exit 137)."
    ).passed
    assert not grade_fact(
        "The pod was killed due to it being out of memory", "Pod x crashed with exit 1."
    ).passed
    assert grade_fact(
        "Database calls take between 5 to 10 seconds", "database calls took 5.00 to 10.01 seconds"
    ).passed
    assert not grade_fact(
        "Database calls take between 5 to 10 seconds", "database calls took 2 seconds"
    ).passed
    assert not grade_fact("`prod-db:3333` is unreachable", "prod-db is unreachable").passed


def test_alternatives_and_health_verdicts():
    fact = (
        "KEDA is not installed in your cluster OR you have no KEDA scaler for this resource (either is fine)"
    )
    assert grade_fact(fact, "No KEDA scaler is defined for this resource.").passed
    assert grade_fact("Says it does in fact seem healthy", "It appears healthy.").passed
    assert not grade_fact(
        "Says it does in fact seem healthy", "Root cause: OOM.\nworkload_healthy: false"
    ).passed
    assert grade_fact("workload_healthy flag should be false", "workload_healthy: false").passed


def test_pass_rate_best_at_k_and_avg_at_k():
    results = {"a": [True, False, False], "b": [False, False, False], "c": [True, True, True]}
    assert pass_rate(results) == pytest.approx(4 / 9)
    assert best_at_k(results) == pytest.approx(2 / 3)
    assert avg_at_k(results) == pytest.approx((1 / 3 + 0 + 1) / 3)


def test_diagnose_replay_prints_the_table_and_writes_json(tmp_path):
    out = io.StringIO()
    target = tmp_path / "runs.json"
    call_command(
        "diagnose_replay",
        "--cases",
        str(CASES),
        "--case",
        "test_investigate/0",
        "--runs",
        "2",
        "--json",
        str(target),
        "--no-llm",
        stdout=out,
        stderr=io.StringIO(),
    )
    text = out.getvalue()
    assert "pass rate 100.0% (4/4 graded runs)" in text and "best@2 100.0%" in text and "avg@2 100.0%" in text
    runs = json.loads(target.read_text())
    assert [r["case"] for r in runs] == ["test_investigate/01_oom_kill"] * 2 + [
        "test_investigate/04_image_pull_backoff"
    ] * 2
    assert {"case", "diagnosis", "findings", "tool_calls", "passed"} <= set(runs[0])
    assert runs[0]["tool_calls"][0].keys() >= {"tool", "params", "no_data"}
    with pytest.raises(CommandError):
        call_command("diagnose_replay", "--cases", str(tmp_path / "nope"), stdout=io.StringIO())


def _record(folder, name, tool, match, body):  # type: ignore[no-untyped-def]
    header = {"toolset_name": "kubernetes/core", "tool_name": tool, "match_params": match}
    (folder / name).write_text(f"{json.dumps(header)}\n{json.dumps({'status': 'success'})}\n{body}\n")


def test_an_unseen_incident_of_a_known_kind_is_diagnosed_end_to_end(tmp_path):
    """Not one of the development cases: a Node app crashing on a missing config file, in a
    namespace the question does not name."""
    case = tmp_path / "orders" / "01_missing_config"
    case.mkdir(parents=True)
    (case / "test_case.yaml").write_text(
        "user_prompt: Why does orders-api keep restarting?\n"
        "expected_output:\n  - orders-api cannot find its config file /app/config/settings.json\n"
    )
    _record(
        case,
        "find.txt",
        "kubectl_find_resource",
        {"kind": "pod", "keyword": "orders-api"},
        "commerce   orders-api-5f7c9d8b6-qwz8k   0/1   CrashLoopBackOff   12 (1m ago)   40m",
    )
    pod = """Name:         orders-api-5f7c9d8b6-qwz8k
Namespace:    commerce
Status:       Running
Controlled By:  ReplicaSet/orders-api-5f7c9d8b6
Containers:
  api:
    Image:          shop/orders-api:4.2.0
    State:          Waiting
      Reason:       CrashLoopBackOff
    Last State:     Terminated
      Reason:       Error
      Exit Code:    1
    Ready:          False
    Restart Count:  12
Events:
  Type     Reason   Age                From     Message
  Warning  BackOff  1m (x40 over 40m)  kubelet  Back-off restarting failed container api in pod orders-api
"""
    _record(
        case,
        "describe.txt",
        "kubectl_describe",
        {"kind": "pod", "name": "orders-api-5f7c9d8b6-qwz8k", "namespace": "commerce"},
        pod,
    )
    _record(
        case,
        "logs.txt",
        "fetch_pod_logs",
        {"pod_name": "orders-api-5f7c9d8b6-qwz8k", "namespace": "commerce"},
        "node:internal/fs/utils:347\n    throw err;\n"
        "Error: ENOENT: no such file or directory, open '/app/config/settings.json'\n",
    )
    out = io.StringIO()
    call_command("diagnose_replay", "--cases", str(tmp_path), "--no-llm", stdout=out, stderr=io.StringIO())
    assert "pass rate 100.0% (1/1 graded runs)" in out.getvalue(), out.getvalue()
