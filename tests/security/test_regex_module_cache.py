"""The re2 module's own cache does not keep callers' patterns (issue 37, class 6; round three's probe).

``re2.compile`` keeps the last 128 patterns it compiled, each with up to its ``max_mem`` (2 MiB here) of
program and DFA, in an LRU of its own, out of the byte-bounded verifier cache's sight: 100 distinct
per-call regex verifiers on a 16 KB answer grew the server by 161 MB, of which about 50 MB was patterns
the verifier cache had already let go. A regex verifier now compiles its pattern without that cache
(routing/verifiers/regex.py), so the compiled patterns alive are those the verifier cache keeps.
"""

from __future__ import annotations

import gc

import httpx
import pytest
import re2

from bench.support.openai_stub import Reply
from routing.models import TaskProfile
from tests.factories import TaskProfileFactory, make_key

pytestmark = pytest.mark.django_db(transaction=True)

CALLS = 48  # more than the verifier cache keeps of these (64 MiB / 2 MiB each)


def _callers_patterns_alive(patterns: set[str]) -> int:
    gc.collect()
    return sum(1 for o in gc.get_objects() if isinstance(o, re2._Regexp) and o.pattern in patterns)


def test_callers_patterns_live_only_in_the_byte_bounded_verifier_cache(gateway_url, backends, stub):
    TaskProfileFactory.create(
        name="patterns", allow_call_verifier=True, policy=TaskProfile.Policy.ALWAYS_TEACHER
    )
    key = make_key(name="patterns", scopes=["llm", "verifiers:call"])
    stub.responder = lambda body: Reply(content="x" * 600)
    headers = {"Authorization": f"Bearer {key.raw}"}
    patterns = {f"x{{{500 + n}}}" for n in range(CALLS)}
    for pattern in sorted(patterns):
        body = {
            "model": "auto",
            "messages": [{"role": "user", "content": "hi"}],
            "metadata": {"task": "patterns", "verifier": {"kind": "regex", "pattern": pattern}},
        }
        response = httpx.post(f"{gateway_url}/v1/chat/completions", json=body, headers=headers, timeout=60)
        assert response.status_code == 200, response.text
        assert response.headers["x-skillgate-verdict"] == "pass"
    alive = _callers_patterns_alive(patterns)
    assert 0 < alive <= 32, f"{alive} of the caller's {CALLS} patterns are still compiled"
