"""The recurring-log-failure analyzer ranks the application's own error lines above access-log status lines:
an access log's repeated 500s say that requests fail, the application's ERROR lines say why. Checked on the
shapes access logs come in (Common/Combined Log Format, logfmt, JSON) beside an application's ERROR lines
(plain, logfmt, JSON), whichever repeats more; an access log alone is still the failure it reports."""

from __future__ import annotations

import json

import pytest

from diagnostics.agent.evidence.analyzers import AnalysisState, ToolOutput, analyze
from diagnostics.agent.findings import Finding
from diagnostics.agent.request.subject import AlertContext


def _found(lines: list[str]) -> list[Finding]:
    out = ToolOutput("fetch_pod_logs", {"pod_name": "ledger-api-0", "namespace": "books"}, "\n".join(lines))
    return [f for f in analyze(out, AnalysisState(AlertContext())) if f.kind == "recurring_log_failure"]


def _clf(m: int) -> str:
    return (
        f'10.4.0.{m} - - [01/Mar/2026:10:{m:02d}:10 +0000] "POST /v1/entries HTTP/1.1" 500 87 "-" "curl/8.5"'
    )


def _access_logfmt(m: int) -> str:
    return f"ts=2026-03-01T10:{m:02d}:10Z level=error method=POST path=/v1/entries status=500 duration_ms={m}"


def _access_json(m: int) -> str:
    record = {"time": f"2026-03-01T10:{m:02d}:10Z", "level": "error", "method": "POST", "status": 500}
    return json.dumps({**record, "path": "/v1/entries", "msg": "request completed"})


def _app_plain(m: int) -> str:
    return (
        f"2026-03-01T10:{m:02d}:11Z ERROR ledger.store: insert failed: relation entries_{m % 2} is read-only"
    )


def _app_logfmt(m: int) -> str:
    return f'ts=2026-03-01T10:{m:02d}:11Z level=error msg="insert failed" err="disk quota exceeded on /data"'


def _app_json(m: int) -> str:
    record = {"time": f"2026-03-01T10:{m:02d}:11Z", "level": "ERROR", "logger": "ledger.store"}
    return json.dumps({**record, "message": "insert failed: disk quota exceeded on /data"})


ACCESS = {"combined": _clf, "logfmt": _access_logfmt, "json": _access_json}
APP = {"plain": _app_plain, "logfmt": _app_logfmt, "json": _app_json}


@pytest.mark.parametrize("access", sorted(ACCESS))
@pytest.mark.parametrize("app", sorted(APP))
def test_the_applications_error_lines_rank_above_repeated_access_log_500s(access: str, app: str) -> None:
    lines = []
    for m in range(30, 50):  # 20 access-log 500s, 4 application errors among them, all current
        lines.append(ACCESS[access](m))
        if m % 5 == 0:
            lines.append(APP[app](m))
    (finding,) = _found(lines)
    assert "insert failed" in finding.summary, finding.summary
    assert "/v1/entries" not in finding.summary and "4 times" in finding.summary


# (A Combined Log Format line carries no level: alone it is not a failure line for this analyzer.)
@pytest.mark.parametrize("access", ["json", "logfmt"])
def test_an_access_log_alone_is_still_the_failure_it_reports(access: str) -> None:
    (finding,) = _found([ACCESS[access](m) for m in range(30, 50)])
    assert "20 times" in finding.summary, finding.summary
