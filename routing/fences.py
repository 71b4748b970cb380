"""One fenced block around a model's JSON answer, taken off in linear time.

Model answers are caller-controlled text of any length. The regular expression this replaces
(``\\A\\s*```(?:json)?\\s*\\n(.*?)\\n?\\s*```\\s*\\Z`` and its variants) backtracked quadratically on long
runs of blanks, so it runs as plain string operations here, shared by the json_schema verifier, the
diagnosis Observer and the SkillBook distiller.
"""

from __future__ import annotations

FENCE = "```"


def unfenced(text: str) -> str | None:
    """The body of ``text`` when it is one fenced block (a line "```" or "```json", any case, then the
    body, then "```"; blanks around it allowed), else None. The body loses one newline and the blanks
    before the closing fence."""
    stripped = text.strip()
    if len(stripped) < 2 * len(FENCE) or not (stripped.startswith(FENCE) and stripped.endswith(FENCE)):
        return None
    inner = stripped[len(FENCE) : -len(FENCE)]
    head, newline, body = inner.partition("\n")
    if not newline or head.strip(" \t").lower() not in ("", "json"):
        return None
    body = body.rstrip(" \t")
    return body[:-1] if body.endswith("\n") else body
