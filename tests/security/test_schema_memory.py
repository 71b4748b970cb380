"""Schemas with patterns are compiled in a worker, and the schema caches count what they hold (issue 37,
classes 1 and 6; round three's probe).

A pattern's compiled program is small in JSON and large in memory: ``^(?:[a-z0-9]{1,50}){1,50}$`` is
27 characters and compiles to about 0.4 MB. Twenty distinct ones in a 1 KB schema took 20-45 ms to
compile, under the serving process's GIL (a body under 2 KiB with no reference was compiled there), and
held 7-13 MB in the compiled-schema cache, which counted it as 77 KB: its 64 MiB held gigabytes.
Now a schema with a pattern goes to a worker however small (routing/verifiers/vetting.py), each pattern
weighs its caps in the cache (``schemas.PATTERN_BYTES``), and the cache of the workers' findings counts
its entries' real size (it counted 64 bytes of each ~200).
"""

from __future__ import annotations

import gc
import json
import tracemalloc
import uuid
from typing import Any

import pytest

from routing import schemas
from routing.verifiers import pool
from tests.security.test_large_schema_bodies import HELLO, _post

pytestmark = pytest.mark.django_db(transaction=True)


def _patterned(variant: str, count: int = 20) -> dict[str, Any]:
    """A 1 KB schema of ``count`` distinct patterns that compile to about 0.4 MB each."""
    properties = {f"p{j}": {"pattern": f"^(?:[a-z0-9]{{1,{50 - j}}}){{1,50}}$"} for j in range(count)}
    return {"type": "object", "description": variant, "properties": properties}


def _rss() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * 4096


@pytest.fixture
def compiled(monkeypatch) -> list[int]:  # type: ignore[no-untyped-def]
    """Each schema this (the serving) process compiles."""
    calls: list[int] = []
    real = schemas._compile

    def counting(text: bytes) -> Any:
        calls.append(len(text))
        return real(text)

    monkeypatch.setattr(schemas, "_compile", counting)
    return calls


def test_a_small_schema_of_patterns_is_compiled_in_a_worker(gateway_url, backends, api_key, stub, compiled):
    sent = pool.tasks_sent()
    tools = [{"type": "function", "function": {"name": "f", "parameters": _patterned(str(uuid.uuid4()))}}]
    body = json.dumps({"model": "auto", "messages": HELLO, "max_tokens": 5, "tools": tools}).encode()
    assert len(body) < 2048
    response = _post(gateway_url, api_key.raw, "/v1/chat/completions", body)
    assert response.status_code == 200, response.text
    assert compiled == [] and pool.tasks_sent() > sent and len(stub.requests) == 1


def test_a_bad_pattern_in_a_small_schema_is_still_a_400_on_the_workers_word(
    gateway_url, backends, api_key, stub, compiled
):
    tools = [{"name": "f", "input_schema": {"type": "object", "properties": {"a": {"pattern": "(?=x)"}}}}]
    body = json.dumps({"model": "auto", "messages": HELLO, "max_tokens": 5, "tools": tools}).encode()
    response = _post(gateway_url, api_key.raw, "/v1/messages", body)
    assert response.status_code == 400, response.text
    assert "regex" in response.text
    assert compiled == [] and stub.requests == []


def test_the_compiled_schema_cache_holds_no_more_than_it_counts():
    """What a worker's cache keeps of 60 distinct schemas of patterns: within its budget (it kept
    all of them, about 7 MB each, counted as 77 KB each: over 400 MB)."""
    gc.collect()
    before = _rss()
    for n in range(60):
        schemas.validator(_patterned(f"memory-{n}-{uuid.uuid4()}"))
    gc.collect()
    grown = _rss() - before
    assert grown < schemas.CACHE_BYTES, f"the process grew by {grown / 2**20:.0f} MiB"


def test_the_cache_of_workers_findings_counts_what_its_entries_hold():
    problem = "unrolls into more than 100000 subschemas once its references are followed"
    tracemalloc.start()
    try:
        counted_before = schemas._vetted.currsize
        held_before = tracemalloc.get_traced_memory()[0]
        for n in range(20_000):
            schemas.record_vetted(f'{{"n": {n}, "v": "{uuid.uuid4()}"}}'.encode(), problem if n % 2 else None)
        held = tracemalloc.get_traced_memory()[0] - held_before
        counted = schemas._vetted.currsize - counted_before
    finally:
        tracemalloc.stop()
    assert held <= counted, (held, counted)
