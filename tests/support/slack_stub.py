"""A local server that speaks the Slack Web API (and response_url webhooks), for the bot's tests.

The bot's ``slack_sdk.WebClient`` reaches it through ``base_url`` exactly as it would reach
https://slack.com/api/: methods are POSTed (JSON or form-encoded) to ``/api/<method>`` with the bot
token as a bearer token, and answered ``{"ok": true, ...}`` in Slack's shapes. Every call is recorded
so tests can assert on what Slack would have received. ``fail(method, error)`` makes one method
answer ``{"ok": false, "error": ...}`` (e.g. ``not_in_channel``).
"""

from __future__ import annotations

import itertools
import json
import threading
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from bench.support.threaded_server import ThreadedServer

TEAM_ID = "T0TEST"
BOT_USER_ID = "U0BOT"
BOT_ID = "B0BOT"


@dataclass
class Call:
    method: str
    args: dict[str, Any]
    token: str
    response: dict[str, Any] = field(default_factory=dict)


@dataclass
class SlackStub(ThreadedServer):
    host: str = "127.0.0.1"
    port: int = 0
    calls: list[Call] = field(default_factory=list)
    responses: list[dict[str, Any]] = field(default_factory=list)  # what response_url received
    failures: dict[str, str] = field(default_factory=dict)
    threads: dict[str, dict[str, Any]] = field(default_factory=dict)  # a thread's first message, by its ts

    def __post_init__(self) -> None:
        self._ts = itertools.count(1)
        self._lock = threading.Lock()

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/api/"

    def response_url(self, name: str = "hook") -> str:
        return f"http://{self.host}:{self.port}/response/{name}"

    def reset(self) -> None:
        with self._lock:
            self.calls.clear()
            self.responses.clear()
            self.failures.clear()
            self.threads.clear()

    def fail(self, method: str, error: str) -> None:
        self.failures[method] = error

    def of(self, method: str) -> list[dict[str, Any]]:
        """The arguments of every call of one method, in order."""
        with self._lock:
            return [c.args for c in self.calls if c.method == method]

    def posted(self) -> list[dict[str, Any]]:
        """The messages chat.postMessage accepted, each with the ``ts`` it was given."""
        with self._lock:
            return [
                {**c.args, "ts": c.response["ts"]}
                for c in self.calls
                if c.method == "chat.postMessage" and c.response.get("ok")
            ]

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/api/{method}", self._api)
        app.router.add_post("/response/{name}", self._response_url)
        return app

    async def _args(self, request: web.Request) -> dict[str, Any]:
        if request.content_type == "application/json":
            body = await request.json()
            return dict(body) if isinstance(body, dict) else {}
        form = await request.post()
        args: dict[str, Any] = {}
        for key, value in form.items():
            text = str(value)
            if key in ("blocks", "attachments", "metadata"):  # form posts carry these as JSON strings
                try:
                    args[key] = json.loads(text)
                    continue
                except ValueError:
                    pass
            args[key] = text
        return args

    def _next_ts(self) -> str:
        return f"1700000000.{next(self._ts):06d}"

    async def _api(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        args = await self._args(request)
        token = request.headers.get("Authorization", "").removeprefix("Bearer ").strip()
        if not token:
            answer: dict[str, Any] = {"ok": False, "error": "not_authed"}
        elif method in self.failures:
            answer = {"ok": False, "error": self.failures[method]}
        else:
            answer = self._answer(method, args)
        with self._lock:
            self.calls.append(Call(method, args, token, answer))
        return web.json_response(answer)

    def _answer(self, method: str, args: dict[str, Any]) -> dict[str, Any]:
        if method == "auth.test":
            return {
                "ok": True,
                "url": "https://skillgate-test.slack.com/",
                "team": "Skillgate test",
                "user": "skillgate",
                "team_id": TEAM_ID,
                "user_id": BOT_USER_ID,
                "bot_id": BOT_ID,
            }
        if method in ("chat.postMessage", "chat.update", "chat.postEphemeral"):
            if not args.get("channel"):
                return {"ok": False, "error": "channel_not_found"}
            if not args.get("text") and not args.get("blocks"):
                return {"ok": False, "error": "no_text"}
        if method == "chat.postMessage":
            ts = self._next_ts()
            message = {"type": "message", "text": args.get("text", ""), "user": BOT_USER_ID, "ts": ts}
            for key in ("blocks", "thread_ts"):
                if key in args:
                    message[key] = args[key]
            return {"ok": True, "channel": args["channel"], "ts": ts, "message": message}
        if method == "chat.update":
            if not args.get("ts"):
                return {"ok": False, "error": "message_not_found"}
            return {"ok": True, "channel": args["channel"], "ts": args["ts"], "text": args.get("text", "")}
        if method == "chat.postEphemeral":
            if not args.get("user"):
                return {"ok": False, "error": "user_not_in_channel"}
            return {"ok": True, "message_ts": self._next_ts()}
        if method == "conversations.replies":
            first = self.threads.get(str(args.get("ts")))
            return {"ok": True, "messages": [first]} if first else {"ok": False, "error": "thread_not_found"}
        return {"ok": False, "error": "unknown_method"}

    async def _response_url(self, request: web.Request) -> web.Response:
        body = await request.json()
        with self._lock:
            self.responses.append({"name": request.match_info["name"], **body})
        return web.Response(text="ok")
