"""Prices per token of a backend (configured, else litellm's price map) and costs of usage."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from functools import lru_cache
from typing import Any

import orjson

from routing.models import Backend

# Chat templates add a few special tokens around each message; this bounds them generously.
_TEMPLATE_TOKENS_PER_MESSAGE = 16
_TEMPLATE_TOKENS_PER_CALL = 64


class PricingError(Exception):
    pass


@dataclass(frozen=True)
class Prices:
    input: Decimal
    output: Decimal
    cached_input: Decimal


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0

    @classmethod
    def from_openai(cls, usage: dict[str, Any] | None) -> Usage:
        if not usage:
            return cls()
        details = usage.get("prompt_tokens_details") or {}
        return cls(
            prompt_tokens=int(usage.get("prompt_tokens") or 0),
            completion_tokens=int(usage.get("completion_tokens") or 0),
            cached_tokens=int(details.get("cached_tokens") or 0),
        )


def prices_for(backend: Backend) -> Prices:
    if backend.input_cost_per_token is not None and backend.output_cost_per_token is not None:
        cached_price = backend.cached_input_cost_per_token
        return Prices(
            backend.input_cost_per_token,
            backend.output_cost_per_token,
            cached_price if cached_price is not None else backend.input_cost_per_token,
        )
    prices = _price_map(backend.model)
    if prices is None:
        raise PricingError(
            f"No price for backend {backend.name!r} ({backend.model}): litellm does not know the model;"
            " set input/output cost per token on the backend."
        )
    return prices


@lru_cache(maxsize=256)
def _price_map(model: str) -> Prices | None:
    """litellm's bundled price of ``model`` (read once per process: the map ships with the package)."""
    import litellm  # heavy import (~3 s), only needed for unpriced backends

    try:
        info = litellm.get_model_info(model)
    except Exception:
        return None
    inp = Decimal(str(info.get("input_cost_per_token") or 0))
    out = Decimal(str(info.get("output_cost_per_token") or 0))
    cached = info.get("cache_read_input_token_cost")
    return Prices(inp, out, Decimal(str(cached)) if cached is not None else inp)


def usage_cost(prices: Prices, usage: Usage) -> Decimal:
    cached = min(usage.cached_tokens, usage.prompt_tokens)
    return (
        prices.input * (usage.prompt_tokens - cached)
        + prices.cached_input * cached
        + prices.output * usage.completion_tokens
    )


def prompt_token_bound(body: dict[str, Any]) -> int:
    """An upper bound on the prompt tokens a provider may bill for the upstream ``body``: every byte of
    it (byte-level tokenizers never emit more tokens than bytes), whatever field carries them (messages,
    tools, functions, a response schema, the system text; Anthropic's and Responses' shapes arrive here
    translated into this body), plus the chat template's tokens. Budget holds and the charge of a
    stream cut off before its usage both come from here."""
    messages = body.get("messages") or []
    size = len(orjson.dumps(body, default=str, option=orjson.OPT_NON_STR_KEYS))
    templates = _TEMPLATE_TOKENS_PER_MESSAGE * len(messages) + _TEMPLATE_TOKENS_PER_CALL
    return size + templates + remote_media_tokens(messages)


# Media the body only names (a URL, a provider's file id; keys with the media:urls scope) is billed for
# its content, which the body's bytes do not show: each counts as the most a provider bills for one.
IMAGE_TOKEN_BOUND = 8_192  # above every provider's largest image (OpenAI high detail, Claude ~1.6k)
FILE_TOKEN_BOUND = 131_072  # a document (a PDF by URL or file id): a long one, rendered page by page
_IMAGE_PARTS = frozenset({"image_url", "input_image", "image"})


def remote_media_tokens(messages: list[Any]) -> int:
    """The worst case of the media parts of ``messages`` that name their content instead of holding it."""
    tokens = 0
    for message in messages:
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, list):
            continue
        for part in content:
            if not isinstance(part, dict) or part.get("type") in (None, "text", "input_text", "output_text"):
                continue
            if not _names_content(part):
                continue
            tokens += IMAGE_TOKEN_BOUND if part.get("type") in _IMAGE_PARTS else FILE_TOKEN_BOUND
    return tokens


def _names_content(part: dict[str, Any]) -> bool:
    """Whether a media part refers to content elsewhere (any string but a ``data:`` URL or base64 data
    under a url/id key)."""
    stack: list[Any] = [part]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            for key, value in item.items():
                if key in ("url", "file_id", "file_url", "image_url") and isinstance(value, str):
                    if not value.startswith("data:"):
                        return True
                elif isinstance(value, dict | list):
                    stack.append(value)
        elif isinstance(item, list):
            stack.extend(item)
    return False


def completion_token_bound(text: str) -> int:
    """An upper bound on the tokens of an answer's ``text`` (its UTF-8 bytes)."""
    return len(text.encode("utf-8", "surrogatepass"))


def cost_bound(prices: Prices, *, prompt_tokens: int, max_tokens: int) -> Decimal:
    return prices.input * prompt_tokens + prices.output * max_tokens
