"""The fuzzing gate of /v1: Hypothesis generates request bodies for every endpoint (chat completions,
Responses, Messages, embeddings) around the hostile inputs of the security rounds: caller schemas with
remote, local and dangling ``$ref``s, backtracking patterns and many ``$defs``; numbers at and past
every range, NaN and Infinity; tools nested and repeated; unknown fields. Round three (issue 37) adds
cost amplifiers: recursive ``$defs`` that refer to the next level twice (through ``$ref``, ``allOf``,
``anyOf``, ``if``/``then``/``else``, ``dependentSchemas``, ``$dynamicRef``), megabytes of deep or wide
arrays and objects in a field, and answers (the stub returns them) with long runs of blanks inside and
around code fences and JSON. Each body goes to the running server while an ordinary call is in flight,
and five things must hold:

1. no answer is a 5xx;
2. nothing is fetched: every URL a body names points at a listener that must see no request (the
   configured backend, the stub, is the only server called);
3. the ordinary call is answered in under 2 s;
4. exactly one ledger row per 200 (and none for a refusal);
5. liveness: all the while the fuzzed request runs, a concurrent ``GET /v1/models`` answers within
   1 s (tests/support/liveness.py): no caller's body or answer may hold the process.

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

from bench.support.openai_stub import OpenAIStub, Reply
from routing import scopes
from routing.models import Backend, Invocation
from tests.factories import BackendFactory, KeyPair, TaskProfileFactory, make_key
from tests.support.attacks import during, listener
from tests.support.liveness import models_keep_answering

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


def recursive_defs(kind: str, levels: int) -> dict[str, Any]:
    """A small schema whose every level refers to the next one twice: 2^levels checks for a validator
    that expands it (issue 37: 1-3 KB of these froze the process for seconds)."""
    defs: dict[str, Any] = {}
    for level in range(levels):
        ref = f"#/$defs/d{level + 1}"
        nxt: dict[str, Any] = {"$ref": ref} if level + 1 < levels else {"type": "string", "minLength": 1}
        defs[f"d{level}"] = {
            "$ref": {"properties": {"a": nxt, "b": nxt}, "additionalProperties": nxt},
            "allOf": {"allOf": [nxt, nxt]},
            "anyOf": {"anyOf": [{"not": nxt}, nxt, nxt]},
            "if": {"if": nxt, "then": nxt, "else": nxt},
            "dependentSchemas": {"dependentSchemas": {"a": nxt, "b": nxt}, "properties": {"a": nxt}},
            "$dynamicRef": {"$dynamicAnchor": f"d{level}", "allOf": [{"$dynamicRef": ref}, nxt]},
        }[kind]
    return {"$defs": defs, "$ref": "#/$defs/d0"}


RECURSIVE = st.builds(
    recursive_defs,
    st.sampled_from(["$ref", "allOf", "anyOf", "if", "dependentSchemas", "$dynamicRef"]),
    st.sampled_from([12, 20, 30]),
)

# Answers the stub gives (the verifiers and the answer post-processing read them): ordinary ones, and
# long runs of blanks where the gateway's own patterns look for code fences and JSON blocks.
BLANKS = st.sampled_from([" ", "\n", "\t", " \n", "\r\n", " \t\n"])
ANSWERS = st.one_of(
    st.sampled_from(["ok", '"x"', '{"a": "x", "b": "y"}', '{"name": "f", "arguments": "{}"}']),
    st.tuples(
        st.sampled_from(
            [
                "```json{0}{{}}{0}```",
                "```{0}",
                '{0}```json\n{{"a": 1}}',
                "{{{0}",
                '```json\n{{"a":{0}1}}\n```{0}```',
                "[{0}",
                "<tool_call>{0}",
                "x{0}y",
            ]
        ),
        BLANKS,
        st.sampled_from([1_000, 50_000, 300_000]),
    ).map(lambda t: t[0].format(t[1] * t[2])),
)

# Megabytes of structure in one field: the parser's bounds (routing/json_body.py) answer before any
# Python walk; within them, a body of this shape is served. (shape, count): written by _text.
BLOBS = st.tuples(
    st.sampled_from(["wide arrays", "wide objects", "deep arrays", "deep objects", "nested rows"]),
    st.sampled_from([10, 30_000, 300_000, 1_200_000]),
)


def _blob(shape: str, count: int) -> str:
    if shape == "wide arrays":
        return "[" + "[]," * count + "[]]"
    if shape == "wide objects":
        return "[" + '{"k":{}},' * (count // 3) + "{}]"
    if shape == "deep arrays":
        return "[" * min(count, 1_000_000) + "]" * min(count, 1_000_000)
    if shape == "deep objects":
        depth = min(count, 300_000)
        return '{"a":' * depth + "0" + "}" * depth
    return "[" + ",".join(["[" * 30 + "0" + "]" * 30] * max(count // 61, 1)) + "]"


def _schema(depth: int = 2) -> st.SearchStrategy[dict[str, Any]]:
    leaf: st.SearchStrategy[dict[str, Any]] = st.one_of(
        RECURSIVE,
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
    "metadata": st.one_of(
        st.dictionaries(
            st.sampled_from(["task", "n", "verifier"]), st.one_of(NUMBERS, st.text(max_size=5)), max_size=2
        ),
        st.fixed_dictionaries({"task": st.sampled_from(["schema", "tools", "open"])}),
        st.fixed_dictionaries(
            {
                "task": st.just("open"),
                "verifier": RECURSIVE.map(lambda s: {"kind": "json_schema", "schema": s}),
            }
        ),
        BLOBS.map(lambda blob: {"blob": blob}),
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
    at the listener; a metadata ``blob`` written out as the megabytes of structure it names."""
    url = f"http://127.0.0.1:{LISTENER_PORT[0]}/schema.json"
    blob = body.get("metadata", {}).get("blob") if isinstance(body.get("metadata"), dict) else None
    if blob is not None:
        body = {**body, "metadata": {**body["metadata"], "blob": "BLOB"}}
    text = json.dumps(body, allow_nan=True).replace('"$ref": "remote"', f'"$ref": "{url}"')
    return text.replace('"BLOB"', _blob(*blob)) if blob is not None else text


