"""A caller's schemas with references are costed in a worker process, before the edge parses the body.

Counting what a schema costs (routing/schemas.py: the unrolled reference graph, the checks along one
instance path, the fan-out) is bounded, but for a schema whose references recurse it is tens of
milliseconds of Python: under the serving process's GIL that is caller-controlled work, repeatable on
every call. So a /v1 body whose bytes hold a reference keyword has each of its schemas that holds one,
and that this process has not seen, counted by a verifier worker (the same pool and per-key share as
verifications, routing/verifiers/pool.py); the worker's finding is kept (byte-bounded, by the schema's
digest) and the edge's parse then uses it instead of counting again. Schemas without references cost
at most their own size (5,000 objects) and are counted in the parse, as before.

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

_MARKERS = (b'"$ref"', b'"$dynamicRef"', b'"$recursiveRef"')
# Where a caller's schemas sit in the three protocols' bodies, and the keys that hold one.
_CONTAINERS = ("tools", "functions", "response_format", "text", "output_config", "metadata")
_SCHEMA_KEYS = ("schema", "parameters", "input_schema")
_WALK_DEPTH = 6
_MAX_SCHEMAS = 128  # a body's schemas vetted at most; the rest are counted by the parse, bounded
_DEADLINE_S = 5.0
_CONFIG_PROBLEM = "invalid verifier: json_schema.schema is not a valid JSON schema: "


def _candidates(data: dict[str, Any]) -> list[bytes]:
    found: list[bytes] = []
    stack: list[tuple[Any, int]] = [(data.get(name), 0) for name in _CONTAINERS]
    while stack and len(found) < _MAX_SCHEMAS:
        item, depth = stack.pop()
        if depth > _WALK_DEPTH:
            continue
        if isinstance(item, list):
            stack.extend((value, depth + 1) for value in item)
        elif isinstance(item, dict):
            for key, value in item.items():
                if key in _SCHEMA_KEYS and isinstance(value, dict):
                    text = orjson.dumps(value)
                    if any(marker in text for marker in _MARKERS) and not schemas.is_vetted(text):
                        found.append(text)
                else:
                    stack.append((value, depth + 1))
    return found


async def _vet(text: bytes, owner: str) -> None:
    task = {
        "config": {"kind": "json_schema", "schema": orjson.loads(text)},
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


async def vet_body_schemas(raw: bytes, *, owner: str) -> None:
    """Cost every new schema with references of the /v1 body ``raw`` in a worker (module docstring).
    A body that does not parse is left to the edge's parser, which says why."""
    if not any(marker in raw for marker in _MARKERS):
        return
    try:
        data = loads_request(raw)
    except JsonBodyError:
        return
    if not isinstance(data, dict):
        return
    texts = list(dict.fromkeys(_candidates(data)))
    if texts:
        await asyncio.gather(*(_vet(text, owner) for text in texts))
