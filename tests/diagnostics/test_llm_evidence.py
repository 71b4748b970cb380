"""The evidence check of an LLM's answer (diagnostics/agent/evidence/claims.py): what it cites must be in what
the tools returned or the findings."""

from __future__ import annotations

import pytest

from diagnostics.agent.evidence.claims import check_answer, claims

EVIDENCE = [
    'kubectl_get_by_kind_in_namespace {"kind": "pod", "namespace": "shop"}\n'
    "NAME                        READY   STATUS             RESTARTS\n"
    "checkout-7d9f8c6b5d-x2x9q   0/1     CrashLoopBackOff   14\n"
    "cart-5b6c7d8e9f-abcde       1/1     Running            0\n",
    "fetch_pod_logs {}\n2026-11-24T09:12:03Z ERROR could not connect to orders-db:5432: connection refused",
    "Pod checkout-7d9f8c6b5d-x2x9q restarted 14 times (CrashLoopBackOff).",
]


def check(answer: str, *, problems: bool = True, empty: bool = False):  # type: ignore[no-untyped-def]
    return check_answer(answer, EVIDENCE, problems_found=problems, reads_empty=empty)


def test_what_an_answer_cites():
    found = claims(
        'checkout-7d9f8c6b5d-x2x9q restarted 14 times; the log says "connection refused".\n'
        "> [checkout] 2026-11-24T09:12:03Z ERROR could not connect to orders-db:5432: connection refused…\n"
        "It has 3 containers and DEPLOY_ENV is set."
    )
    assert "checkout-7d9f8c6b5d-x2x9q" in found and "14" in found and "connection refused" in found
    assert "2026-11-24T09:12:03Z ERROR could not connect to orders-db:5432: connection refused" in found
    assert "DEPLOY_ENV" in found
    assert "3" not in found  # single digits prove nothing


@pytest.mark.parametrize(
    "answer",
    [
        "checkout-7d9f8c6b5d-x2x9q is in CrashLoopBackOff after 14 restarts.",
        "> [checkout-7d9f8c6b5d-x2x9q] 2026-11-24T09:12:03Z ERROR could not connect to orders-db:5432",
        'The checkout pod cannot reach `orders-db:5432`: "connection refused".',
        "CHECKOUT-7d9f8c6b5d-X2X9Q   restarted   14 times",  # case and spacing do not matter
    ],
)
def test_answers_grounded_in_the_evidence_pass(answer):
    result = check(answer)
    assert result.ok, result.problems
    assert result.cited >= 1


@pytest.mark.parametrize(
    ("answer", "why"),
    [
        ("checkout-7d9f8c6b5d-x2x9q restarted 41 times.", "'41' is in no tool output"),
        ("checkout-7d9f8c6b5d-x2x9q restarted 140 times.", "'140' is in no tool output"),
        ("payments-6f7g8h-zzzzz is crashing.", "'payments-6f7g8h-zzzzz'"),
        ('The log says "disk full on /var/lib/postgres".', "'disk full on /var/lib/postgres'"),
        ("> 2026-11-24T09:12:03Z ERROR disk quota exceeded", "disk quota exceeded"),
        ("The pod is crashing.", "cites nothing"),
        ("checkout-7d9f8c6b5d-x2x9q looks healthy.", "but the findings hold problems"),
        ("", "empty"),
        ("x" * 5000, "longer than"),
    ],
)
def test_answers_with_a_claim_no_tool_showed_fail(answer, why):
    result = check(answer)
    assert not result.ok and why in result.reason, result.problems


def test_saying_something_is_not_healthy_is_no_health_claim():
    result = check("checkout-7d9f8c6b5d-x2x9q is not healthy: it restarted 14 times.")
    assert result.ok, result.problems
    assert not check("checkout-7d9f8c6b5d-x2x9q is perfectly healthy.").ok


def test_healthy_on_empty_reads_fails_even_without_problem_findings():
    assert check("cart-5b6c7d8e9f-abcde is healthy.", problems=False).ok
    result = check("cart-5b6c7d8e9f-abcde is healthy.", problems=False, empty=True)
    assert not result.ok and "every read was empty" in result.reason