@pytest.fixture
def embedder(backends: dict[str, Backend], stub: OpenAIStub, settings: Any) -> Iterator[Backend]:
    """An embedding backend (the stub), so /v1/embeddings is served, not a 503 for a missing one."""
    backend = BackendFactory.create(
        name="embedder", role=Backend.Role.TEACHER, model="openai/text-embed", api_base=stub.base_url,
        input_cost_per_token=Decimal("0.0000001"), output_cost_per_token=Decimal(0),
    )  # fmt: skip
    settings.SKILLGATE = {**settings.SKILLGATE, "EMBEDDING_BACKEND": backend.name}
    yield backend


@pytest.fixture
def profiles(backends: dict[str, Backend]) -> None:
    """Profiles whose verifiers read the answer (a body names them in ``metadata.task``): a schema of
    the profile's own, tool arguments, and one that takes per-call verifiers."""
    TaskProfileFactory.create(
        name="schema", verifier={"kind": "json_schema", "schema": recursive_defs("allOf", 16)}
    )
    TaskProfileFactory.create(name="tools", verifier={"kind": "tool_args"})
    TaskProfileFactory.create(name="open", allow_call_verifier=True)


@pytest.fixture
def caller_key(backends: dict[str, Backend]) -> KeyPair:
    """A key that may send its own verifiers (``verifiers:call``), so generated ones are run."""
    return make_key(name="fuzzer", scopes=[scopes.LLM, scopes.CALL_VERIFIER])


@pytest.fixture(scope="module")
def watcher() -> Iterator[OpenAIStub]:
    with listener() as server:
        LISTENER_PORT[:] = [server.port]
        yield server


def _check(
    gateway_url: str,
    key: str,
    watcher: OpenAIStub,
    stub: OpenAIStub,
    path: str,
    body: dict[str, Any],
    answer: str,
) -> None:
    before = Invocation.objects.count()
    headers = {"Authorization": f"Bearer {key}", "x-api-key": key, "content-type": "application/json"}
    content = _text(body)
    stub.responder = lambda request: Reply(content=answer)

    def attack() -> httpx.Response:
        # verify=False: plain HTTP on loopback; loading the CA bundle cost 0.05-0.2 s per example
        return httpx.post(gateway_url + path, content=content, headers=headers, timeout=60, verify=False)

    with models_keep_answering(gateway_url, key):  # 5: the loop is never held
        [response] = during(attack, gateway_url, key)
    assert response.status_code < 500, (response.status_code, response.text[:300], content[:300])
    assert watcher.requests == [], content[:300]
    rows = Invocation.objects.count() - before - 1  # the ordinary call wrote one
    assert rows == (1 if response.status_code == 200 else 0), (response.status_code, content[:300])


FAST = settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
MANY = settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))


@FAST
@given(case=_bodies(), answer=ANSWERS)
def test_generated_bodies_keep_the_five_properties(
    gateway_url, embedder, profiles, caller_key, stub, watcher, case, answer
):
    path, body = case
    _check(gateway_url, caller_key.raw, watcher, stub, path, body, answer)


@pytest.mark.slow
@MANY
@given(case=_bodies(), answer=ANSWERS)
def test_many_generated_bodies_keep_the_five_properties(
    gateway_url, embedder, profiles, caller_key, stub, watcher, case, answer
):
    path, body = case
    _check(gateway_url, caller_key.raw, watcher, stub, path, body, answer)
