"""A caller's schemas are costed in a worker process, before the edge parses the body.

Counting what a schema costs (routing/schemas.py: the unrolled reference graph, the checks along one
instance path, the fan-out) and compiling it are bounded, but not cheap: a schema with recursing
references is tens of milliseconds of Python, and so is a wide one without any (a 58 KB schema of
1,000 properties of two ``allOf`` branches is 0.5 s to count and compile; eight of them in one 464 KB
body froze the process for 4 s). Under the serving process's GIL that is caller-controlled work,
repeatable on every call with a new schema. So the schemas of a /v1 body that this process has not
seen are counted by a verifier worker (the same pool and per-key share as verifications,
routing/verifiers/pool.py) unless together they are tiny (:data:`INLINE_BYTES` of JSON, no reference
and no pattern): the worker's finding is kept (byte-bounded, by the schema's digest) and the edge's
parse then uses it instead of counting or compiling again (``schemas.schema_problem``). A body may
hold at most :data:`MAX_SCHEMAS` schemas (OpenAI's cap on tools is 128): more is a 400, before any is
counted.

The byte searches that let a body skip all this (no schema key; tiny, no reference or pattern) only
hold for a body without ``\\u`` escapes: a key spelled ``"\\u0070arameters"`` or ``"\\u0024ref"`` is the
same key to the parser, so such a body is parsed here and its schemas found by their parsed keys.

A worker that finds a problem: the parse refuses the schema with that reason (a 400 naming it). One
that passes its deadline: refused, "checking its cost took too long". A saturated pool: a 503, nothing
kept.
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson

from routing import schemas
from routing.errors import ApiError
from routing.json_body import JsonBodyError, loads_request
from routing.verifiers.pool import run_task

# What makes even a small schema costly to count or compile: references, and patterns (a 1 KB schema of
# 20 distinct patterns took 20-45 ms to compile and held 7-13 MB).
_MARKERS = (b'"$ref"', b'"$dynamicRef"', b'"$recursiveRef"', b'"pattern"', b'"patternProperties"')
# Where a caller's schemas sit in the three protocols' bodies, and the keys that hold one.
_CONTAINERS = ("tools", "functions", "response_format", "text", "output_config", "metadata")
_SCHEMA_KEYS = ("schema", "parameters", "input_schema")
_WALK_DEPTH = 6
MAX_SCHEMAS = 512  # schemas in one body (tools, formats, per-call verifiers); more is a 400
INLINE_BYTES = 2048  # new schemas without references or patterns this small together: counted in the parse
_KEYS = tuple(f'"{key}"'.encode() for key in _SCHEMA_KEYS)
_DEADLINE_S = 5.0
_CONFIG_PROBLEM = "invalid verifier: json_schema.schema is not a valid JSON schema: "


def _candidates(data: dict[str, Any]) -> list[bytes]:
    """The JSON of each schema of ``data`` this process has not seen; a 400 past :data:`MAX_SCHEMAS`."""
    found: list[bytes] = []
    stack: list[tuple[Any, int]] = [(data.get(name), 0) for name in _CONTAINERS]
    seen = 0
    while stack:
        item, depth = stack.pop()
        if depth > _WALK_DEPTH:
            continue
        if isinstance(item, list):
            stack.extend((value, depth + 1) for value in item)
        elif isinstance(item, dict):
            for key, value in item.items():
                if key in _SCHEMA_KEYS and isinstance(value, dict):
                    seen += 1
                    if seen > MAX_SCHEMAS:
                        raise ApiError(
                            400,
                            f"The request holds more than {MAX_SCHEMAS} JSON schemas (tools, formats and "
                            "verifiers together); send fewer tools.",
                            param="tools",
                            code="too_many_schemas",
                        )
                    text = orjson.dumps(value)
                    if not schemas.is_vetted(text):
                        found.append(text)
                else:
                    stack.append((value, depth + 1))
    return found


def _worth_a_worker(texts: list[bytes]) -> bool:
    """Whether counting ``texts`` here could cost more than a worker's round trip."""
    return sum(map(len, texts)) > INLINE_BYTES or any(m in text for text in texts for m in _MARKERS)


async def _vet(text: bytes, owner: str) -> None:
    task = {  # the schema's own bytes go into the frame: not parsed again in this process
        "config": {"kind": "json_schema", "schema": orjson.Fragment(text)},
        "request": {},
        "message": {"role": "assistant", "content": "{}"},
    }
    verdict = await run_task(task, deadline=_DEADLINE_S, owner=owner)
    if not verdict.error:
        schemas.record_vetted(text, None)  # usable: the answer's verdict does not matter here
    elif verdict.detail.startswith(_CONFIG_PROBLEM):
        schemas.record_vetted(text, verdict.detail.removeprefix(_CONFIG_PROBLEM))
    elif "saturated" in verdict.detail:
        raise ApiError(
            503,
            "Skillgate's schema checkers are busy; retry shortly.",
            type="server_error",
            code="overloaded",
            headers={"Retry-After": "1"},
        )
    else:  # the worker passed its deadline or died counting it
        schemas.record_vetted(text, f"checking its cost took too long ({verdict.detail})")


async def vet_body_schemas(raw: bytes, *, owner: str) -> Any:
    """Cost every new schema of the /v1 body ``raw`` in a worker (module docstring), unless together
    they are tiny. Returns the body as parsed here (the protocol's parser takes it: a body is parsed
    once), or None where this did not parse it: no schema key, tiny, or not JSON (the edge's parser
    then says why)."""
    if b"\\u" not in raw:  # else a key may be spelled with escapes ("\\u0024ref"): parsed to be seen
        if not any(key in raw for key in _KEYS):
            return None
        if len(raw) <= INLINE_BYTES and not any(marker in raw for marker in _MARKERS):
            return None  # its schemas are tiny together: counted in the parse
    try:
        data = loads_request(raw)
    except JsonBodyError:
        return None
    if not isinstance(data, dict):
        return None
    texts = list(dict.fromkeys(_candidates(data)))
    if texts and _worth_a_worker(texts):
        await asyncio.gather(*(_vet(text, owner) for text in texts))
    return data
