"""``POST /v1/embeddings``: the request, the backend it goes to, the upstream call, its price and its row.

- Request: OpenAI's parameters only (``input`` as a string, strings, one token array or token arrays;
  ``model``, ``encoding_format``, ``dimensions``, ``user``); anything else is a 400 naming it.
- Backend: ``model`` names an active Backend row (either role), or "auto" means the one named by
  ``SKILLGATE_EMBEDDING_BACKEND``. OpenAI-protocol backends are called by the direct pooled client at
  ``{api_base}/embeddings`` (routing/call/openai_client.py), any other provider through
  ``litellm.aembedding``.
- The upstream is always asked for floats; ``encoding_format: base64`` is encoded here (little-endian
  float32, as OpenAI sends it), so a backend that only speaks floats serves both.
- Budget: the worst case is the input's byte count (byte-level tokenizers never emit more tokens than
  bytes; a token array counts its tokens) priced at the backend's input price, held like a chat prompt's.
- Ledger: one row per call, route and served_by the backend's role, policy "forced" (the call named
  the backend) or "embedding" ("auto"), verdict unverified, endpoint ``/v1/embeddings``. The stored
  request is the parsed request (input, model, ...); the stored response a summary (how many vectors,
  their dimensions), never the vectors.
"""

from __future__ import annotations

import base64
import struct
import time
import uuid
from dataclasses import dataclass, replace
from decimal import Decimal
from typing import Any, Literal

from pydantic import Field, field_validator

from routing import budgets, conf
from routing.call import gateway, openai_client
from routing.call.attempts import Attempts
from routing.call.legs import charge_attempts, new_leg
from routing.call.upstream import _litellm, _with_retries
from routing.errors import ApiError, UpstreamError, bad_request
from routing.ledger import CallRecord, Leg
from routing.models import ApiKey, Backend, Invocation, TaskProfile
from routing.pricing import PricingError, prices_for
from routing.protocol import Strict, parse_body

ENDPOINT = "/v1/embeddings"
AUTO_MODEL = "auto"
MAX_INPUTS = 2048  # OpenAI's limit of inputs per request
# Special tokens an embedding model may add around each input (BOS/EOS, a pooling token): generous.
_TOKENS_PER_INPUT = 8

Input = str | list[str] | list[int] | list[list[int]]


_TOKEN = {"type": "integer", "minimum": 0, "maximum": 2**31 - 1}
INPUT_SCHEMA: dict[str, Any] = {
    "anyOf": [
        {"type": "string", "minLength": 1},
        {"type": "array", "minItems": 1, "maxItems": MAX_INPUTS, "items": {"type": "string", "minLength": 1}},
        {"type": "array", "minItems": 1, "items": _TOKEN},
        {
            "type": "array",
            "minItems": 1,
            "maxItems": MAX_INPUTS,
            "items": {"type": "array", "minItems": 1, "items": _TOKEN},
        },
    ]
}


def _check_input(value: Any) -> Input:
    """``value`` as one of OpenAI's four input forms, with a clear refusal of anything else."""
    if isinstance(value, str):
        if not value:
            raise ValueError("input must not be empty")
        return value
    if not isinstance(value, list) or not value:
        raise ValueError("input must be a string, a list of strings, a token array or a list of token arrays")
    if len(value) > MAX_INPUTS:
        raise ValueError(f"at most {MAX_INPUTS} inputs per request")
    if all(isinstance(item, str) for item in value):
        if not all(value):
            raise ValueError("no input may be an empty string")
        return list(value)
    if all(_is_token(item) for item in value):
        return list(value)
    if all(isinstance(item, list) and item and all(_is_token(t) for t in item) for item in value):
        return [list(item) for item in value]
    raise ValueError(
        "input must be a string, a list of strings, a token array (non-negative integers) or a list of"
        " non-empty token arrays, not a mix"
    )


