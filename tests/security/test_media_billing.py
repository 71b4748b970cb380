"""Inline media is billed for what it shows, not for its bytes (issue 37, class 3; round five).

A provider bills an image by its pixels and a document page by page. Round five's probe: a 1-bit PNG
of 1092x1092 pixels is 304 base64 bytes, which Claude bills at 1,590 tokens (OpenAI's high detail at
765); a PDF whose pages share one content stream costs a few bytes a page, each page billed as an image.
The worst case of an attempt counted inline media by its bytes only (``routing/pricing.py``), and the
charge of an attempt is capped at its worst case, so a call of twenty such images was charged for
6,500 tokens where the provider billed 31,800, and its hold was as short. Now every image or file part
counts as the most a provider bills for one (``IMAGE_TOKEN_BOUND``, ``FILE_TOKEN_BOUND``) on top of its
bytes, inline or named, on all three APIs. Through the running server: the stub upstream reports what
the provider bills, and the ledger charges it.
"""

from __future__ import annotations

import base64
import json
import struct
import zlib
from decimal import Decimal
from typing import Any

import httpx
import pytest

from bench.support.openai_stub import Reply
from routing.models import Backend, Invocation
from tests.factories import make_key
from tests.support.wait import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

IMAGES = 20
PAGES = 20
PER_IMAGE = 1_590  # what Claude bills for a 1092x1092 image, whatever its bytes
PER_PAGE = 1_600  # a PDF page billed as its image


def _png(side: int) -> bytes:
    """A 1-bit black square: a few hundred bytes for a million pixels."""
    raw = b"".join(b"\x00" + bytes((side + 7) // 8) for _ in range(side))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", side, side, 1, 0, 0, 0, 0)
    pixels = chunk(b"IDAT", zlib.compress(raw, 9))
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + pixels + chunk(b"IEND", b"")


def _pdf(pages: int) -> bytes:
    """A PDF of ``pages`` pages that all draw one content stream."""
    kids = " ".join(f"{4 + i} 0 R" for i in range(pages))
    objects = [
        "<< /Type /Catalog /Pages 2 0 R >>",
        f"<< /Type /Pages /Kids [{kids}] /Count {pages} >>",
        "<< /Length 21 >>\nstream\n0 0 612 792 re f\nendstream",
        *["<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 3 0 R >>"] * pages,
    ]
    body = "%PDF-1.4\n" + "".join(f"{n} 0 obj\n{text}\nendobj\n" for n, text in enumerate(objects, 1))
    return (body + "trailer\n<< /Root 1 0 R >>\n%%EOF\n").encode()


PNG = base64.b64encode(_png(1092)).decode()
PDF = base64.b64encode(_pdf(PAGES)).decode()
PNG_URL = f"data:image/png;base64,{PNG}"


def _body(api: str) -> tuple[str, dict[str, Any], int]:
    """(path, body, the prompt tokens a provider bills for its media)."""
    if api == "chat-images":
        parts = [{"type": "image_url", "image_url": {"url": PNG_URL, "detail": "high"}}] * IMAGES
        return "/v1/chat/completions", _chat(parts), IMAGES * PER_IMAGE
    if api == "chat-pdf":
        pdf = {"filename": "a.pdf", "file_data": f"data:application/pdf;base64,{PDF}"}
        part = {"type": "file", "file": pdf}
        return "/v1/chat/completions", _chat([part]), PAGES * PER_PAGE
    if api == "messages-images":
        source = {"type": "base64", "media_type": "image/png", "data": PNG}
        content = [{"type": "image", "source": source}] * IMAGES
        body = {"model": "auto", "max_tokens": 5, "messages": [{"role": "user", "content": content}]}
        return "/v1/messages", body, IMAGES * PER_IMAGE
    parts = [{"type": "input_image", "image_url": PNG_URL}] * IMAGES
    body = {"model": "auto", "max_output_tokens": 16, "input": [{"role": "user", "content": parts}]}
    return "/v1/responses", body, IMAGES * PER_IMAGE


def _chat(parts: list[dict[str, Any]]) -> dict[str, Any]:
    return {"model": "auto", "max_tokens": 5, "messages": [{"role": "user", "content": parts}]}


@pytest.mark.parametrize("api", ["chat-images", "chat-pdf", "messages-images", "responses-images"])
def test_inline_media_is_charged_what_the_provider_bills_for_it(gateway_url, backends, stub, api):
    path, body, billed = _body(api)
    raw = json.dumps(body)
    assert len(raw) < billed / 3  # the bytes are a fraction of the bill: the probe's shape
    stub.responder = lambda sent: Reply(content="ok", prompt_tokens=billed)
    key = make_key(name=f"media-{api}")
    headers = {"Authorization": f"Bearer {key.raw}", "x-api-key": key.raw, "anthropic-version": "2023-06-01"}
    response = httpx.post(gateway_url + path, content=raw, headers=headers, timeout=30)
    assert response.status_code == 200, response.text
    row = wait_until(lambda: Invocation.objects.first(), timeout=20, what="the ledger row")
    assert row is not None
    teacher: Backend = backends["teacher"]
    assert teacher.input_cost_per_token is not None and teacher.output_cost_per_token is not None
    charged = billed * teacher.input_cost_per_token + row.completion_tokens * teacher.output_cost_per_token
    assert row.prompt_tokens == billed
    assert row.cost_usd == charged, f"charged {row.cost_usd}, the provider billed {charged}"
    assert row.cost_usd > Decimal(0) and len(stub.requests) == 1


def test_a_budget_that_covers_the_bytes_but_not_the_images_is_refused_before_the_upstream(
    gateway_url, backends, stub
):
    path, body, billed = _body("chat-images")
    teacher: Backend = backends["teacher"]
    assert teacher.input_cost_per_token is not None
    budget = (len(json.dumps(body)) * 2 * teacher.input_cost_per_token).quantize(Decimal("0.01"), "ROUND_UP")
    assert budget < billed * teacher.input_cost_per_token  # the bytes fit, the images' bill does not
    key = make_key(name="media-budget", budget_usd=str(budget))
    response = httpx.post(
        gateway_url + path, json=body, headers={"Authorization": f"Bearer {key.raw}"}, timeout=30
    )
    assert response.status_code == 402, response.text
    assert stub.requests == []
