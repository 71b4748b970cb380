"""Prices per token of a backend (configured, else litellm's price map) and costs of usage.

Every request parameter that changes what a provider bills is priced here (``Terms``): the service
tier (a multiplier of every token price), audio in and out (their own token prices), web search (a
fee per call), a predicted output (its rejected tokens are billed as output, so the worst case of
the output grows by the prediction's size) and prompt-cache writes (a content part's, a tool call's
or a tool's ``cache_control``, routing/cache_markers.py:
the tokens written are billed at the cache-write price, above the input price, and the usage's
``cache_creation_input_tokens`` settles them); so is the prompt's length where a model is priced higher
past a context length (litellm's ``*_above_<n>k_tokens`` prices). A backend without the price a
call's parameter needs refuses the call before any upstream call (``refuse_unpriced``: a 400 naming
the parameter), except a prompt-cache marker: on a backend with no cache-write price it is dropped,
not sent (routing/prompt_cache.py), so no write happens and none goes unbilled.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from decimal import Decimal
from functools import lru_cache
from typing import Any

import orjson

from routing import cache_markers
from routing import price_options as options
from routing.errors import ApiError
from routing.models import Backend

# Chat templates add a few special tokens around each message; this bounds them generously.
_TEMPLATE_TOKENS_PER_MESSAGE = 16
_TEMPLATE_TOKENS_PER_CALL = 64
# Service tiers billed at the ordinary prices: no entry in a backend's price options needed.
ORDINARY_TIERS = frozenset({"auto", "default"})
ONE = Decimal(1)


class PricingError(Exception):
    pass


@dataclass(frozen=True)
class Prices:
    input: Decimal
    output: Decimal
    cached_input: Decimal
    audio_input: Decimal | None = None
    audio_output: Decimal | None = None
    web_search_call: Decimal | None = None  # the fee of one call that searches the web
    cache_write: Decimal | None = None  # a prompt token written to the provider's cache (5 minutes)
    cache_write_1h: Decimal | None = None  # ... to its one-hour cache
    tiers: tuple[tuple[str, Decimal], ...] = ()  # service tier -> multiplier of every token price
    # A model priced higher past a prompt length: (prompt tokens above which, input, output), ascending.
    long_context: tuple[tuple[int, Decimal, Decimal], ...] = ()

    def at_length(self, prompt_tokens: int) -> Prices:
        """These prices for a prompt of ``prompt_tokens``: past a long-context threshold of the model,
        its dearer input and output prices (cached input scaled as the input is)."""
        above = [entry for entry in self.long_context if prompt_tokens > entry[0]]
        if not above:
            return self
        _, inp, out = above[-1]

        def scaled(price: Decimal | None) -> Decimal | None:  # dearer as the input is
            return price * inp / self.input if price is not None and self.input else price

        cached = self.cached_input * inp / self.input if self.input else inp
        return replace(
            self,
            input=inp,
            output=out,
            cached_input=cached,
            cache_write=scaled(self.cache_write),
            cache_write_1h=scaled(self.cache_write_1h),
            long_context=(),
        )

    def cache_write_price(self, one_hour: bool) -> Decimal | None:
        """What a prompt token written to the cache costs (the hour's cache when ``one_hour``)."""
        return self.cache_write_1h if one_hour else self.cache_write

    def multiplier(self, tier: str | None) -> Decimal | None:
        """The multiplier of ``tier``: 1 for none, auto and default; None when the tier has no price."""
        if tier is None or tier in ORDINARY_TIERS:
            return dict(self.tiers).get(tier or "default", ONE)
        return dict(self.tiers).get(tier)


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    audio_prompt_tokens: int = 0  # of prompt_tokens
    audio_completion_tokens: int = 0  # of completion_tokens
    service_tier: str | None = None  # the tier the provider says it served the call at
    cache_write_tokens: int = 0  # prompt tokens written to the prompt cache (Anthropic's cache creation)

    @classmethod
    def from_openai(cls, usage: dict[str, Any] | None, service_tier: Any = None) -> Usage:
        """OpenAI's usage object; ``service_tier``: the response's own (the tier it was billed at)."""
        tier = service_tier if isinstance(service_tier, str) else None
        if not usage or not isinstance(usage, dict):
            return cls(service_tier=tier)
        details = _object(usage.get("prompt_tokens_details"))
        out_details = _object(usage.get("completion_tokens_details"))
        return cls(
            prompt_tokens=_count(usage.get("prompt_tokens")),
            # Accepted and rejected prediction tokens are in completion_tokens, as OpenAI bills them.
            completion_tokens=_count(usage.get("completion_tokens")),
            cached_tokens=_count(details.get("cached_tokens")),
            audio_prompt_tokens=_count(details.get("audio_tokens")),
            audio_completion_tokens=_count(out_details.get("audio_tokens")),
            service_tier=tier,
            # litellm's names for Anthropic's cache creation, and OpenAI-compatible routers' name
            cache_write_tokens=max(
                _count(usage.get("cache_creation_input_tokens")),
                _count(details.get("cache_creation_tokens")),
                _count(details.get("cache_write_tokens")),
            ),
        )


def _object(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


# More tokens than any call can be billed (the output cap is 2^20, a prompt a few million): a usage
# past it is a lie, and the charge of an attempt is capped at its worst case anyway (call/legs.py).
MAX_USAGE_TOKENS = 1 << 31


def _count(value: Any) -> int:
    """A token count from a provider's usage (an integer, an integral float or a string of digits, as
    providers send them), at most :data:`MAX_USAGE_TOKENS`; 0 for anything else or below 0."""
    if isinstance(value, bool):
        return 0
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value) if len(value) < 20 else MAX_USAGE_TOKENS
    if isinstance(value, float) and value.is_integer():
        value = int(min(value, MAX_USAGE_TOKENS))
    return min(value, MAX_USAGE_TOKENS) if isinstance(value, int) and value > 0 else 0


def prices_for(backend: Backend) -> Prices:
    if backend.input_cost_per_token is not None and backend.output_cost_per_token is not None:
        cached_price = backend.cached_input_cost_per_token
        base = Prices(
            backend.input_cost_per_token,
            backend.output_cost_per_token,
            cached_price if cached_price is not None else backend.input_cost_per_token,
        )
    else:
        mapped = _price_map(backend.model)
        if mapped is None:
            raise PricingError(
                f"No price for backend {backend.name!r} ({backend.model}): litellm does not know the model;"
                " set input/output cost per token on the backend."
            )
        base = mapped
    return _with_options(base, backend.price_options or {})


def _with_options(base: Prices, configured: dict[str, Any]) -> Prices:
    """``base`` with the backend's own price options on top (routing/price_options.py)."""
    if not configured:
        return base

    def price(name: str, default: Decimal | None) -> Decimal | None:
        return options.amount(configured[name], where=name) if name in configured else default

    tiers = dict(base.tiers)
    for tier, multiplier in (configured.get(options.SERVICE_TIERS) or {}).items():
        tiers[str(tier)] = options.amount(multiplier, where=f"{options.SERVICE_TIERS}.{tier}")
    return Prices(
        base.input,
        base.output,
        base.cached_input,
        audio_input=price(options.AUDIO_INPUT, base.audio_input),
        audio_output=price(options.AUDIO_OUTPUT, base.audio_output),
        web_search_call=price(options.WEB_SEARCH, base.web_search_call),
        cache_write=price(options.CACHE_WRITE, base.cache_write),
        cache_write_1h=price(options.CACHE_WRITE_1H, base.cache_write_1h),
        tiers=tuple(sorted(tiers.items())),
        long_context=base.long_context,
    )


_LONG_INPUT = re.compile(r"input_cost_per_token_above_(\d+)k_tokens")


@lru_cache(maxsize=256)
def _price_map(model: str) -> Prices | None:
    """litellm's bundled price of ``model`` (read once per process: the map ships with the package),
    with its service tiers (``*_flex``, ``*_priority`` prices, as the multiplier of the larger ratio),
    audio token prices and web search fee (the dearest search context size)."""
    import litellm  # heavy import (~3 s), only needed for unpriced backends

    try:
        info = litellm.get_model_info(model)
    except Exception:
        return None

    def dec(key: str) -> Decimal | None:
        value = info.get(key)
        return Decimal(str(value)) if isinstance(value, int | float) and value >= 0 else None

    inp, out = dec("input_cost_per_token") or Decimal(0), dec("output_cost_per_token") or Decimal(0)
    cached = dec("cache_read_input_token_cost")
    tiers = []
    for tier in ("flex", "priority"):
        ratios = [
            (dec(f"{kind}_cost_per_token_{tier}") or Decimal(0)) / base
            for kind, base in (("input", inp), ("output", out))
            if base > 0 and dec(f"{kind}_cost_per_token_{tier}") is not None
        ]
        if ratios:
            tiers.append((tier, max(ratios)))
    long_context = []
    for key in info:
        found = _LONG_INPUT.fullmatch(key)
        if found is not None and (price := dec(key)) is not None:
            output = dec(f"output_cost_per_token_above_{found.group(1)}k_tokens")
            long_context.append((int(found.group(1)) * 1000, price, output if output is not None else out))
    search = info.get("search_context_cost_per_query")
    fees = (
        [Decimal(str(v)) for v in search.values() if isinstance(v, int | float)]
        if isinstance(search, dict)
        else []
    )
    return Prices(
        inp,
        out,
        cached if cached is not None else inp,
        audio_input=dec("input_cost_per_audio_token"),
        audio_output=dec("output_cost_per_audio_token"),
        web_search_call=max(fees) if fees else None,
        cache_write=dec("cache_creation_input_token_cost"),
        cache_write_1h=dec("cache_creation_input_token_cost_above_1hr"),
        tiers=tuple(tiers),
        long_context=tuple(sorted(long_context)),
    )


# --- the parameters that change the price ----------------------------------------------------------


@dataclass(frozen=True)
class Terms:
    """What in one upstream body changes what the provider bills for it."""

    service_tier: str | None = None
    audio_in: str | None = None  # the parameter that brings audio tokens in (named by a refusal)
    audio_out: str | None = None  # the parameter that asks for audio out
    web_search: bool = False
    prediction_tokens: int = 0  # the most tokens of a predicted output that can be rejected (billed)
    audio_references: int = 0  # earlier audio answers named by id: billed as audio input, size unseen
    cache_write: str | None = None  # the parameter that asks for a prompt-cache write (what the hold prices)
    cache_write_1h: bool = False  # ... for the one-hour cache
    cache_write_1h_at: str | None = None  # the first part that asks for the one-hour cache


NO_TERMS = Terms()


def terms_of(body: dict[str, Any]) -> Terms:
    """The price-changing parameters of the chat-completions ``body`` (Anthropic's and Responses'
    requests arrive here translated into this body, with the parameters they forward)."""
    tier = body.get("service_tier")
    audio_out = None
    if isinstance(body.get("modalities"), list) and "audio" in body["modalities"]:
        audio_out = "modalities"
    elif body.get("audio") is not None:
        audio_out = "audio"
    audio_in, references, cache_write, hour_at = None, 0, None, None
    for i, message in enumerate(body.get("messages") or []):
        if type(message) is not dict:  # a body parsed from JSON: plain dicts and lists
            continue
        if message.get("audio") is not None:
            references += 1
            audio_in = audio_in or f"messages[{i}].audio"
        for j, part in enumerate(content if type(content := message.get("content")) is list else ()):
            if type(part) is dict and part.get("type") in ("input_audio", "audio"):
                audio_in = audio_in or f"messages[{i}].content[{j}]"
    for at, control in cache_markers.markers(body):  # content parts, tool calls, tools
        cache_write = cache_write or at
        if isinstance(control, dict) and control.get("ttl") == "1h":
            hour_at = hour_at or at
    prediction = body.get("prediction")
    return Terms(
        service_tier=tier if isinstance(tier, str) else None,
        audio_in=audio_in,
        audio_out=audio_out,
        web_search=body.get("web_search_options") is not None,
        prediction_tokens=len(orjson.dumps(prediction)) if prediction is not None else 0,
        audio_references=references,
        cache_write=cache_write,
        cache_write_1h=hour_at is not None,
        cache_write_1h_at=hour_at,
    )


def refuse_unpriced(backend: Backend, prices: Prices, terms: Terms) -> None:
    """A 400 naming the first parameter of ``terms`` that ``backend`` has no price for (prompt-cache
    markers are never refused: routing/prompt_cache.py drops them where no write is priced)."""
    where = f"backend {backend.name!r}"
    missing: list[tuple[str, str]] = []
    if terms.service_tier is not None and prices.multiplier(terms.service_tier) is None:
        missing.append(("service_tier", f"service_tier {terms.service_tier!r} has no price on {where}"))
    if terms.audio_in is not None and prices.audio_input is None:
        missing.append((terms.audio_in, f"{terms.audio_in}: audio input has no price on {where}"))
    if terms.audio_out is not None and prices.audio_output is None:
        missing.append((terms.audio_out, f"{terms.audio_out}: audio output has no price on {where}"))
    if terms.web_search and prices.web_search_call is None:
        missing.append(("web_search_options", f"web_search_options: web search has no price on {where}"))
    if missing:
        param, reason = missing[0]
        raise ApiError(
            400,
            f"{reason}, so the call cannot be billed; leave out {param} or ask an operator to price it "
            "(the backend's price options).",
            param=param,
            code="unpriced_parameter",
        )


def charged_multiplier(prices: Prices, requested: str | None, reported: str | None) -> Decimal:
    """The tier multiplier a call is billed at: the tier the provider reports it served, when priced,
    else the tier asked for."""
    found = prices.multiplier(reported) if reported is not None else None
    return found if found is not None else (prices.multiplier(requested) or ONE)


def usage_cost(prices: Prices, usage: Usage, terms: Terms = NO_TERMS) -> Decimal:
    """What ``usage`` costs. Tokens written to the prompt cache are billed at the cache-write price
    (the hour's when the call asked for it; the input price where none is set), whether the provider
    counts them in ``prompt_tokens`` (litellm) or beside them (Anthropic)."""
    prices = prices.at_length(usage.prompt_tokens)
    audio_in = min(usage.audio_prompt_tokens, usage.prompt_tokens)
    cached = min(usage.cached_tokens, usage.prompt_tokens - audio_in)
    writes = usage.cache_write_tokens
    # Counted in prompt_tokens (litellm, OpenAI-compatible routers) unless they outnumber what is left.
    written = writes if writes <= usage.prompt_tokens - audio_in - cached else 0
    found = (prices.cache_write_price(terms.cache_write_1h), prices.cache_write, prices.input)
    write_price = next(price for price in found if price is not None)
    audio_out = min(usage.audio_completion_tokens, usage.completion_tokens)
    tokens = (
        prices.input * (usage.prompt_tokens - audio_in - cached - written)
        + write_price * writes
        + prices.cached_input * cached
        + (prices.audio_input if prices.audio_input is not None else prices.input) * audio_in
        + prices.output * (usage.completion_tokens - audio_out)
        + (prices.audio_output if prices.audio_output is not None else prices.output) * audio_out
    )
    multiplier = charged_multiplier(prices, terms.service_tier, usage.service_tier)
    fee = (prices.web_search_call or Decimal(0)) if terms.web_search else Decimal(0)
    return tokens * multiplier + fee


def attempt_bound(prices: Prices, body: dict[str, Any], *, max_tokens: int, answers: int = 1) -> Decimal:
    """The most one attempt of ``body`` can be billed (:func:`terms_bound` of its terms and prompt)."""
    bound = prompt_token_bound(body)
    return terms_bound(prices, terms_of(body), bound, max_tokens=max_tokens, answers=answers)


def terms_bound(prices: Prices, terms: Terms, prompt: int, *, max_tokens: int, answers: int = 1) -> Decimal:
    """The most one attempt of a body can be billed, whatever happens to it (answered, timed out,
    cut): every prompt token at the dearest input price it may be billed at, ``answers`` times the
    output cap plus the predicted output's size at the dearest output price, the tier's multiplier
    (at least 1: a tier the provider cannot serve falls back to the default), the search fee.
    ``terms``, ``prompt``: the body's ``terms_of`` and ``prompt_token_bound``, which a call reads once
    per leg (routing/call/plans.py ``LegPricing``)."""
    prompt += FILE_TOKEN_BOUND * terms.audio_references
    prices = prices.at_length(prompt)
    in_price = max(prices.input, prices.cached_input)
    if terms.audio_in is not None and prices.audio_input is not None:
        in_price = max(in_price, prices.audio_input)
    if terms.cache_write is not None:
        in_price = max(in_price, prices.cache_write_price(terms.cache_write_1h) or Decimal(0))
    out_price = prices.output
    if terms.audio_out is not None and prices.audio_output is not None:
        out_price = max(out_price, prices.audio_output)
    multiplier = max(prices.multiplier(terms.service_tier) or ONE, ONE)
    tokens = prompt * in_price + (max_tokens + terms.prediction_tokens) * answers * out_price
    fee = (prices.web_search_call or Decimal(0)) * answers if terms.web_search else Decimal(0)
    return tokens * multiplier + fee


def prompt_token_bound(body: dict[str, Any]) -> int:
    """An upper bound on the prompt tokens a provider may bill for the upstream ``body``: every byte of
    it (byte-level tokenizers never emit more tokens than bytes), whatever field carries them (messages,
    tools, functions, a response schema, the system text; Anthropic's and Responses' shapes arrive here
    translated into this body), plus the chat template's tokens and its media's (:func:`media_tokens`).
    Budget holds and the charge of a stream cut off before its usage both come from here."""
    messages = body.get("messages") or []
    size = len(orjson.dumps(body, default=str, option=orjson.OPT_NON_STR_KEYS))
    templates = _TEMPLATE_TOKENS_PER_MESSAGE * len(messages) + _TEMPLATE_TOKENS_PER_CALL
    return size + templates + media_tokens(messages)


# Media is billed for what it shows, not its bytes (a 304-byte PNG: 1,590 tokens), inline or named: each
# image or file part adds the most a provider bills for one; audio (its bytes bound it) only when named.
IMAGE_TOKEN_BOUND = 8_192  # above every provider's largest image (OpenAI high detail, Claude ~1.6k)
FILE_TOKEN_BOUND = 131_072  # a document (a PDF): a long one, rendered page by page
_IMAGE_PARTS = frozenset({"image_url", "input_image", "image"})
_FILE_PARTS = frozenset({"file", "input_file", "document"})


def media_tokens(messages: list[Any]) -> int:
    """The worst case of ``messages``' image and file parts, and other media parts naming their content."""
    tokens = 0
    for message in messages:
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, list):
            continue
        for part in content:
            kind = part.get("type") if isinstance(part, dict) else None
            kind = kind if isinstance(kind, str) and kind not in ("text", "input_text", "output_text") else ""
            if kind in _IMAGE_PARTS:
                tokens += IMAGE_TOKEN_BOUND
            elif kind and (kind in _FILE_PARTS or _names_content(part)):
                tokens += FILE_TOKEN_BOUND
    return tokens


def _names_content(part: dict[str, Any]) -> bool:
    """Whether a media part names content elsewhere (a url/id key's string that is no ``data:`` URL)."""
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
