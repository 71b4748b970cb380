"""Remote media in a call's messages: callers send data, not URLs, unless the operator allowed it.

An image, audio or file part may name its content by URL. For several providers litellm fetches an
``http://`` URL *from the gateway's host* to inline it (Anthropic, Bedrock, Gemini and Ollama turn image
URLs into base64; a ``file`` part whose id is a URL is downloaded as a PDF), so a caller could make the
gateway GET any address it reaches: a cloud metadata service, an admin port on the private network. A
part may therefore carry its media inline only (a ``data:`` URL, base64 data, a provider's file id) unless
the key has the ``media:urls`` scope (routing/scopes.py), which an operator grants to keys whose callers
may send links (the gateway then passes them on as they are).

Text parts are the caller's words, URLs included, and are never looked into.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

# A URL with a scheme (http, https, file, ftp, gopher, ...): what a fetcher would follow.
_URL = re.compile(r"\A\s*[A-Za-z][A-Za-z0-9+.\-]*://")
_TEXT_PARTS = frozenset({"text", "refusal", "input_text", "output_text"})


def remote_url_param(messages: Iterable[Any]) -> str | None:
    """The parameter path of the first media part that names its content by URL (``data:`` URLs are
    inline, so they do not count), or None. ``messages``: chat messages (pydantic or dicts)."""
    for m, message in enumerate(messages):
        content = message.get("content") if isinstance(message, dict) else getattr(message, "content", None)
        if not isinstance(content, list):
            continue  # a plain string: text
        for p, part in enumerate(content):
            if not isinstance(part, dict) or part.get("type") in _TEXT_PARTS:
                continue
            found = _first_url(part, f"messages[{m}].content[{p}]")
            if found:
                return found
    return None


def _first_url(value: Any, where: str) -> str | None:
    stack: list[tuple[Any, str]] = [(value, where)]
    while stack:
        item, at = stack.pop()
        if isinstance(item, str):
            if _URL.match(item):
                return at
        elif isinstance(item, dict):
            stack.extend((v, f"{at}.{k}") for k, v in reversed(list(item.items())))
        elif isinstance(item, list):
            stack.extend((v, f"{at}[{i}]") for i, v in reversed(list(enumerate(item))))
    return None
