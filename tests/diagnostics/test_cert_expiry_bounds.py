"""Issue 39: a question that asks for certificates filtered by a time bound ("which expire in the next N
days", "within 2 weeks", "before <date>", "this month") is answered with the bound honoured: those within
it with their dates, "none" said outright, and the certificates whose expiry no read showed named as
unknown (never counted as "none"). Names, dates and phrasings are this file's own."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from diagnostics.agent.evidence.analyzers import AnalysisState, ToolOutput
from diagnostics.agent.questions import cert_expiry
from diagnostics.agent.questions.objects import asked, object_verdict
from diagnostics.agent.request.intent import classify
from diagnostics.agent.request.subject import from_text
from diagnostics.agent.request.timewindow import horizon
from diagnostics.agent.runner import MemoryRecorder, investigate
from diagnostics.toolsets.replay import ReplayEnvironment

ASKED = datetime(2027, 5, 12, 14, 0, tzinfo=UTC)  # a Wednesday
LISTING = """NAMESPACE   NAME            READY   SECRET              AGE
billing     invoices-tls    True    invoices-tls        200d
billing     stripe-hook     True    stripe-hook-tls     40d
intranet    wiki-tls        False   wiki-tls            500d
intranet    sso-tls         True    sso-tls             12d
"""


def _yaml(name: str, namespace: str, not_after: str, ready: str = "True", reason: str = "Ready") -> str:
    return (
        "apiVersion: cert-manager.io/v1\nkind: Certificate\n"
        f"metadata:\n  name: {name}\n  namespace: {namespace}\n"
        f'spec:\n  dnsNames:\n  - {name}.acme.test\nstatus:\n  notAfter: "{not_after}"\n  conditions:\n'
        f'  - type: Ready\n    status: "{ready}"\n    reason: {reason}\n'
    )


READS = {
    ("billing", "invoices-tls"): _yaml("invoices-tls", "billing", "2027-05-20T03:00:00Z"),  # in 7 days
    ("billing", "stripe-hook"): _yaml("stripe-hook", "billing", "2027-06-25T03:00:00Z"),  # in 43 days
    ("intranet", "wiki-tls"): _yaml("wiki-tls", "intranet", "2027-05-01T00:00:00Z", "False", "Expired"),
    # sso-tls: no read of its own (unknown)
}


def _state(question: str, *, listing: str | None = LISTING, reads: bool = True) -> AnalysisState:
    state = AnalysisState(from_text(question))
    state.intent = classify(question, anchor=ASKED)
    if listing is not None:
        state.record(ToolOutput("kubectl_get_by_kind_in_cluster", {"kind": "certificate"}, listing))
    for (namespace, name), text in READS.items() if reads else ():
        params = {"kind": "certificate", "name": name, "namespace": namespace}
        state.record(ToolOutput("kubectl_get_yaml", params, text))
    return state


@pytest.mark.parametrize(
    ("phrase", "end"),
    [
        ("which certs run out in the next 10 days?", ASKED + timedelta(days=10)),
        ("anything expiring within three weeks", ASKED + timedelta(days=21)),
        ("tls certificates that lapse in 36h", ASKED + timedelta(hours=36)),
        ("expiring over the coming 2 months", datetime(2027, 7, 12, 14, 0, tzinfo=UTC)),
        ("what expires before 2027-06-01?", datetime(2027, 6, 1, tzinfo=UTC)),
        ("certs expiring by June 3", datetime(2027, 6, 3, 23, 59, 59, tzinfo=UTC)),
        ("does anything expire this week", datetime(2027, 5, 16, 23, 59, 59, tzinfo=UTC)),
        ("expiring by the end of next month", datetime(2027, 6, 30, 23, 59, 59, tzinfo=UTC)),
        ("any cert expiring within a fortnight", ASKED + timedelta(days=14)),
    ],
)
def test_a_bound_ahead_is_read_in_any_unit_or_as_a_date(phrase: str, end: datetime) -> None:
    bound = horizon(phrase, ASKED)
    assert bound is not None and bound.end == end and bound.start == ASKED, (phrase, bound)


def test_a_window_in_the_past_or_no_bound_is_no_bound_ahead() -> None:
    assert horizon("which certs expired in the last 5 days", ASKED) is None
    assert horizon("when does the wiki cert expire?", ASKED) is None
    assert horizon("what expired before 2027-01-01", ASKED) is None  # a date already past


def test_which_certificates_are_asked_as_a_set_not_a_crash_about_certs() -> None:
    for question in (
        "Which TLS certs run out in the next 10 days?",
        "are there certificates expiring before 2027-06-01",
        "certs due to expire this week?",
        "list every certificate that expires within 3 weeks",
    ):
        assert cert_expiry.asks_which(question), question
        assert asked(_state(question, listing=None, reads=False)) == ("certificates", []), question
    for question in ("why is the api failing with expired certs?", "which pods restarted in the last hour?"):
        assert asked(_state(question, listing=None, reads=False))[0] != "certificates", question


def test_those_within_the_bound_are_listed_with_dates_expired_and_unknown_named() -> None:
    verdict = object_verdict(_state("Which TLS certs run out in the next 10 days?"))
    assert verdict is not None
    first, lines = verdict
    assert first.startswith(
        "1 of the 4 certificates expires in the next 10 days (by 2027-05-22 14:00 UTC): invoices-tls "
        "(namespace billing) expires on 2027-05-20 (03:00 UTC), in 7 days."
    ), first
    assert "Already expired: wiki-tls (namespace intranet) expired on 2027-05-01" in first
    assert "stripe-hook" not in first  # outside the bound
    assert any(line.startswith("Later: stripe-hook (namespace billing) on 2027-06-25") for line in lines)
    unknown = [line for line in lines if line.startswith("Unknown:")]
    assert unknown and "sso-tls (namespace intranet)" in unknown[0], lines


def test_a_wider_bound_takes_more_and_how_many_counts_them() -> None:
    verdict = object_verdict(_state("how many certificates expire within two months?"))
    assert verdict is not None and verdict[0].startswith("2 of the 4 certificates expire within two months")
    assert "invoices-tls" in verdict[0] and "stripe-hook" in verdict[0]


def test_none_within_the_bound_is_said_outright_with_the_soonest() -> None:
    verdict = object_verdict(_state("any certs expiring before 2027-05-15?"))
    assert verdict is not None
    assert verdict[0].startswith(
        "No certificate whose expiry was read (3 of 4) expires before 2027-05-15 (by 2027-05-15 00:00 UTC); "
        "the soonest, invoices-tls (namespace billing) expires on 2027-05-20"
    ), verdict[0]
    assert any("sso-tls" in line for line in verdict[1])  # unknown is not "none"


def test_nothing_read_is_no_data_and_an_empty_listing_says_what_was_not_read() -> None:
    nothing = object_verdict(
        _state("which certificates expire in the next 30 days?", listing=None, reads=False)
    )
    assert nothing is not None and nothing[0].startswith("No data: no read listed the certificates")
    listed_only = object_verdict(_state("which certificates expire in the next 30 days?", reads=False))
    assert listed_only is not None and listed_only[0].startswith("No data: none of the 4 certificates")
    empty = object_verdict(
        _state("which certificates expire this month?", listing="No resources found", reads=False)
    )
    assert empty is not None and empty[0].startswith("No certificate expires this month")
    assert "were not read, so they are unknown" in empty[0]


def test_a_named_certificate_against_the_bound_asked() -> None:
    state = _state("does the stripe-hook certificate expire within 6 weeks?")
    verdict = object_verdict(state)
    assert verdict is not None and verdict[0].startswith(
        "No: the certificate stripe-hook (namespace billing)"
    )
    assert "outside the bound asked (within 6 weeks" in verdict[0]
    valid = object_verdict(_state("is the invoices-tls certificate valid for the next 30 days?"))
    assert valid is not None and valid[0].startswith("No: the certificate invoices-tls"), valid[0]


def test_end_to_end_the_listing_then_each_certificate_s_own_read(tmp_path: Path) -> None:
    calls = {"list.txt": ("kubectl_get_by_kind_in_cluster", {"kind": "certificate"}, LISTING)}
    for (namespace, name), text in READS.items():
        params = {"kind": "certificate", "name": name, "namespace": namespace}
        calls[f"{name}.txt"] = ("kubectl_get_yaml", params, text)
    for file, (tool, params, out) in calls.items():
        header = {"toolset_name": "kubernetes/core", "tool_name": tool, "match_params": params}
        meta = {"status": "success"}
        (tmp_path / file).write_text(f"{json.dumps(header)}\n{json.dumps(meta)}\nstdout:\n\n{out}\nstderr:\n")
    alert = from_text("any TLS certs expiring within 10 days?")
    alert.asked_at = ASKED
    outcome = investigate(
        alert=alert,
        environment=ReplayEnvironment({"case_dir": str(tmp_path)}),
        recorder=MemoryRecorder(),
        mode="analyzers",
    )
    assert outcome.diagnosis.startswith("1 of the 4 certificates expires within 10 days"), outcome.diagnosis
    assert "sso-tls" in outcome.diagnosis  # its read was tried and returned nothing: unknown
