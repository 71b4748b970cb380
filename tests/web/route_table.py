"""Every route of the dashboard, read from the URL conf, and what each reads from a request.

``tests/web/test_route_fuzz.py`` fuzzes each of them. A route is listed here by its resolver's name and
pattern (``url_routes``); the fields it is sent come from two places, neither listed by hand:

- the forms its pages render (``rendered_forms``: each ``<form>``'s action resolved back to its route,
  with the names and values of its inputs, selects and textareas, so a key's prefixed edit form or a
  hidden ``plan_hash`` is sent as the page sends it);
- the literal parameter names its view's module reads (``request.GET.get("page")``,
  ``request.POST.getlist("seen")``: ``read_names``), for links and buttons no form renders.

A path's arguments are filled by their names (``PATH_ARGS`` in the test); a route with an argument no
one knows, or a route in no table, fails ``test_every_route_is_fuzzed``.
"""

from __future__ import annotations

import inspect
import re
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import Any

from django.urls import URLPattern, URLResolver, get_resolver
from django.urls.exceptions import Resolver404
from django.urls.resolvers import RoutePattern

READ = re.compile(r"""request\.(?:GET|POST)\.(?:get|getlist|pop)\(\s*["'](?P<name>[\w-]+)["']""")


@dataclass
class Route:
    name: str  # "web:key-edit", "admin:index", "login"; its pattern when it has no name ("healthz")
    pattern: str  # "keys/<int:key_id>/edit"
    callback: Callable[..., Any]
    args: tuple[str, ...]  # the path's argument names, in order
    reads: set[str] = field(default_factory=set)

    @property
    def module(self) -> str:
        view = inspect.unwrap(self.callback)
        return str(getattr(view, "__module__", ""))


def _walk(patterns: list[Any], prefix: str = "", namespace: str = "") -> Iterator[Route]:
    for entry in patterns:
        if isinstance(entry, URLResolver):
            inner = f"{namespace}:{entry.namespace}".strip(":") if entry.namespace else namespace
            yield from _walk(entry.url_patterns, prefix + str(entry.pattern), inner)
        elif isinstance(entry, URLPattern):
            pattern = prefix + str(entry.pattern)
            name = f"{namespace}:{entry.name or pattern}".strip(":")
            args: tuple[str, ...] = ()
            if isinstance(entry.pattern, RoutePattern):
                args = tuple(entry.pattern.converters)
            else:
                args = tuple(entry.pattern.regex.groupindex)
            yield Route(name, pattern, entry.callback, args)


def url_routes() -> list[Route]:
    """Every route the URL conf serves, with the parameter names its view's module reads."""
    routes = list(_walk(get_resolver().url_patterns))
    for route in routes:
        source = _module_source(route.module)
        route.reads = {m.group("name") for m in READ.finditer(source)}
    return routes


def _module_source(module: str) -> str:
    found = sys.modules.get(module)
    if found is None or module.startswith("django."):
        return ""
    try:
        return inspect.getsource(found)
    except (OSError, TypeError):
        return ""


@dataclass
class RenderedForm:
    route: str  # the route name its action resolves to
    path: str
    method: str
    fields: dict[str, list[str]]  # name -> the values the page would send (checked, selected, typed)
    target: str = ""  # the element an htmx submission replaces (its id), "" without htmx


class _Forms(HTMLParser):
    def __init__(self, page_path: str) -> None:
        super().__init__(convert_charrefs=True)
        self.page_path = page_path
        self.forms: list[tuple[str, str, dict[str, list[str]], str]] = []
        self._current: tuple[str, str, dict[str, list[str]], str] | None = None
        self._select: str | None = None
        self._select_seen = False
        self._textarea: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "form":
            action = a.get("action") or a.get("hx-post") or a.get("hx-get") or self.page_path
            method = (a.get("method") or ("post" if "hx-post" in a else "get")).lower()
            self._current = (action, method, {}, a.get("hx-target", "").lstrip("#"))
            self.forms.append(self._current)
            return
        if self._current is None:
            return
        fields = self._current[2]
        if tag == "option" and self._select:
            # A select sends its selected option, else its first one (as a browser does).
            chosen = fields[self._select]
            if "selected" in a or not self._select_seen:
                if self._select_seen:
                    chosen.clear()
                chosen.append(a.get("value", ""))
                self._select_seen = True
            return
        name = a.get("name")
        if not name:
            return
        if tag == "input":
            kind = a.get("type", "text").lower()
            fields.setdefault(name, [])
            if kind in ("checkbox", "radio"):
                if "checked" in a:
                    fields[name].append(a.get("value", "on"))
            elif kind not in ("submit", "button", "image", "reset", "file"):
                fields[name].append(a.get("value", ""))
            elif a.get("value"):
                fields[name].append(a["value"])
        elif tag == "select":
            self._select, self._select_seen = name, False
            fields.setdefault(name, [])
        elif tag == "textarea":
            self._textarea = name
            fields.setdefault(name, []).append("")
        elif tag == "button" and a.get("value"):
            fields.setdefault(name, []).append(a["value"])

    def handle_data(self, data: str) -> None:
        if self._current is not None and self._textarea:
            values = self._current[2][self._textarea]
            # A browser drops the newline that opens a textarea (Django's template writes one).
            values[-1] += data[1:] if not values[-1] and data.startswith("\n") else data

    def handle_endtag(self, tag: str) -> None:
        if tag == "form":
            self._current = None
        elif tag == "select":
            self._select = None
        elif tag == "textarea":
            self._textarea = None


def rendered_forms(page_path: str, html: str) -> list[RenderedForm]:
    """The forms of one page, each with the route its action resolves to (forms to other sites: none)."""
    parser = _Forms(page_path)
    parser.feed(html)
    found = []
    for action, method, fields, target in parser.forms:
        path = action.split("?", 1)[0].split("#", 1)[0] or page_path
        if not path.startswith("/"):
            continue
        try:
            match = get_resolver().resolve(path)
        except Resolver404:
            continue
        name = match.view_name if match.url_name else f"{match.namespace}:{match.route}".strip(":")
        fields = {k: v for k, v in fields.items() if k != "csrfmiddlewaretoken"}
        found.append(RenderedForm(name, path, method, fields, target))
    return found
