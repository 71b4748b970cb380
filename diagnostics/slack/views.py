"""One endpoint for every Slack delivery (events, slash commands, interactions): bolt dispatches.

The signature is checked first, over the raw bytes, before anything parses the body (issue 37, round
seven). Bolt parses a body (JSON, a form, an interaction's ``payload``) before its own signature check,
and so did :func:`_malformed`: an unsigned 3.8 MB form of 1.3 million ``%41`` escapes cost ``parse_qsl``
about a second of the serving process's CPU under the GIL, four at once held ``GET /v1/models`` for
1.7 s, and one of 1.9 million empty fields was a 500 after 18 s. Anyone who can reach the port could send
them. The HMAC runs at C speed whatever the body; only a body Slack signed is parsed.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from urllib.parse import parse_qsl

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from diagnostics.slack import bolt, conf
from routing.json_body import JsonBodyError, loads_request

SIGNATURE_WINDOW_S = 300  # Slack's: a request signed more than five minutes away from now is refused
_TIMESTAMP_DIGITS = 12


def signed(request: HttpRequest, secret: str) -> bool:
    """Whether Slack signed this request: ``X-Slack-Signature`` is ``v0=`` and the HMAC-SHA256, under
    the signing secret, of ``v0:<X-Slack-Request-Timestamp>:<the body's bytes>``, within
    :data:`SIGNATURE_WINDOW_S` of now. Linear in the body, at C speed; nothing is parsed."""
    timestamp = request.headers.get("X-Slack-Request-Timestamp", "")
    signature = request.headers.get("X-Slack-Signature", "")
    if not (timestamp.isascii() and timestamp.isdigit() and len(timestamp) <= _TIMESTAMP_DIGITS):
        return False
    if not signature.isascii() or abs(time.time() - int(timestamp)) > SIGNATURE_WINDOW_S:
        return False
    message = b"v0:" + timestamp.encode() + b":" + request.body
    expected = "v0=" + hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected.encode(), signature.encode())


def _malformed(request: HttpRequest) -> str:
    """Why bolt could not parse this signed body ("" when it can): a body nested too deeply or not UTF-8
    would be a 500; it is refused here first, the way bolt would read it."""
    try:
        body = request.body.decode("utf-8")
    except UnicodeDecodeError:
        return "Request body is not UTF-8."
    if not body:
        return ""
    try:
        if request.content_type == "application/json" or body.startswith("{"):
            loads_request(body)
        elif "payload" in body:
            payload = dict(parse_qsl(body, keep_blank_values=True)).get("payload")
            if payload is not None:
                loads_request(payload)
    except JsonBodyError as exc:
        return exc.message
    return ""


@csrf_exempt
def slack_endpoint(request: HttpRequest) -> HttpResponse:
    if not conf.enabled():
        return JsonResponse({"error": {"message": conf.OFF_MESSAGE, "code": "slack_off"}}, status=404)
    if request.method != "POST":
        return JsonResponse(
            {"error": {"message": "Slack posts here.", "code": "method_not_allowed"}}, status=405
        )
    if not signed(request, conf.signing_secret()):
        return JsonResponse(
            {"error": {"message": "The request is not signed by Slack.", "code": "invalid_signature"}},
            status=401,
        )
    if problem := _malformed(request):
        return JsonResponse({"error": {"message": problem, "code": "invalid_json"}}, status=400)
    return bolt.handler().handle(request)
