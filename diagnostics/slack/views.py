"""One endpoint for every Slack delivery (events, slash commands, interactions): bolt dispatches."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from diagnostics.slack import bolt, conf


@csrf_exempt
def slack_endpoint(request: HttpRequest) -> HttpResponse:
    if not conf.enabled():
        return JsonResponse({"error": {"message": conf.OFF_MESSAGE, "code": "slack_off"}}, status=404)
    if request.method != "POST":
        return JsonResponse(
            {"error": {"message": "Slack posts here.", "code": "method_not_allowed"}}, status=405
        )
    return bolt.handler().handle(request)
