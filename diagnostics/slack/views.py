"""One endpoint for every Slack delivery (events, slash commands, interactions): bolt dispatches."""

from __future__ import annotations

from urllib.parse import parse_qsl

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from diagnostics.slack import bolt, conf
from routing.json_body import JsonBodyError, loads_request


def _malformed(request: HttpRequest) -> str:
    """Why bolt could not parse this body ("" when it can). Bolt parses the JSON (an event, or the
    ``payload`` field of an interaction) before it checks the signature, so a body nested too deeply
    or not UTF-8 would be a 500 for anyone; it is refused here first, the way bolt would read it."""
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
    if problem := _malformed(request):
        return JsonResponse({"error": {"message": problem, "code": "invalid_json"}}, status=400)
    return bolt.handler().handle(request)
