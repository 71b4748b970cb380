"""Seeds a onebox's database from outside it (run inside its environment, as its own process):

    python -m tests.deploy.onebox_seed STUB_URL

makes the teacher and the student on the stub upstream at STUB_URL, the ``extract`` profile (the
learning cycles' JSON task), an unlimited key, and an operator key with the learning scopes; prints
their raw secrets as JSON. The budget test makes its own key later (``budget_key``)."""

from __future__ import annotations

import json
import sys
from decimal import Decimal


def seed(stub_url: str) -> dict[str, str]:
    from routing.models import Backend
    from tests.factories import BackendFactory, make_key, make_role_key
    from tests.support.cycle import json_profile
    from tests.support.gateway import STUDENT_PRICES, TEACHER_PRICES

    teacher = BackendFactory.create(
        name="teacher",
        role=Backend.Role.TEACHER,
        model="openai/teacher-model",
        api_base=stub_url,
        input_cost_per_token=TEACHER_PRICES[0],
        output_cost_per_token=TEACHER_PRICES[1],
    )
    student = BackendFactory.create(
        name="student",
        role=Backend.Role.STUDENT,
        model="openai/student-model",
        api_base=stub_url,
        input_cost_per_token=STUDENT_PRICES[0],
        output_cost_per_token=STUDENT_PRICES[1],
    )
    json_profile(teacher=teacher, student=student)
    learning = make_role_key("operator", "operator", scopes=["learning:read", "learning:write"])
    return {"key": make_key(name="caller").raw, "learning": learning.raw}


def budget_key(budget_usd: str) -> dict[str, str]:
    from tests.factories import make_key

    pair = make_key(name="budgeted", budget_usd=Decimal(budget_usd))
    return {"key": pair.raw, "id": str(pair.pk)}


def main(argv: list[str]) -> None:
    import django

    django.setup()
    result = budget_key(argv[2]) if argv[1] == "--budget" else seed(argv[1])
    sys.stdout.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main(sys.argv)