def _is_token(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**31


class EmbeddingRequest(Strict):
    """Every documented parameter of ``POST /v1/embeddings`` (OpenAI API reference, 2026)."""

    model: str = Field(min_length=1, max_length=200)
    input: Any = Field(json_schema_extra=INPUT_SCHEMA)  # checked by _known_input: clear 400s
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = Field(default=None, ge=1, le=65536)
    user: str | None = None

    @field_validator("input")
    @classmethod
    def _known_input(cls, value: Any) -> Input:
        return _check_input(value)

    def inputs(self) -> list[str] | list[list[int]]:
        """The inputs, one entry per vector asked for."""
        value = self.input
        if isinstance(value, str):
            return [value]
        if value and isinstance(value[0], int):
            return [value]
        return list(value)

    def token_bound(self) -> int:
        """An upper bound on the input's tokens: a string's UTF-8 bytes, a token array's length."""
        return sum(
            (len(item.encode()) if isinstance(item, str) else len(item)) + _TOKENS_PER_INPUT
            for item in self.inputs()
        )

    def upstream_body(self) -> dict[str, Any]:
        """What the backend receives (floats always: base64 is encoded here)."""
        body: dict[str, Any] = {"input": self.input, "encoding_format": "float"}
        if self.dimensions is not None:
            body["dimensions"] = self.dimensions
        if self.user is not None:
            body["user"] = self.user
        return body


def parse_embedding_request(raw: bytes) -> EmbeddingRequest:
    return parse_body(raw, EmbeddingRequest)


# --- the backend and its price ------------------------------------------------------------------


def backend_for(model: str, backends: list[Backend]) -> tuple[Backend, str]:
    """The backend a call goes to and the call's policy: "forced" when ``model`` names it, "embedding"
    for "auto" (SKILLGATE_EMBEDDING_BACKEND)."""
    if model == AUTO_MODEL:
        name = conf.get().upstream.embedding_backend
        if not name:
            raise ApiError(
                503,
                "No embedding backend is configured (SKILLGATE_EMBEDDING_BACKEND); name a backend as model.",
                type="server_error",
                code="no_backend",
            )
        found = next((b for b in backends if b.name == name), None)
        if found is None:
            raise ApiError(
                503,
                f"The embedding backend {name!r} (SKILLGATE_EMBEDDING_BACKEND) is not an active backend.",
                type="server_error",
                code="no_backend",
            )
        return found, "embedding"
    found = next((b for b in backends if b.name == model), None)
    if found is None:
        raise ApiError(
            404,
            f"The model {model!r} does not exist; use 'auto' or a backend listed by /v1/models.",
            param="model",
            code="model_not_found",
        )
    return found, "forced"


def input_price(backend: Backend) -> Decimal:
    """USD per input token: the backend's own, else litellm's price map (which knows embedding models)."""
    if backend.input_cost_per_token is not None:
        return backend.input_cost_per_token
    try:
        return prices_for(backend).input
    except PricingError as exc:
        raise ApiError(503, str(exc), type="server_error", code="backend_unpriced") from None


# --- the upstream call --------------------------------------------------------------------------


@dataclass
class Embedded:
    vectors: list[list[float]]
    prompt_tokens: int | None  # None: the upstream reported no usage
    model: str
    latency_ms: float


def _url(chat_url: str) -> str:
    return chat_url.removesuffix("/chat/completions").rstrip("/") + "/embeddings"


async def _raw_direct(
    backend: Backend, target: openai_client.Target, body: dict[str, Any], attempts: Attempts
) -> dict[str, Any]:
    return await openai_client.post_json(
        backend, replace(target, url=_url(target.url)), body, attempts=attempts
    )


async def _raw_litellm(backend: Backend, body: dict[str, Any], attempts: Attempts) -> dict[str, Any]:
    litellm = _litellm()
    kwargs: dict[str, Any] = {**body, "model": backend.litellm_model, "timeout": backend.timeout_s}
    if backend.api_base:
        kwargs["api_base"] = backend.api_base
    kwargs["api_key"] = backend.api_key() or "none"
    kwargs["max_retries"] = 0  # retried by _with_retries, each attempt counted and held for
    response = await _with_retries(backend, attempts, lambda: litellm.aembedding(**kwargs))
    dumped = response.model_dump() if hasattr(response, "model_dump") else dict(response)
    return dumped if isinstance(dumped, dict) else {}


def _floats(backend: Backend, value: Any) -> list[float]:
    if isinstance(value, str):  # an upstream that sent base64 anyway
        try:
            raw = base64.b64decode(value, validate=True)
        except ValueError:
            raise openai_client.status_error(backend, 200, "an embedding that is not base64") from None
        if len(raw) % 4:
            raise openai_client.status_error(backend, 200, "a base64 embedding that is not float32")
        return list(struct.unpack(f"<{len(raw) // 4}f", raw))
    if not isinstance(value, list) or not value:
        raise openai_client.status_error(backend, 200, "an answer without an embedding")
    if not all(isinstance(x, int | float) and not isinstance(x, bool) for x in value):
        raise openai_client.status_error(backend, 200, "an embedding that is not numbers")
    return [float(x) for x in value]


Vectors = list[list[float]]


def parse_answer(backend: Backend, raw: dict[str, Any], expected: int) -> tuple[Vectors, int | None]:
    """The vectors in input order and the prompt tokens of an upstream answer; UpstreamError (502)
    when it is not an embeddings answer for ``expected`` inputs."""
    data = raw.get("data")
    if not isinstance(data, list) or len(data) != expected:
        got = len(data) if isinstance(data, list) else "no"
        raise openai_client.status_error(backend, 200, f"{got} embeddings for {expected} inputs")
    items = [item if isinstance(item, dict) else {} for item in data]
    indices = [item.get("index", position) for position, item in enumerate(items)]
    if sorted(i for i in indices if isinstance(i, int)) != list(range(expected)):
        raise openai_client.status_error(backend, 200, "embeddings whose indices do not match the inputs")
    ordered = sorted(zip(indices, items, strict=True), key=lambda pair: pair[0])
    vectors = [_floats(backend, item.get("embedding")) for _, item in ordered]
    usage = raw.get("usage")
    tokens = usage.get("prompt_tokens") if isinstance(usage, dict) else None
    return vectors, tokens if isinstance(tokens, int) and tokens >= 0 else None


async def embed(backend: Backend, request: EmbeddingRequest, attempts: Attempts | None = None) -> Embedded:
    """The vectors of ``request``; ``attempts`` counts the attempts (routing/call/attempts.py)."""
    attempts = attempts if attempts is not None else Attempts()
    body = request.upstream_body()
    started = time.perf_counter()
    target = openai_client.target_of(backend)
    if target is not None:
        raw = await _raw_direct(backend, target, body, attempts)
    else:
        raw = await _raw_litellm(backend, body, attempts)
    latency_ms = (time.perf_counter() - started) * 1000
    try:
        vectors, tokens = parse_answer(backend, raw, len(request.inputs()))
    except UpstreamError:
        attempts.billed_without_usage()  # answered, so processed, but not with what can be read
        raise
    model = raw.get("model")
    return Embedded(vectors, tokens, model if isinstance(model, str) else backend.model, latency_ms)


def encoded(vector: list[float], encoding_format: str) -> list[float] | str:
    if encoding_format == "base64":
        return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()
    return vector


# --- the call -----------------------------------------------------------------------------------


@dataclass
class Result:
    payload: dict[str, Any]
    record: CallRecord


async def _profile_and_backends(task_header: str | None) -> tuple[TaskProfile, list[Backend]]:
    """The call's task profile (X-Skillgate-Task, else the default) and the active backends."""
    name = task_header or gateway.DEFAULT_PROFILE
    found = await gateway.profile_and_backends(name)
    if found is None:
        raise bad_request(
            f"Unknown task profile {name!r}; create it in the admin or omit it for the default profile.",
            code="unknown_task_profile",
        )
    return found


async def create(*, api_key: ApiKey, request: EmbeddingRequest, task_header: str | None) -> Result:
    """One embeddings call: priced, held on the key's budget, called, recorded (a row even when the
    upstream failed, as a chat call's)."""
    started = time.perf_counter()
    profile, backends = await _profile_and_backends(task_header)
    assert profile.pk is not None
    backend, policy = backend_for(request.model, backends)
    price = input_price(backend)
    bound = request.token_bound()
    hold = None
    if api_key.budget_usd is not None:
        hold = await budgets.hold(api_key=api_key, amount=price * bound)
    record = CallRecord(
        id=uuid.uuid4(),
        api_key_id=api_key.pk,
        profile_id=profile.pk,
        requested_model=request.model,
        route=backend.role,
        policy=policy,
        score=None,
        stream=False,
        request=request.model_dump(exclude_none=True),
        endpoint=ENDPOINT,
        profile_name=profile.name,
    )
    leg: Leg = new_leg(backend)
    record.legs.append(leg)

    async def extend(amount: Decimal) -> bool:
        assert hold is not None
        return await budgets.extend(api_key=api_key, hold=hold, amount=amount)

    # An attempt billed without usage (timed out, 5xx) is charged the worst case of its input.
    attempts = Attempts(bound_of=lambda: price * bound, extend=extend if hold is not None else None)
    try:
        try:
            answer = await embed(backend, request, attempts)
        except UpstreamError as exc:
            charge_attempts(leg, attempts)
            leg.error, leg.error_status, leg.verdict = exc.message, exc.status, Invocation.Verdict.ERROR
            record.status_code, record.error = exc.status, exc.message
            record.verdict = Invocation.Verdict.ERROR
            raise
        except Exception as exc:  # a bug of ours: the row still says so
            record.status_code, record.error, record.verdict = 500, str(exc), Invocation.Verdict.ERROR
            raise
        leg.latency_ms = answer.latency_ms
        if answer.prompt_tokens is None:  # no usage reported: charge the worst case, marked estimated
            leg.usage_estimated = True
            leg.cost_basis = Invocation.CostBasis.BOUND
        leg.prompt_tokens = bound if answer.prompt_tokens is None else answer.prompt_tokens
        leg.cost_usd = price * leg.prompt_tokens
        charge_attempts(leg, attempts)
        record.served_by = backend.role
        dimensions = len(answer.vectors[0]) if answer.vectors else 0
        record.response = {"object": "list", "embeddings": len(answer.vectors), "dimensions": dimensions}
        payload = {
            "object": "list",
            "data": [
                {"object": "embedding", "index": i, "embedding": encoded(v, request.encoding_format)}
                for i, v in enumerate(answer.vectors)
            ],
            "model": answer.model,
            "usage": {"prompt_tokens": leg.prompt_tokens, "total_tokens": leg.prompt_tokens},
        }
        return Result(payload, record)
    finally:
        record.latency_ms = (time.perf_counter() - started) * 1000
        record.overhead_ms = max(0.0, record.latency_ms - leg.latency_ms)
        await gateway.save(record, hold)
