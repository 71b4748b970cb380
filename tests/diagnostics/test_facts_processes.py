"""Analyzers that name the decisive fact, across a machine's processes: a stopped process others cannot
reach, a process burning CPU while requests are slow; named the cause in either order. The inputs use names
that appear in no case, so a rule keyed to a case's entities fails."""

from __future__ import annotations

from diagnostics.agent.evidence.analyzers import AnalysisState, ToolOutput, analyze
from diagnostics.agent.request.subject import AlertContext
from tests.support.findings import findings_of, kinds


def test_a_stopped_process_that_others_cannot_reach_is_named_the_cause_in_either_order():
    status = "quillsvc   RUNNING   pid 10, uptime 0:10:00\nvaultd     STOPPED   Dec 01 03:39 PM\n"
    log = "\n".join(
        f"12:00:0{i} ERROR quillsvc: connect to 10.9.8.7:6400 failed: Connection refused" for i in range(4)
    )
    outputs = [
        ("list_processes", {}, status),
        ("tail_log", {"service": "quillsvc"}, log),
    ]
    for order in (outputs, outputs[::-1]):
        state = AnalysisState(AlertContext())
        found = [f for tool, params, text in order for f in analyze(ToolOutput(tool, params, text), state)]
        cause = [f for f in found if f.kind == "dependency_stopped"]
        assert len(cause) == 1, [f.summary for f in found]
        assert cause[0].summary.startswith(
            "vaultd is not running, and quillsvc cannot connect to 10.9.8.7:6400"
        )
        assert cause[0].rank > max(f.rank for f in found if f.kind in ("process_down", "connection_failure"))
        assert cause[0].remedy is not None and cause[0].remedy.target == "vaultd"
    alone, _ = findings_of(status, tool="list_processes")
    assert "dependency_stopped" not in kinds(alone)  # nobody failed to reach it: just a stopped process


def test_a_process_burning_cpu_while_requests_are_slow_is_named_the_cause():
    top = (
        "NAME      PID    CPU%   RSS_MB  UPTIME_S\nquillsvc  4101   88.0   40      600\n"
        "vaultd    4102   2.0    30      600\nfrontd    4103   3.0    30      600\n"
    )
    slow = "\n".join(f"12:00:0{i} WARNING slow request GET /dash took 40{i} ms" for i in range(5))
    state = AnalysisState(AlertContext())
    found = analyze(ToolOutput("tail_log", {"service": "frontd"}, slow), state)
    assert "cpu_bound_latency" not in kinds(found)  # slow, but nothing busy yet
    found += analyze(ToolOutput("process_top", {}, top), state)
    cause = [f for f in found if f.kind == "cpu_bound_latency"]
    assert len(cause) == 1 and cause[0].summary.startswith(
        "quillsvc is busy on CPU while requests are slow in frontd"
    )
    assert cause[0].rank > max(f.rank for f in found if f.kind in ("high_latency", "cpu_saturation"))
    assert cause[0].remedy is not None and cause[0].remedy.target == "quillsvc"
