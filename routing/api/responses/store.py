"""Stored responses: the ledger row a response id names (``resp_<invocation uuid hex>``); find, continue
and delete, and the usage of a stored answer."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson
from django.db import transaction

from routing.api.responses.protocol import ID_PREFIX, RESERVED
from routing.errors import bad_request
from routing.json_body import scan
from routing.ledger import has_body, request_stub
from routing.ledger import writer as ledger_writer
from routing.models import Invocation

ROW_FIELDS = (
    "id",
    "created_at",
    "api_key_id",
    "requested_model",
    "served_by",
    "status_code",
    "error",
    "legs",
    "request",
    "response",
)


@dataclass
class Stored:
    """What a Response object is rendered from: a call just answered, or its ledger row."""

    id: uuid.UUID
    created_at: float
    model: str
    request: dict[str, Any]  # the chat request (routing/protocol.py) as the ledger stores it
    response: dict[str, Any] | None  # {"message", "finish_reason"}
    usage: dict[str, int]
    status_code: int = 200
    error: str = ""

    @property
    def response_id(self) -> str:
        return f"{ID_PREFIX}{self.id.hex}"


def usage_of(prompt: int, completion: int, cached: int = 0, reasoning: int = 0) -> dict[str, Any]:
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": cached, "cache_write_tokens": 0},
        "output_tokens": completion,
        "output_tokens_details": {"reasoning_tokens": reasoning},
        "total_tokens": prompt + completion,
    }


def chat_usage(usage: dict[str, Any] | None) -> dict[str, Any]:
    usage = usage or {}
    details = usage.get("prompt_tokens_details") or {}
    out_details = usage.get("completion_tokens_details") or {}
    return usage_of(
        int(usage.get("prompt_tokens") or 0),
        int(usage.get("completion_tokens") or 0),
        int(details.get("cached_tokens") or 0),
        int(out_details.get("reasoning_tokens") or 0),
    )


def served_leg_usage(legs: list[dict[str, Any]], served_by: str) -> dict[str, Any]:
    """The tokens of the leg that answered (a failed student leg before it is billed, not shown)."""
    served = [leg for leg in legs if leg.get("role") == served_by and not leg.get("error")]
    leg = served[-1] if served else {}
    return usage_of(
        int(leg.get("prompt_tokens") or 0),
        int(leg.get("completion_tokens") or 0),
        int(leg.get("cached_tokens") or 0),
    )


def facts_of(request: dict[str, Any]) -> dict[str, Any] | None:
    """The Responses-only facts of a stored chat request; None for a call made on another API."""
    metadata = request.get("metadata")
    facts = metadata.get(RESERVED) if isinstance(metadata, dict) else None
    return facts if isinstance(facts, dict) else None


def response_uuid(response_id: str) -> uuid.UUID | None:
    if not response_id.startswith(ID_PREFIX):
        return None
    digits = response_id.removeprefix(ID_PREFIX)
    if len(digits) != 32:
        return None
    try:
        return uuid.UUID(hex=digits)
    except ValueError:
        return None


def _created(value: Any) -> float:
    when = datetime.fromisoformat(value) if isinstance(value, str) else value
    return when.timestamp() if isinstance(when, datetime) else time.time()


def _row(invocation_id: uuid.UUID) -> dict[str, Any] | None:
    """The ledger row as a dict: this process's uncommitted one (read-your-writes), else the database's."""
    pending = ledger_writer.pending_row(str(invocation_id))
    if pending is not None:
        return {name: pending.get(name) for name in ROW_FIELDS}
    return Invocation.objects.filter(pk=invocation_id).values(*ROW_FIELDS).first()


class Gone(Exception):
    """A response that exists no longer or never did for this key; ``message`` says which."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def find(response_id: str, api_key_id: int) -> Stored:
    """The stored response ``response_id`` of key ``api_key_id``; raises ``Gone``.

    Another key's response, a call made on another API, a ``store: false`` response and a deleted one
    are all "not found" (as OpenAI answers); one whose bodies the retention purge blanked says so.
    """
    not_found = Gone(f"Response with id '{response_id}' not found.")
    invocation_id = response_uuid(response_id)
    row = _row(invocation_id) if invocation_id is not None else None
    if row is None or row["api_key_id"] != api_key_id:
        raise not_found
    request = row["request"] or {}
    if request.get("deleted"):
        raise not_found
    if request.get("purged"):
        raise Gone(
            f"Response with id '{response_id}' is no longer stored: its content was purged after the "
            "ledger's retention period (LEDGER_RETENTION_DAYS)."
        )
    if not has_body(request):
        raise Gone(f"Response with id '{response_id}' is not stored: this gateway keeps no bodies.")
    facts = facts_of(request)
    if facts is None or facts.get("store") is False:
        raise not_found
    return Stored(
        id=uuid.UUID(str(row["id"])),
        created_at=_created(row["created_at"]),
        model=row["requested_model"],
        request=request,
        response=row["response"],
        usage=served_leg_usage(row["legs"] or [], row["served_by"]),
        status_code=row["status_code"],
        error=row["error"] or "",
    )


