"""The one table of the API under ``/v1``: each row is an endpoint's path, its methods and handlers, the
error convention of its clients, whether it makes an LLM call, and its OpenAPI entry.

Everything that used to keep its own list of paths reads this table:

- the edge's routing (routing/api/app.py ``resolve``: 404 for an unknown path, 405 with ``Allow``);
- the error convention (Anthropic's error JSON under the Messages paths, OpenAI's elsewhere);
- load shedding (routing/api/inflight.py counts the LLM-call rows' POSTs);
- the ledger's ``Invocation.endpoint`` (an LLM-call row's path; a test checks the model's choices);
- the OpenAPI document (routing/api/openapi.py: the rows with an entry, and their request models).

Adding an endpoint is one folder under routing/api/ (``routes.py``, plus ``protocol.py`` and ``stream.py``
when it speaks its own protocol) and one row here. A path segment ``{name}`` matches any one segment.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel

from routing.api import openapi
from routing.api.chat import routes as chat
from routing.api.embeddings import routes as embeddings
from routing.api.http import JsonResponse, Request, Response
from routing.api.messages import routes as messages
from routing.api.models import routes as models
from routing.api.responses import ResponsesRequest
from routing.api.responses import routes as responses
from routing.call.embeddings import EmbeddingRequest
from routing.protocol import ChatRequest

Handler = Callable[[Request], Awaitable[Response]]


@dataclass(frozen=True)
class Endpoint:
    path: str
    methods: Mapping[str, Handler]
    errors: Literal["openai", "anthropic"] = "openai"
    llm_call: bool = False  # shed past SKILLGATE_MAX_IN_FLIGHT; its path is the ledger row's endpoint
    openapi: openapi.PathItem | None = None
    request_model: type[BaseModel] | None = None

    def matches(self, path: str) -> bool:
        want, got = self.path.split("/"), path.split("/")
        if len(want) != len(got):
            return False
        return all(
            w == g or (w.startswith("{") and w.endswith("}") and bool(g))
            for w, g in zip(want, got, strict=True)
        )


async def openapi_document(request: Request) -> Response:
    """The OpenAPI description of ``/v1`` (public: it holds no data, only the protocol)."""
    return JsonResponse(document())


ENDPOINTS: tuple[Endpoint, ...] = (
    Endpoint(
        "/v1/chat/completions",
        {"POST": chat.create},
        llm_call=True,
        openapi=openapi.chat_completions,
        request_model=ChatRequest,
    ),
    Endpoint("/v1/models", {"GET": models.list_models}, openapi=openapi.models),
    Endpoint("/v1/openapi.json", {"GET": openapi_document}),
    Endpoint("/v1/messages", {"POST": messages.create}, errors="anthropic", llm_call=True),
    Endpoint("/v1/messages/count_tokens", {"POST": messages.count_tokens}, errors="anthropic"),
    Endpoint(
        "/v1/embeddings",
        {"POST": embeddings.create},
        llm_call=True,
        openapi=openapi.embeddings,
        request_model=EmbeddingRequest,
    ),
    Endpoint(
        "/v1/responses",
        {"POST": responses.create},
        llm_call=True,
        openapi=openapi.create_response,
        request_model=ResponsesRequest,
    ),
    Endpoint(
        "/v1/responses/{response_id}",
        {"GET": responses.retrieve, "DELETE": responses.delete},
        openapi=openapi.stored_response,
    ),
    Endpoint(
        "/v1/responses/{response_id}/input_items",
        {"GET": responses.input_items},
        openapi=openapi.response_input_items,
    ),
    Endpoint(
        "/v1/responses/{response_id}/cancel", {"POST": responses.cancel}, openapi=openapi.cancel_response
    ),
)

_EXACT = {row.path: row for row in ENDPOINTS if "{" not in row.path}
_PATTERNS = [row for row in ENDPOINTS if "{" in row.path]
LLM_CALL_PATHS = frozenset(row.path for row in ENDPOINTS if row.llm_call)
ANTHROPIC_PATHS = tuple(row.path for row in ENDPOINTS if row.errors == "anthropic")


def find(path: str) -> Endpoint | None:
    """The row of ``path`` (a canonical path), or None."""
    row = _EXACT.get(path)
    return row if row is not None else next((row for row in _PATTERNS if row.matches(path)), None)


def document() -> dict[str, Any]:
    """The OpenAPI document of the table."""
    return openapi.document(ENDPOINTS)
