"""Bodies of non-ASCII text cost what their bytes do (issue 37, round seven).

Eight concurrent 3.6 MB chat bodies of CJK text held ``GET /v1/models`` for 0.82-1.05 s (ASCII bodies of
the same size: 0.46 s). The body's turn (routing/call/body_work.py) already bounds the parse and the
pricing; the rest was the ledger's insert on SQLite (the embedded default), which encoded each JSON
column with ``json.dumps``: every CJK character a 6-byte ``\\u`` escape, 7.5 MB and 12-20 ms of the
GIL per row in the ledger's thread, beside the event loop. routing/ledger/bulk_copy.py now writes the
columns with orjson in UTF-8 (Django reads either back the same).
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from django.db import connection

from routing.models import Invocation
from tests.support.liveness import models_keep_answering

CHARACTERS = 1_250_000  # 3.75 MB of UTF-8, under SKILLGATE_MAX_BODY_BYTES
TEXT = "\u6f22" * CHARACTERS


def _largest_request_bytes() -> int:
    """The bytes of the largest stored ``request`` column, as the database holds its text."""
    table = connection.ops.quote_name(Invocation._meta.db_table)
    size = (
        "octet_length(request::text)"
        if connection.vendor == "postgresql"
        else "length(CAST(request AS BLOB))"
    )
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT max({size}) FROM {table}")
        return int(cursor.fetchone()[0])


@pytest.mark.django_db(transaction=True)
def test_eight_cjk_bodies_leave_the_gateway_live_and_are_stored_as_utf8(gateway_url, backends, api_key, stub):
    body = {"model": "auto", "max_tokens": 5, "messages": [{"role": "user", "content": TEXT}]}
    raw = json.dumps(body, ensure_ascii=False).encode()
    headers = {"Authorization": f"Bearer {api_key.raw}", "content-type": "application/json"}

    def ask(_: int) -> httpx.Response:
        return httpx.post(f"{gateway_url}/v1/chat/completions", content=raw, headers=headers, timeout=120)

    assert ask(0).status_code == 200  # the first call of a fresh server loads litellm
    with models_keep_answering(gateway_url, api_key.raw), ThreadPoolExecutor(8) as threads:
        responses = list(threads.map(ask, range(8)))
    assert [r.status_code for r in responses] == [200] * 8, [r.text[:200] for r in responses]
    assert Invocation.objects.count() == 9
    stored = Invocation.objects.order_by("created_at").last()
    assert stored is not None and stored.request["messages"][0]["content"] == TEXT
    # Three bytes a character, as the caller sent them; json.dumps's escapes made it 6 (7.5 MB a row).
    assert 3 * CHARACTERS <= _largest_request_bytes() < 3 * CHARACTERS + 4096