def history(stored: Stored) -> list[dict[str, Any]]:
    """The conversation of a stored response in chat form, its answer last, without its
    ``instructions`` (which, as OpenAI's, do not carry over to the next response)."""
    messages = list(stored.request["messages"])
    facts = facts_of(stored.request) or {}
    if facts.get("instructions") and messages and messages[0].get("role") == "system":
        messages = messages[1:]
    message = (stored.response or {}).get("message")
    if stored.status_code != 200 or not isinstance(message, dict):
        raise bad_request(
            f"Previous response with id '{stored.response_id}' failed; it cannot be continued.",
            param="previous_response_id",
        )
    answer: dict[str, Any] = {"role": "assistant", "content": message.get("content")}
    if message.get("tool_calls"):
        answer["tool_calls"] = [
            {
                "id": call.get("id"),
                "type": "function",
                "function": {
                    "name": (call.get("function") or {}).get("name", ""),
                    "arguments": (call.get("function") or {}).get("arguments", ""),
                },
            }
            for call in message["tool_calls"]
        ]
    return [*messages, answer]


def conversation_json(history: list[dict[str, Any]], body: bytes, *, max_elements: int) -> bytes:
    """The stored conversation a call continues, as JSON (orjson: C speed), once it and the call's own
    body hold at most ``max_elements`` JSON elements together (``json_body.scan``); else a 400 naming
    the limit. A conversation is bounded as one body would be: without this, each call of a chain
    stored the whole conversation so far, and a body of two words made the serving process walk all of
    it, unbounded and outside the body work's turn (issue 37, round five). The JSON is the weight the
    call's turn takes (routing/call/body_work.py)."""
    dumped = orjson.dumps(history, default=str)
    elements = sum(scan(json, max_elements=max_elements).elements for json in (dumped, body))
    if elements > max_elements:
        raise bad_request(
            f"The conversation of previous_response_id and this request's input hold {elements} JSON "
            f"elements together; at most {max_elements} are allowed (SKILLGATE_MAX_JSON_ELEMENTS). "
            "Start a new conversation with the input it needs.",
            param="previous_response_id",
            code="conversation_too_large",
        )
    return dumped


def delete(response_id: str, api_key_id: int) -> None:
    """Blanks the stored bodies of a response (as the retention purge does: the row, its costs and
    tokens stay); raises ``Gone`` where ``find`` would."""
    invocation_id = find(response_id, api_key_id).id
    if ledger_writer.pending_row(str(invocation_id)) is not None:
        ledger_writer.flush()  # answered by this process moments ago: commit it first
    with transaction.atomic():
        row = Invocation.objects.select_for_update().filter(pk=invocation_id).only("request").first()
        if row is None:  # committed by nobody (the writer failed): nothing stored to delete
            raise Gone(f"Response with id '{response_id}' not found.")
        blanked = {"purged": True, "deleted": True, **request_stub(row.request or {})}
        # update(), not save(): None is SQL NULL here, as in ledger.ledger_bodies_purge.
        Invocation.objects.filter(pk=invocation_id).update(request=blanked, response=None)
