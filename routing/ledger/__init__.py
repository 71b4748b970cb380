"""The ledger: one Invocation row per call, with its cost, legs and verdict, written off the request path.

- ``record``: what a row holds (``CallRecord``, ``Leg``), how it becomes a row, which bodies are stored
  and for how long;
- ``writer``: ``record_call``, committed at once (``sync``) or group-committed behind a journal
  (``batched``);
- ``journal``: each process's journal of rows not yet committed, replayed after a crash;
- ``bulk_copy``: the group commit's insert (COPY on PostgreSQL, one executemany on SQLite);
- ``learning_spend``: what the learning loop spends, on the ledger like any call.

The ledger sits above budgets (a row settles its call's hold) and below the call code; it reaches up only
through the hook routing/apps.py registers (``journal.on_sampled_rows``).
"""

from routing.ledger.record import (
    HAS_BODY,
    CallRecord,
    Leg,
    digest,
    has_body,
    invocation_of,
    ledger_bodies_purge,
    ledger_row,
    request_stub,
    stores_bodies,
)
from routing.ledger.writer import record_call

__all__ = [
    "HAS_BODY",
    "CallRecord",
    "Leg",
    "digest",
    "has_body",
    "invocation_of",
    "ledger_bodies_purge",
    "ledger_row",
    "record_call",
    "request_stub",
    "stores_bodies",
]
