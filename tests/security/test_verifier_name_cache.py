"""A per-call ``python_tests`` verifier's ``entry_point`` is bounded in length (issue 37, class 6).

The answer's definition of the entry point is found with an RE2 pattern built from its name, and the
last 256 such patterns are kept (``routing/verifiers/python_tests.py``'s ``_definition``). The name had
no length bound: a 233,000-character identifier compiles to about 10 MB, so 256 distinct ones from a
key with ``verifiers:call`` grew the process by 2.5 GB (and took 0.24 s of CPU each). Now a name over
256 characters is a 400 naming the limit, before any upstream call. Driven through the running server.
"""

from __future__ import annotations

import openai
import pytest

from routing.models import Invocation
from tests.factories import TaskProfileFactory, make_key

pytestmark = pytest.mark.django_db(transaction=True)


def _call(gateway_url: str, key: str, entry_point: str):  # type: ignore[no-untyped-def]
    verifier = {"kind": "python_tests", "test": "pass", "entry_point": entry_point, "prompt": "import os\n"}
    client = openai.OpenAI(base_url=f"{gateway_url}/v1", api_key=key, max_retries=0, timeout=60)
    return client.chat.completions.with_raw_response.create(
        model="auto",
        messages=[{"role": "user", "content": "hi"}],
        extra_body={"metadata": {"task": "open", "verifier": verifier}},
    )


def test_a_huge_entry_point_name_is_refused_before_it_is_compiled(gateway_url, backends, stub):
    TaskProfileFactory.create(name="open", allow_call_verifier=True)
    key = make_key(scopes=["llm", "verifiers:call"])
    with pytest.raises(openai.BadRequestError) as refused:
        _call(gateway_url, key.raw, "f" + "a" * 200_000)
    assert "longer than 256 characters" in str(refused.value)
    assert stub.requests == [] and not Invocation.objects.exists()
    served = _call(gateway_url, key.raw, "f" + "a" * 200)  # a long but ordinary name is served
    assert served.headers["x-skillgate-verdict"] in ("pass", "fail")
