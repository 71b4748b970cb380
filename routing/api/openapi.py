"""The OpenAPI 3.1 description of the OpenAI-compatible endpoints under ``/v1``.

Its paths are the rows of the endpoint table (routing/api/endpoints.py) that carry an OpenAPI entry, each
entry one of the path items below; its schemas come from the same pydantic models that parse the
requests (the rows' ``request_model``), so the document and the allow-list of parameters cannot drift
apart. Served at ``GET /v1/openapi.json``; the slow suite fuzzes the running server against it with
schemathesis.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from pydantic.json_schema import models_json_schema

if TYPE_CHECKING:
    from routing.api.endpoints import Endpoint

_REF = "#/components/schemas/{model}"

_ERROR = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["message", "type", "param", "code"],
            "properties": {
                "message": {"type": "string"},
                "type": {"type": "string"},
                "param": {"type": ["string", "null"]},
                "code": {"type": ["string", "null"]},
            },
        }
    },
}


def _errors(*statuses: int) -> dict[str, Any]:
    ref = {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}
    return {str(status): {"description": "An OpenAI-shaped error.", **ref} for status in statuses}


def _json_body(model: str) -> dict[str, Any]:
    return {"required": True, "content": {"application/json": {"schema": {"$ref": _REF.format(model=model)}}}}


_RESPONSE = {
    "type": "object",
    "required": ["id", "object", "created_at", "status", "model", "output", "usage"],
    "properties": {
        "id": {"type": "string", "pattern": "^resp_[0-9a-f]{32}$"},
        "object": {"const": "response"},
        "status": {"enum": ["completed", "incomplete", "failed", "in_progress"]},
        "output": {"type": "array", "items": {"type": "object"}},
    },
}
_EMBEDDINGS = {
    "type": "object",
    "required": ["object", "data", "model", "usage"],
    "properties": {
        "object": {"const": "list"},
        "data": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["object", "index", "embedding"],
                "properties": {
                    "object": {"const": "embedding"},
                    "index": {"type": "integer"},
                    "embedding": {
                        "anyOf": [{"type": "array", "items": {"type": "number"}}, {"type": "string"}],
                        "description": "Floats, or base64 of little-endian float32 (encoding_format).",
                    },
                },
            },
        },
        "usage": {"type": "object"},
    },
}
_RESPONSE_ID = {
    "name": "response_id",
    "in": "path",
    "required": True,
    "schema": {"type": "string"},
    "description": "The id a create answered (resp_...); only the key that made it may use it.",
}


_ITEMS_PAGE = {
    "type": "object",
    "required": ["object", "data", "first_id", "last_id", "has_more"],
    "properties": {
        "object": {"const": "list"},
        "data": {"type": "array", "items": {"type": "object"}},
        "first_id": {"type": ["string", "null"]},
        "last_id": {"type": ["string", "null"]},
        "has_more": {"type": "boolean"},
    },
}


def _response_objects() -> tuple[dict[str, Any], dict[str, Any]]:
    found = {
        "description": "The stored Response object.",
        "content": {"application/json": {"schema": {"$ref": _REF.format(model="Response")}}},
    }
    deleted = {
        "type": "object",
        "required": ["id", "object", "deleted"],
        "properties": {
            "id": {"type": "string"},
            "object": {"const": "response.deleted"},
            "deleted": {"const": True},
        },
    }
    return found, deleted


def create_response() -> dict[str, Any]:
    return {
        "post": {
            "operationId": "createResponse",
            "requestBody": _json_body("ResponsesRequest"),
            "responses": {
                "200": {
                    "description": "A Response, or its typed events (response.*) when stream is true.",
                    "content": {
                        "application/json": {"schema": {"$ref": _REF.format(model="Response")}},
                        "text/event-stream": {"schema": {"type": "string"}},
                    },
                },
                **_errors(400, 401, 402, 403, 404, 413, 429, 502, 503, 504),
            },
        }
    }


def stored_response() -> dict[str, Any]:
    found, deleted = _response_objects()
    return {
        "parameters": [_RESPONSE_ID],
        "get": {
            "operationId": "getResponse",
            "responses": {"200": found, **_errors(401, 404)},
        },
        "delete": {
            "operationId": "deleteResponse",
            "description": "Blanks the stored bodies; the call stays in the ledger with its costs.",
            "responses": {
                "200": {
                    "description": "Deleted.",
                    "content": {"application/json": {"schema": deleted}},
                },
                **_errors(401, 404),
            },
        },
    }


def response_input_items() -> dict[str, Any]:
    return {
        "parameters": [
            _RESPONSE_ID,
            {"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": 100}},
            {"name": "order", "in": "query", "schema": {"enum": ["asc", "desc"]}},
            {"name": "after", "in": "query", "schema": {"type": "string"}},
        ],
        "get": {
            "operationId": "listInputItems",
            "description": "The input items of the response's own request, paginated as OpenAI's lists.",
            "responses": {
                "200": {
                    "description": "One page of input items.",
                    "content": {"application/json": {"schema": _ITEMS_PAGE}},
                },
                **_errors(400, 401, 404),
            },
        },
    }


def cancel_response() -> dict[str, Any]:
    found, _ = _response_objects()
    return {
        "parameters": [_RESPONSE_ID],
        "post": {
            "operationId": "cancelResponse",
            "description": "Only background responses can be cancelled, and the gateway makes none: "
            "a stored response gets OpenAI's 400.",
            "responses": {"200": found, **_errors(400, 401, 404)},
        },
    }


def chat_completions() -> dict[str, Any]:
    completion = {"type": "object", "required": ["id", "object", "choices"]}
    return {
        "post": {
            "operationId": "createChatCompletion",
            "requestBody": _json_body("ChatRequest"),
            "responses": {
                "200": {
                    "description": "A chat completion, or an event stream when stream is true.",
                    "content": {
                        "application/json": {"schema": completion},
                        "text/event-stream": {"schema": {"type": "string"}},
                    },
                },
                **_errors(400, 401, 402, 403, 404, 413, 429, 502, 503, 504),
            },
        }
    }


def embeddings() -> dict[str, Any]:
    return {
        "post": {
            "operationId": "createEmbedding",
            "requestBody": _json_body("EmbeddingRequest"),
            "responses": {
                "200": {
                    "description": "One embedding per input, in input order.",
                    "content": {"application/json": {"schema": _EMBEDDINGS}},
                },
                **_errors(400, 401, 402, 404, 413, 429, 502, 503, 504),
            },
        }
    }


def models() -> dict[str, Any]:
    return {
        "get": {
            "operationId": "listModels",
            "responses": {
                "200": {
                    "description": "The models a call may name ('auto' routes).",
                    "content": {"application/json": {"schema": {"type": "object"}}},
                },
                **_errors(401),
            },
        }
    }


PathItem = Callable[[], dict[str, Any]]


def document(endpoints: Iterable[Endpoint]) -> dict[str, Any]:
    """The document of the rows of ``endpoints`` that have an OpenAPI entry."""
    rows = [row for row in endpoints if row.openapi is not None]
    request_models = [row.request_model for row in rows if row.request_model is not None]
    _, top = models_json_schema([(model, "validation") for model in request_models], ref_template=_REF)
    schemas: dict[str, Any] = dict(top.get("$defs", {}))
    schemas["Error"] = _ERROR
    schemas["Response"] = _RESPONSE
    return {
        "openapi": "3.1.0",
        "info": {"title": "Skillgate gateway (OpenAI-compatible)", "version": "1"},
        "servers": [{"url": "/"}],
        "components": {
            "schemas": schemas,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{"bearer": []}],
        "paths": {row.path: row.openapi() for row in rows if row.openapi is not None},
    }
