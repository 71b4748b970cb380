"""kubectl prints a restarted container's count as ``11 (3m ago)``; split on blanks it was three cells
and every later column (AGE, IP, NODE of ``-o wide``) read its neighbour's value."""

from __future__ import annotations

from diagnostics.agent.evidence.analyzers.base import parse_table, table_cells

WIDE = """\
NAME                     READY  STATUS            RESTARTS       AGE  IP          NODE    NOMINATED NODE
api-7d9f8b6c5d-2kq8p     0/1    CrashLoopBackOff  11 (3m ago)    41m  10.4.2.17   node-b  <none>
api-7d9f8b6c5d-x9z4m     1/1    Running           0              41m  10.4.1.9    node-a  <none>
worker-5c7b9d8f6-llm2q   1/1    Running           2 (2d13h ago)  6d   10.4.3.22   node-c  <none>
"""


def test_a_restart_count_with_its_age_is_one_cell_and_later_columns_line_up() -> None:
    table = parse_table(WIDE)
    assert table is not None
    by_name = {table.column(row, "NAME"): row for row in table.rows}
    crashing = by_name["api-7d9f8b6c5d-2kq8p"]
    assert table.column(crashing, "RESTARTS") == "11 (3m ago)"
    assert table.column(crashing, "AGE") == "41m"
    assert table.column(crashing, "NODE") == "node-b"
    assert table.column(by_name["worker-5c7b9d8f6-llm2q"], "NODE") == "node-c"
    assert table.column(by_name["api-7d9f8b6c5d-x9z4m"], "IP") == "10.4.1.9"


def test_other_parentheses_are_left_as_they_are() -> None:
    assert table_cells(["svc", "ClusterIP", "(none)", "80/TCP"]) == ["svc", "ClusterIP", "(none)", "80/TCP"]
    assert table_cells(["p", "0", "(5m", "ago)", "1h"]) == ["p", "0 (5m ago)", "1h"]
