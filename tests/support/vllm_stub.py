"""A local stand-in for one vLLM replica: the OpenAI stub (bench/support/openai_stub.py) plus what vLLM
adds for LoRA adapters loaded at run time.

- ``GET /v1/models`` lists the base model and every adapter loaded;
- ``POST /v1/load_lora_adapter`` / ``/v1/unload_lora_adapter`` ({"lora_name", "lora_path"}) answer as
  vLLM does (200; 400 "already been loaded"; 404 for an unknown name), or ``load_status`` when set
  (a replica that cannot load);
- a chat completion for a model it does not serve answers vLLM's 404 "The model `x` does not exist.";
- :meth:`restart` forgets every adapter loaded at run time, as a restarted vLLM does.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from bench.support.openai_stub import OpenAIStub


def not_found(message: str) -> web.Response:
    return web.json_response(
        {"error": {"message": message, "type": "NotFoundError", "param": None, "code": 404}}, status=404
    )


@dataclass
class VllmStub(OpenAIStub):
    base_model: str = "tiny-base"
    loaded: dict[str, str] = field(default_factory=dict)  # adapter name -> path
    load_status: int = 200  # another status: every load is refused with it
    loads: list[str] = field(default_factory=list)  # names asked to load, in order
    restarts: int = 0

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._vllm_chat)
        app.router.add_get("/v1/models", self._vllm_models)
        app.router.add_post("/v1/load_lora_adapter", self._load)
        app.router.add_post("/v1/unload_lora_adapter", self._unload)
        return app

    def restart(self) -> None:
        """What a vLLM restart does to runtime adapters: all gone."""
        self.loaded.clear()
        self.restarts += 1

    async def _vllm_models(self, request: web.Request) -> web.Response:
        names = [self.base_model, *self.loaded]
        return web.json_response({"object": "list", "data": [{"id": n, "object": "model"} for n in names]})

    async def _load(self, request: web.Request) -> web.Response:
        body: dict[str, Any] = await request.json()
        name = str(body.get("lora_name", ""))
        self.loads.append(name)
        if self.load_status != 200:
            return web.json_response(
                {"error": {"message": "cannot load", "code": self.load_status}}, status=self.load_status
            )
        if name in self.loaded:
            message = f"The lora adapter '{name}' has already been loaded."
            return web.json_response({"error": {"message": message, "code": 400}}, status=400)
        self.loaded[name] = str(body.get("lora_path", ""))
        return web.Response(text=f"Success: LoRA adapter '{name}' added successfully.")

    async def _unload(self, request: web.Request) -> web.Response:
        body: dict[str, Any] = await request.json()
        name = str(body.get("lora_name", ""))
        if self.loaded.pop(name, None) is None:
            return not_found(f"The lora adapter '{name}' cannot be found.")
        return web.Response(text=f"Success: LoRA adapter '{name}' removed successfully.")

    async def _vllm_chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        model = body.get("model")
        if model != self.base_model and model not in self.loaded:
            self.requests.append(body)
            return not_found(f"The model `{model}` does not exist.")
        return await self._chat(request)
