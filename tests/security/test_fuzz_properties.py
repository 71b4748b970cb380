"""The fuzzing gate of /v1: Hypothesis generates request bodies for every endpoint (chat completions,
Responses, Messages, embeddings) around the hostile inputs of the security rounds: caller schemas with
remote, local and dangling ``$ref``s, backtracking patterns and many ``$defs``; numbers at and past
every range, NaN and Infinity; tools nested and repeated; unknown fields. Each body goes to the running
server while an ordinary call is in flight, and four things must hold:

1. no answer is a 5xx;
2. nothing is fetched: every URL a body names points at a listener that must see no request (the
   configured backend, the stub, is the only server called);
3. the ordinary call is answered in under 2 s;
4. exactly one ledger row per 200 (and none for a refusal).

The default suite runs a small example budget; the slow suite a large one (``FUZZ_EXAMPLES``).
schemathesis covers /api/ (tests/api/test_fuzz_api.py) and the OpenAPI shapes of /v1
(test_fuzz_gateway.py).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.support.openai_stub import OpenAIStub
from routing.models import Backend, Invocation
from tests.factories import BackendFactory
from tests.support.attacks import during, listener

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]

HELLO = [{"role": "user", "content": "hi"}]
LISTENER_PORT: list[int] = []  # the listener's port, known once the module's fixture started it

NUMBERS = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([0, 1, -1, 2**31, 2**53 + 1, 2**63 - 1, 2**63, 2**64, 10**30]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([1e16, 1e26, 1e308, -0.0, 5e-324]),
)
PATTERNS = st.sampled_from(["^(a+)+$", "(a|aa)*b", "(?<=x)y", "[", "a{1,100000}", "(.*){1,50}x", "\\d+"])


def _ref() -> st.SearchStrategy[str]:
    return st.sampled_from(
        ["#", "#/$defs/a", "#/$defs/missing", "remote", "file:///etc/passwd", "other.json"]
    )


def _schema(depth: int = 2) -> st.SearchStrategy[dict[str, Any]]:
    leaf: st.SearchStrategy[dict[str, Any]] = st.one_of(
        st.fixed_dictionaries({"type": st.sampled_from(["string", "integer", "object", "array", "nope"])}),
        st.fixed_dictionaries({"type": st.just("string"), "pattern": PATTERNS}),
        st.fixed_dictionaries({"$ref": _ref()}),
        st.fixed_dictionaries({"maximum": NUMBERS, "minimum": NUMBERS}),
        st.fixed_dictionaries({"$defs": st.dictionaries(st.sampled_from("abcdef"), st.just({}), max_size=6)}),
    )
    if depth == 0:
        return leaf
    return st.one_of(
        leaf,
        st.fixed_dictionaries(
            {
                "type": st.just("object"),
                "properties": st.dictionaries(st.sampled_from("xyz"), _schema(depth - 1), max_size=3),
            }
        ),
        st.fixed_dictionaries({"anyOf": st.lists(_schema(depth - 1), max_size=3)}),
    )  # fmt: skip


def _tools(name_key: str) -> st.SearchStrategy[list[dict[str, Any]]]:
    one = st.fixed_dictionaries({"name": st.sampled_from(["f", "g", ""]), name_key: _schema()})
    return st.lists(one, max_size=4)


PARAMS = {
    "max_tokens": NUMBERS, "temperature": NUMBERS, "top_p": NUMBERS, "n": NUMBERS, "seed": NUMBERS,
    "logit_bias": st.dictionaries(st.sampled_from(["1", "x", "-2"]), NUMBERS, max_size=2),
    "metadata": st.dictionaries(
        st.sampled_from(["task", "n", "verifier"]), st.one_of(NUMBERS, st.text(max_size=5)), max_size=2
    ),
    "max_output_tokens": NUMBERS, "frequency_penalty": NUMBERS, "top_logprobs": NUMBERS,
    "dimensions": NUMBERS,
    "unknown_field": st.just(1),
}  # fmt: skip


def _some(names: list[str]) -> st.SearchStrategy[dict[str, Any]]:
    return st.dictionaries(st.sampled_from(names), st.none(), max_size=3).flatmap(
        lambda chosen: st.fixed_dictionaries({name: PARAMS[name] for name in chosen})
    )


def _bodies() -> st.SearchStrategy[tuple[str, dict[str, Any]]]:
    chat = st.tuples(
        st.just("/v1/chat/completions"),
        st.fixed_dictionaries(
            {"model": st.just("auto"), "messages": st.just(HELLO)},
            optional={
                "response_format": _schema().map(
                    lambda s: {"type": "json_schema", "json_schema": {"name": "x", "schema": s}}
                ),
                "tools": _tools("parameters").map(
                    lambda ts: [{"type": "function", "function": t} for t in ts]
                ),
                "functions": _tools("parameters"),
                "stream": st.booleans(),
            },
        ),
        _some(
            [
                "max_tokens",
                "temperature",
                "top_p",
                "n",
                "seed",
                "logit_bias",
                "metadata",
                "frequency_penalty",
                "top_logprobs",
                "unknown_field",
            ]
        ),
    )
    responses = st.tuples(
        st.just("/v1/responses"),
        st.fixed_dictionaries(
            {"model": st.just("auto"), "input": st.just("hi")},
            optional={
                "text": _schema().map(
                    lambda s: {"format": {"type": "json_schema", "name": "x", "schema": s}}
                ),
                "tools": _tools("parameters").map(lambda ts: [{"type": "function", **t} for t in ts]),
            },
        ),
        _some(["max_output_tokens", "temperature", "top_p", "metadata", "unknown_field"]),
    )
    messages = st.tuples(
        st.just("/v1/messages"),
        st.fixed_dictionaries(
            {"model": st.just("auto"), "max_tokens": st.just(5), "messages": st.just(HELLO)},
            optional={
                "output_config": _schema().map(lambda s: {"format": {"type": "json_schema", "schema": s}}),
                "tools": _tools("input_schema"),
            },
        ),
        _some(["max_tokens", "temperature", "top_p", "metadata", "unknown_field"]),
    )
    embeddings = st.tuples(
        st.just("/v1/embeddings"),
        st.fixed_dictionaries(
            {"model": st.just("auto"), "input": st.one_of(st.just("hi"), st.lists(NUMBERS, max_size=3))}
        ),
        _some(["dimensions", "metadata", "unknown_field"]),
    )  # fmt: skip
    return st.one_of(chat, responses, messages, embeddings).map(lambda t: (t[0], {**t[1], **t[2]}))


def _text(body: dict[str, Any]) -> str:
    """The body as sent: NaN and Infinity written as Python's parser reads them; "remote" refs pointing
    at the listener."""
    url = f"http://127.0.0.1:{LISTENER_PORT[0]}/schema.json"
    return json.dumps(body, allow_nan=True).replace('"$ref": "remote"', f'"$ref": "{url}"')


@pytest.fixture
def embedder(backends: dict[str, Backend], stub: OpenAIStub, settings: Any) -> Iterator[Backend]:
    """An embedding backend (the stub), so /v1/embeddings is served, not a 503 for a missing one."""
    backend = BackendFactory.create(
        name="embedder", role=Backend.Role.TEACHER, model="openai/text-embed", api_base=stub.base_url,
        input_cost_per_token=Decimal("0.0000001"), output_cost_per_token=Decimal(0),
    )  # fmt: skip
    settings.SKILLGATE = {**settings.SKILLGATE, "EMBEDDING_BACKEND": backend.name}
    yield backend


@pytest.fixture(scope="module")
def watcher() -> Iterator[OpenAIStub]:
    with listener() as server:
        LISTENER_PORT[:] = [server.port]
        yield server


def _check(gateway_url: str, key: str, watcher: OpenAIStub, path: str, body: dict[str, Any]) -> None:
    before = Invocation.objects.count()
    headers = {"Authorization": f"Bearer {key}", "x-api-key": key, "content-type": "application/json"}
    content = _text(body)

    def attack() -> httpx.Response:
        return httpx.post(gateway_url + path, content=content, headers=headers, timeout=60)

    [response] = during(attack, gateway_url, key)
    assert response.status_code < 500, (response.status_code, response.text[:300], content[:300])
    assert watcher.requests == [], content[:300]
    rows = Invocation.objects.count() - before - 1  # the ordinary call wrote one
    assert rows == (1 if response.status_code == 200 else 0), (response.status_code, content[:300])


FAST = settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
MANY = settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))


@FAST
@given(case=_bodies())
def test_generated_bodies_keep_the_four_properties(gateway_url, embedder, api_key, stub, watcher, case):
    _check(gateway_url, api_key.raw, watcher, *case)


@pytest.mark.slow
@MANY
@given(case=_bodies())
def test_many_generated_bodies_keep_the_four_properties(gateway_url, embedder, api_key, stub, watcher, case):
    _check(gateway_url, api_key.raw, watcher, *case)
