"""The OpenAI Responses API (``POST /v1/responses``), translated to and from the gateway's one call.

A Responses request becomes a chat-completions request (routing/protocol.py), the representation the
router, verifiers, budgets, ledger and learning cycle all work on; the answer comes back as a Response
object (``stream``: a stream as the typed ``response.*`` events).

Only documented request fields are accepted (``extra="forbid"``), one level down as well (input
items, content parts, tools), so no caller-supplied connection argument reaches a backend. Input items:
messages (``input_text``, ``input_image`` with a URL or data URL, ``output_text``, ``refusal``),
``function_call`` and ``function_call_output``; ``reasoning`` items are accepted and dropped (a chat
backend has no such input). Tools: function tools only. ``text.format`` becomes the chat
``response_format`` (so a json_schema verifier checks a JSON-schema answer), ``reasoning.effort`` the
``reasoning_effort``. ``include``, ``truncation``, ``top_logprobs``, ``max_tool_calls``,
``prompt_cache_retention`` and ``stream_options`` are accepted and not forwarded; a part's
``prompt_cache_breakpoint`` is a cache write, priced (translate.py).

Stored responses need no table of their own: the response id is ``resp_<invocation uuid hex>`` and
names the call's ledger row (routing/models.py Invocation), whose ``request`` holds the whole
conversation in chat form and whose ``response`` holds the answer; the row's ``request.metadata``
carries the Responses-only facts under ``skillgate_response`` (``store``, whether ``messages[0]`` is
the ``instructions``, the ``previous_response_id``); metadata is gateway-only, it never reaches a
backend (protocol.GATEWAY_ONLY). So a stored response lives as long as the row keeps its bodies
(LEDGER_RETENTION_DAYS); ``store: false`` keeps the row (costs, learning) but makes the response
neither retrievable nor continuable; ``DELETE`` blanks the bodies as the retention purge does and keeps
the row and its costs.

The package, one module a job: ``models`` (the request as documented), ``translate`` (to the one call),
``store`` (the ledger row a response id names), ``items`` (input items pages), ``render`` (the Response
object) and ``stream`` (its events).
"""

from routing.api.responses.items import input_items, items_page, page_of
from routing.api.responses.protocol import ID_PREFIX, RESERVED, ResponsesRequest, parse
from routing.api.responses.render import response_of
from routing.api.responses.store import Gone, Stored, conversation_json, delete, find, history, usage_of
from routing.api.responses.stream import response_events
from routing.api.responses.translate import to_chat

__all__ = [
    "ID_PREFIX",
    "RESERVED",
    "Gone",
    "ResponsesRequest",
    "Stored",
    "conversation_json",
    "delete",
    "find",
    "history",
    "input_items",
    "items_page",
    "page_of",
    "parse",
    "response_events",
    "response_of",
    "to_chat",
    "usage_of",
]
