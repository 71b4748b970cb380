"""How many ledger rows per second one writer commits, through the real commit path
(routing/ledger/journal.py ``commit``: bulk_create of the Invocation rows plus the spend flush of their
key and lease, in one transaction), per batch size: 1 is LEDGER_WRITER "sync" (one transaction per call),
larger batches are what "batched" group-commits. A number for the capacity model (docs/operations/scaling.md).

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/skillgate_capacity \\
        .venv/bin/python infra/capacity/ledger_commit_rate.py [--rows 3000] [--batches 1,50,500]

It migrates the database it is given and writes rows into it: point it at a scratch database (with SQLite
the default is a fresh file under var/capacity/). Prints one JSON line per batch size.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import uuid
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=3000, help="rows per batch size")
    parser.add_argument("--batches", default="1,50,500", help="batch sizes, comma-separated")
    args = parser.parse_args()
    if not os.environ.get("DATABASE_URL"):
        scratch = ROOT / "var" / "capacity" / "ledger.sqlite3"
        scratch.parent.mkdir(parents=True, exist_ok=True)
        scratch.unlink(missing_ok=True)
        os.environ["DATABASE_URL"] = f"sqlite:///{scratch}"
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "app.settings")

    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection
    from django.utils import timezone

    from routing import budgets
    from routing.ledger import CallRecord, Leg, ledger_row
    from routing.ledger.journal import Entry, commit
    from routing.models import ApiKey, BudgetLease, Invocation, TaskProfile

    call_command("migrate", interactive=False, verbosity=0)
    key = ApiKey.objects.create(name="capacity", prefix=f"cap{uuid.uuid4().hex[:12]}", key_hash="0" * 64)
    key.budget_usd = Decimal(10_000)
    key.reserved_usd = Decimal(100)
    key.save()
    profile, _ = TaskProfile.objects.get_or_create(name="capacity")
    lease = BudgetLease.objects.create(
        api_key=key,
        process_id="capacity-1-0",
        host="capacity",
        amount_usd=Decimal(100),
        expires_at=timezone.now() + timedelta(hours=1),
    )
    messages = [{"role": "user", "content": "Extract the city as JSON: Paris is the capital of France."}]

    def entry() -> Entry:
        record = CallRecord(
            id=uuid.uuid4(),
            api_key_id=key.pk,
            profile_id=profile.pk,
            requested_model="auto",
            route="student",
            policy="router",
            score=0.2,
            stream=False,
            request={"model": "auto", "messages": messages},
            legs=[
                Leg(
                    backend="student",
                    role="student",
                    model="hosted_vllm/s",
                    prompt_tokens=40,
                    completion_tokens=8,
                    cost_usd=Decimal("0.0000028"),
                    latency_ms=120.0,
                )
            ],
            served_by="student",
            verdict="pass",
            response={"choices": [{"message": {"role": "assistant", "content": '{"city": "Paris"}'}}]},
            latency_ms=130.0,
            overhead_ms=2.0,
        )
        e = Entry(ledger_row(record), budgets.Spend(key_id=key.pk, cost=record.cost_usd, lease_id=lease.id))
        return e

    for size in [int(s) for s in args.batches.split(",")]:
        entries = [entry() for _ in range(args.rows)]
        before = Invocation.objects.count()
        start = time.perf_counter()
        for i in range(0, len(entries), size):
            commit(entries[i : i + size])
        elapsed = time.perf_counter() - start
        assert Invocation.objects.count() - before == len(entries)
        print(
            json.dumps(
                {
                    "database": connection.vendor,
                    "batch": size,
                    "rows": len(entries),
                    "seconds": round(elapsed, 3),
                    "rows_per_s": round(len(entries) / elapsed),
                    "ms_per_commit": round(elapsed / -(-len(entries) // size) * 1000, 2),
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()
