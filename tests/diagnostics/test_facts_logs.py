"""Analyzers that name the decisive fact, in logs: the failing command or script line, a runtime's exec
error, a stop signal after progress; and recorded escapes undone but a JSON document's kept. The inputs use
names that appear in no case, so a rule keyed to a case's entities fails."""

from __future__ import annotations

import json

import pytest

from tests.support.findings import findings_of, kinds


@pytest.mark.parametrize(
    ("log", "kind", "needles"),
    [
        (
            "start\n/opt/run/etl.sh: line 31: syntax error near unexpected token `done'\n",
            "shell_syntax_error",
            ["/opt/run/etl.sh", "line 31", "`done'"],
        ),
        (
            "bash: line 2: unexpected EOF while looking for matching `''\n",
            "shell_syntax_error",
            ["line 2", "unexpected EOF"],
        ),
        ('sh: 4: Syntax error: end of file unexpected (expecting "then")', "shell_syntax_error", ["line 4"]),
        ("/bin/sh: 1: nodee: not found", "command_not_found", ["`nodee`", "did you mean `node`"]),
        ("bash: line 1: frobnicate: command not found", "command_not_found", ["`frobnicate`", "127"]),
    ],
)
def test_the_failing_command_or_line_is_named(log, kind, needles):
    found, _ = findings_of(log, tool="fetch_pod_logs", params={"pod_name": "p-1", "namespace": "n"})
    match = [f for f in found if f.kind == kind]
    assert match, [f.summary for f in found]
    assert all(n in match[0].summary for n in needles), match[0].summary
    if "frobnicate" in log:  # not close to any well-known program: no guess
        assert "did you mean" not in match[0].summary


def test_an_exec_error_of_the_runtime_names_the_command():
    text = (
        "Name: w-1\nNamespace: n\nContainers:\n  c:\n    Last State:     Terminated\n"
        '      Message:      exec: "uvicron": executable file not found in $PATH: unknown\n'
    )
    found, _ = findings_of(text, params={"kind": "pod", "name": "w-1", "namespace": "n"})
    exec_failed = [f for f in found if f.kind == "exec_failed"]
    assert exec_failed and "`uvicron`" in exec_failed[0].summary and "`uvicorn`" in exec_failed[0].summary


def test_a_log_that_ends_on_a_stop_signal_after_progress_says_it_was_stopped_mid_work():
    log = "t1 copying shards 10 of 90\nt2 copying shards 40 of 90\nt3 caught SIGTERM, shutting down\n"
    found, _ = findings_of(log, tool="fetch_pod_logs", params={"pod_name": "pylon-7", "namespace": "quarry"})
    stopped = [f for f in found if f.kind == "stopped_mid_work"]
    assert len(stopped) == 1 and "SIGTERM" in stopped[0].summary and "40 of 90" in stopped[0].summary
    # A signal with no progress before it (a plain shutdown) is not this finding.
    found, _ = findings_of(
        "t1 ready\nt2 caught SIGTERM, shutting down\n", tool="fetch_pod_logs", params={"pod_name": "p"}
    )
    assert "stopped_mid_work" not in kinds(found)


def test_a_json_document_keeps_its_own_escapes():
    from diagnostics.agent.evidence.analyzers import normalize

    document = json.dumps({"statement": 'SELECT "x"'})
    assert json.loads(normalize(document)) == {"statement": 'SELECT "x"'}
    assert normalize('log line with \\"quotes\\"') == 'log line with "quotes"'
