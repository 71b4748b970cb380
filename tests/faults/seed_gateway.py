"""Seeds a database for a gateway process the test does not share its database with (the private
PostgreSQL of tests/faults/test_dependencies_down.py): the teacher and student backends on the
stub upstream, at the suite's prices, and one key; prints the key.

Run as ``python -m tests.faults.seed_gateway STUB_BASE_URL BUDGET_USD`` with DATABASE_URL set.
"""

from __future__ import annotations

import sys
from decimal import Decimal

import django


def main() -> None:
    django.setup()
    from routing.models import Backend
    from tests.factories import BackendFactory, make_key
    from tests.support.gateway import STUDENT_PRICES, TEACHER_PRICES

    stub_url, budget = sys.argv[1], Decimal(sys.argv[2])
    for role, prices in ((Backend.Role.TEACHER, TEACHER_PRICES), (Backend.Role.STUDENT, STUDENT_PRICES)):
        BackendFactory.create(
            name=str(role),
            role=role,
            model=f"openai/{role}-model",
            api_base=stub_url,
            input_cost_per_token=prices[0],
            output_cost_per_token=prices[1],
        )
    print(make_key(name="pg-down", budget_usd=budget).raw)


if __name__ == "__main__":
    main()
