"""Caches of caller-derived objects are bounded in bytes, not entries (issue 37, class 6).

The attack: a key with ``verifiers:call`` sends 100 calls, each with its own regex verifier whose RE2
program is megabytes (``[\\w\\W]{n}x``). The verifier cache counted 512 entries and grew the server by
hundreds of megabytes (each pattern's DFA grows on a 16 KB answer, matched in the serving process
since RE2 is linear); it now counts each verifier's footprint (RE2's whole memory budget for a
pattern) against a byte budget. Measured on the running server's own /proc/<pid>/status.
"""

from __future__ import annotations

import json
import os
import random
import string
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from bench.support.openai_stub import Reply
from routing.models import TaskProfile
from routing.router.learning import features
from routing.verifiers import base
from tests.factories import TaskProfileFactory, make_key

pytestmark = pytest.mark.django_db(transaction=True)

PATTERNS = 100  # per batch; 4 batches of new patterns: [\\w\\W]{800..999} then x or y (RE2 repeats to 1000)
ANSWER = "".join(random.Random(37).choices(string.printable, k=16_000))  # inline: RE2's DFA grows on it
# 400 new patterns in a fresh process: ~270 MB (114, 85, 70, 1 per batch), flat after; with a cache
# that keeps every verifier (its bound lifted): 513 MB (164, 159, 114, 75), still climbing.
GROWTH_MB = 400


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def test_a_hundred_distinct_regex_verifiers_do_not_grow_the_server_unboundedly(gateway_url, backends, stub):
    TaskProfileFactory.create(
        name="patterns", allow_call_verifier=True, policy=TaskProfile.Policy.ALWAYS_TEACHER
    )
    key = make_key(name="patterns", scopes=["llm", "verifiers:call"])
    stub.responder = lambda body: Reply(content=ANSWER)
    headers = {"Authorization": f"Bearer {key.raw}"}

    def call(n: int) -> str:
        verifier = {"kind": "regex", "pattern": f"[\\w\\W]{{{800 + n % 200}}}{'xy'[n // 200]}"}
        body: dict[str, object] = {"model": "auto", "messages": [{"role": "user", "content": "hi"}]}
        body["metadata"] = {"task": "patterns", "verifier": verifier}
        response = httpx.post(f"{gateway_url}/v1/chat/completions", json=body, headers=headers, timeout=60)
        assert response.status_code == 200, response.text
        return response.headers["x-skillgate-verdict"]

    def batch(first: int) -> float:
        """The server's growth in MB over PATTERNS calls, each with a pattern not seen before."""
        before = _rss_mb(server)
        with ThreadPoolExecutor(max_workers=4) as pool:
            verdicts = list(pool.map(call, range(first, first + PATTERNS)))
        assert verdicts == ["pass"] * PATTERNS
        assert base.cache_bytes() <= base.CACHE_BYTES
        return _rss_mb(server) - before

    server = os.getpid()  # the test's server runs in this process (tests/conftest.py gateway_url)
    # The byte-bounded cache evicts as it goes; what the process keeps is the allocator's high-water
    # mark per thread arena (glibc keeps freed pages of each thread's arena), so RSS climbs over the
    # first few hundred patterns in a fresh process, then stays flat.
    grown = [batch(k * PATTERNS) for k in range(4)]
    assert sum(grown) < GROWTH_MB, f"the server grew by {grown} MB over {4 * PATTERNS} new patterns"


def _word(k: int) -> str:
    return "".join(chr(97 + (k // 26**j) % 26) for j in range(6))


def test_the_learned_routers_tool_words_are_kept_by_bytes():
    """The router's features read each distinct tool's words once; tools are the caller's, so the cache
    counts the words' bytes (and keys by digest, never holding the tool's JSON itself)."""
    features._tool_words.cache_clear()
    for n in range(150):
        words = " ".join(_word(n * 3000 + i) for i in range(3000))  # 3,000 distinct stems each
        features._tool_words(
            json.dumps({"type": "function", "function": {"name": f"f{n}", "description": words}})
        )
    cache = features._tool_words.cache
    assert cache.currsize <= features.TOOL_WORDS_CACHE_BYTES
    assert 0 < len(cache) < 150
