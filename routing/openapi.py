"""The OpenAPI 3.1 description of the OpenAI-compatible endpoints under ``/v1``.

Built from the same pydantic models that parse the requests (protocol.py, responses/models.py),
so the document and the allow-list of parameters cannot drift apart. Served at ``GET /v1/openapi.json``;
the slow suite fuzzes the running server against it with schemathesis.
"""

from __future__ import annotations

from typing import Any

from pydantic.json_schema import models_json_schema

from routing.embeddings import EmbeddingRequest
from routing.protocol import ChatRequest
from routing.responses import ResponsesRequest

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


def _responses_paths() -> dict[str, Any]:
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
    return {
        "/v1/responses": {
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
        },
        "/v1/responses/{response_id}": {
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
        },
        "/v1/responses/{response_id}/input_items": {
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
        },
        "/v1/responses/{response_id}/cancel": {
            "parameters": [_RESPONSE_ID],
            "post": {
                "operationId": "cancelResponse",
                "description": "Only background responses can be cancelled, and the gateway makes none: "
                "a stored response gets OpenAI's 400.",
                "responses": {"200": found, **_errors(400, 401, 404)},
            },
        },
    }


def document() -> dict[str, Any]:
    _, top = models_json_schema(
        [(ChatRequest, "validation"), (ResponsesRequest, "validation"), (EmbeddingRequest, "validation")],
        ref_template=_REF,
    )
    schemas: dict[str, Any] = dict(top.get("$defs", {}))
    schemas["Error"] = _ERROR
    schemas["Response"] = _RESPONSE
    completion = {"type": "object", "required": ["id", "object", "choices"]}
    return {
        "openapi": "3.1.0",
        "info": {"title": "Skillgate gateway (OpenAI-compatible)", "version": "1"},
        "servers": [{"url": "/"}],
        "components": {
            "schemas": schemas,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{"bearer": []}],
        "paths": {
            "/v1/chat/completions": {
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
            },
            "/v1/embeddings": {
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
            },
            "/v1/models": {
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
            },
            **_responses_paths(),
        },
    }
