"""The MCP page's accept forms as a browser would post them: the hidden fields of the form the page drew
(tests post what the operator was shown, not what the database holds at the click)."""

from __future__ import annotations

from html.parser import HTMLParser


class _Forms(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.forms: list[dict[str, list[str]]] = []
        self._open: dict[str, list[str]] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = {k: v or "" for k, v in attrs}
        if tag == "form" and found.get("method") == "post" and "action" not in found:
            self._open = {}
        elif tag == "input" and self._open is not None and found.get("type") == "hidden":
            self._open.setdefault(found.get("name", ""), []).append(found.get("value", ""))

    def handle_endtag(self, tag: str) -> None:
        if tag == "form" and self._open is not None:
            self.forms.append(self._open)
            self._open = None


def accept_form(html: str, server: str, tool: str = "") -> dict[str, list[str]]:
    """The fields of the page's "Accept" form for ``tool`` of ``server`` (no tool: "accept every new
    tool's classification"); AssertionError when the page draws no such form."""
    parser = _Forms()
    parser.feed(html)
    for form in parser.forms:
        if form.get("server") != [server] or "action" in form:
            continue
        if form.get("tool", [""]) == [tool]:
            form.pop("csrfmiddlewaretoken", None)
            return form
    raise AssertionError(f"the MCP page draws no accept form for {server}/{tool or '(every new tool)'}")
