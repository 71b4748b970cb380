"""The MCP page's forms: register a server, and edit one (everything but its name).

Each field is bounded; the whole row is then checked as ``/api/`` checks it (``servers.check_shape``:
the transport's shape, the URL policy, credential variable names, limits; over the dashboard, as over
``/api/``, a stdio program must be on ``SKILLGATE_MCP_API_STDIO_PROGRAMS``), and each refusal is shown
next to the field it is about. Credentials are environment variable NAMES (``NAME=VARIABLE`` per line),
never values, so nothing secret is stored or shown back.
"""

from __future__ import annotations

import re
import shlex
from typing import Any

from django import forms

from app.web.forms.bounds import bounded_text, number, whole_number
from core.errors import ServiceError
from diagnostics import conf as diagnostics_conf
from diagnostics.mcp.servers import RESERVED_SERVER_NAMES, check_shape
from diagnostics.models import McpServer
from diagnostics.toolsets.registry import environment_names

MAX_ARGS = 64
MAX_SECRETS = 50
MAX_TOOLS = 500
FIELD_PREFIX = re.compile(r"^(\w+): (.*)\Z", re.DOTALL)


def _environments() -> list[tuple[str, str]]:
    return [(name, name) for name in environment_names()]


class McpServerEditForm(forms.Form):
    environment = forms.ChoiceField(choices=_environments, help_text="The diagnoses that get its tools.")
    transport = forms.ChoiceField(choices=McpServer.Transport.choices)
    command = forms.CharField(
        max_length=4096,
        required=False,
        help_text="stdio: the program and its arguments, as in a shell (quotes allowed).",
    )
    url = forms.CharField(max_length=500, required=False, help_text="http: the Streamable HTTP endpoint.")
    secret_env = forms.CharField(
        max_length=5000,
        required=False,
        widget=forms.Textarea(attrs={"rows": 2}),
        label="Credentials",
        help_text="One per line: TARGET=VARIABLE, the NAME of a host environment variable, never a value "
        "(stdio: the child's variable; http: the header, the variable holding its whole value).",
    )
    allow_list = forms.CharField(
        max_length=20_000, required=False, help_text="Tool names, separated by commas; empty: every tool."
    )
    timeout_s = number(min_value=0.1, max_value=300, initial=20.0, label="Timeout (s)")
    max_output_bytes = whole_number(min_value=1000, max_value=4_000_000, initial=64_000)

    def clean_command(self) -> list[str]:
        text = self.cleaned_data.get("command") or ""
        if "\x00" in text:
            raise forms.ValidationError("No NUL characters.")
        try:
            parts = shlex.split(text)
        except ValueError as exc:
            raise forms.ValidationError(f"Not a command line: {exc}.") from None
        if len(parts) > MAX_ARGS:
            raise forms.ValidationError(f"At most {MAX_ARGS} arguments.")
        return parts

    def clean_secret_env(self) -> dict[str, str]:
        found: dict[str, str] = {}
        for line in (self.cleaned_data.get("secret_env") or "").splitlines():
            if not line.strip():
                continue
            target, sep, variable = line.partition("=")
            if not sep:
                raise forms.ValidationError("Each line is TARGET=VARIABLE.")
            found[target.strip()] = variable.strip()
        if len(found) > MAX_SECRETS:
            raise forms.ValidationError(f"At most {MAX_SECRETS} credentials.")
        return found

    def clean_allow_list(self) -> list[str]:
        names = [n.strip() for n in (self.cleaned_data.get("allow_list") or "").split(",") if n.strip()]
        if len(names) > MAX_TOOLS or any(len(n) > 128 for n in names):
            raise forms.ValidationError(f"At most {MAX_TOOLS} names of at most 128 characters.")
        return sorted(set(names))

    def server_fields(self) -> dict[str, Any]:
        """The cleaned values, as the services take them."""
        data = self.cleaned_data
        fields = {name: data[name] for name in ("environment", "transport", "secret_env", "allow_list")}
        stdio = data["transport"] == McpServer.Transport.STDIO
        fields["command"] = data["command"] if stdio else []
        fields["url"] = "" if stdio else data["url"].strip()
        fields["timeout_s"] = data["timeout_s"]
        fields["max_output_bytes"] = data["max_output_bytes"]
        return fields

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if self.errors:
            return data
        fields = self.server_fields()
        try:
            check_shape(McpServer(name="x", **fields))
        except ServiceError as exc:
            self._field_error(str(exc))
            return data
        if fields["transport"] == McpServer.Transport.STDIO:
            allowed = diagnostics_conf.get().environments.mcp_stdio_programs
            if fields["command"][0] not in allowed:
                self.add_error(
                    "command",
                    f"The program {fields['command'][0][:200]!r} is not one the operator allows here "
                    f"(SKILLGATE_MCP_API_STDIO_PROGRAMS: {', '.join(allowed) or 'none'}); register it in "
                    "the admin instead.",
                )
        return data

    def _field_error(self, message: str) -> None:
        match = FIELD_PREFIX.match(message)
        if match and match.group(1) in self.fields:
            self.add_error(match.group(1), match.group(2))
        elif message.startswith(("timeout_s", "max_output_bytes")):
            self.add_error("timeout_s", message)
        else:
            self.add_error(None, message)

    def service_error(self, exc: ServiceError) -> None:
        """A refusal the service found after the form (a race): shown next to its field."""
        self._field_error(str(exc))

    @classmethod
    def for_server(cls, server: McpServer, data: Any = None) -> McpServerEditForm:
        initial = {
            "environment": server.environment,
            "transport": server.transport,
            "command": shlex.join(server.command or []),
            "url": server.url,
            "secret_env": "\n".join(f"{k}={v}" for k, v in (server.secret_env or {}).items()),
            "allow_list": ", ".join(server.allow_list or []),
            "timeout_s": server.timeout_s,
            "max_output_bytes": server.max_output_bytes,
        }
        return cls(data, initial=initial)


class McpServerForm(McpServerEditForm):
    name = bounded_text(
        McpServer,
        "name",
        validators=McpServer._meta.get_field("name").validators,
        help_text="Lowercase letters, digits, single dashes; its tools become mcp__<name>__<tool>.",
    )
    field_order = ["name", "environment", "transport", "command", "url", "secret_env", "allow_list"]

    def clean_name(self) -> str:
        name: str = self.cleaned_data["name"]
        if name in RESERVED_SERVER_NAMES:
            raise forms.ValidationError(f"{name!r} is reserved (the MCP page's own address).")
        if McpServer.objects.filter(name=name).exists():
            raise forms.ValidationError(f"An MCP server named {name!r} exists.")
        return name
