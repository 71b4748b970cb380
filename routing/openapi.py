"""The OpenAPI 3.1 description of the OpenAI-compatible endpoints under ``/v1``.

Built from the same pydantic models that parse the requests (routing/protocol.py), so the document and
the allow-list of parameters cannot drift apart. Served at ``GET /v1/openapi.json``; the slow suite
fuzzes the running server against it with schemathesis.
"""

from __future__ import annotations

from typing import Any

from routing.protocol import ChatRequest

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


def document() -> dict[str, Any]:
    chat = ChatRequest.model_json_schema(ref_template=_REF)
    schemas: dict[str, Any] = dict(chat.pop("$defs", {}))
    schemas["ChatRequest"] = chat
    schemas["Error"] = _ERROR
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
                    "requestBody": {
                        "required": True,
                        "content": {
                            "application/json": {"schema": {"$ref": _REF.format(model="ChatRequest")}}
                        },
                    },
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
        },
    }
