"""One money format in what commands print and messages say (issue 41): ``core.money.money_display``
for people, ``money_json`` for machines, never a hand-formatted ``$0.004358`` or ``8.4e-07 USD``."""

from __future__ import annotations

import re
from collections import Counter
from decimal import Decimal
from pathlib import Path

from app.demo_cycle import Summary, change
from routing.budgets.store import BudgetExceeded

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("app", "routing", "diagnostics", "training")
# A dollar sign before a float format ("${cost:.6f}"), an amount with a fixed format before "USD", or a
# raw money field after a dollar sign ("${key.budget_usd}": str(Decimal) may be "0E-8").
HAND_FORMATTED = re.compile(
    r"\$\{[^}]*:[^}]*[fgeF%]\}"
    r"|\{[^}]*:\.?\d*[fge]\} ?USD"
    r"|\$\{[\w.\[\]'\"]*(?:cost|usd|budget|spent|spend|amount|saving|price)[\w.\[\]'\"]*\}",
    re.IGNORECASE,
)


def summary(cost: str) -> Summary:
    return Summary(
        calls=19,
        direct=0.0,
        policy=0.42,
        fallback=1.0,
        cost_usd=Decimal(cost),
        student_models=Counter(base=19),
    )


def test_no_hand_formatted_money_in_the_product() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for top in PRODUCT
        for path in sorted((ROOT / top).rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if HAND_FORMATTED.search(line)
    ]
    assert not found, "format money with core.money (money_display/money_json):\n" + "\n".join(found)


def test_the_guard_sees_the_shapes_it_forbids() -> None:
    for line in (
        'f"cost ${self.cost_usd:.6f}"',
        "f\"neither cost ({cand['cost_usd']:.6g} vs {act['cost_usd']:.6g} USD per call)\"",
        "f\"{cand['cost_usd']:.6g} USD per call\"",
        'f"budget (${key.budget_usd}) cannot"',
        'f"${test.rate:.6f}"',
    ):
        assert HAND_FORMATTED.search(line), line
    for line in ('f"cost {money_display(cost)}"', 'f"{rate:.3f} pass"', 'return "$" + "".join(parts)'):
        assert not HAND_FORMATTED.search(line), line


def test_the_demo_cycle_prints_costs_in_the_dashboard_format() -> None:
    before, after = summary("0.004358"), summary("0.000195")
    assert "cost $0.00436; student model: base x19" in before.line()
    assert change(before, after).endswith("cost $0.00436 -> $0.000195")
    assert "$" not in change(summary("0"), summary("1234.5")).replace("$0 -> $1,234.50", "")


def test_a_refused_budget_names_the_amount_in_the_dashboard_format() -> None:
    assert "may cost up to $0.000123, more" in BudgetExceeded(Decimal("0.00012345")).message
    assert "may cost up to $12.50, more" in BudgetExceeded(Decimal("12.5")).message
