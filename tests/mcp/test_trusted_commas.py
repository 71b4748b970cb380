"""Issue 40: a SKILLGATE_MCP_TRUSTED_TOOLS entry whose stdio command holds a comma (the setting is
comma-separated) is written in the setting's JSON-array form (core/env.py ``env_list``), which takes any
entry exactly; the comma form keeps working for entries without one. Read as app/settings/ reads it
(``from_env``), then applied at a real stdio server's connect (diagnostics/mcp/trust.py)."""

from __future__ import annotations

import json

import pytest
from django.core.exceptions import ImproperlyConfigured
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from core.conf import from_env
from diagnostics.conf import Environments
from diagnostics.mcp import trust
from diagnostics.mcp.lifecycle import mcp_server_update
from diagnostics.mcp.servers import mcp_server_sync
from tests.mcp.conftest import upstream_command
from tests.mcp.test_first_sight import liar

VARIABLE = "SKILLGATE_MCP_TRUSTED_TOOLS"


def read(monkeypatch: pytest.MonkeyPatch, value: str) -> list[str]:
    """The setting as app/settings/ builds it from the environment."""
    monkeypatch.setenv(VARIABLE, value)
    return list(from_env(Environments, DIAGNOSTICS_REPLAY_ROOT="unused")["MCP_TRUSTED_TOOLS"])


def entry(server: str, command: list[str], tool: str) -> str:
    return f"{server}@{trust.endpoint(transport='stdio', url='', command=command)}/{tool}"


@pytest.mark.django_db(transaction=True)
def test_a_command_with_a_comma_is_trusted_in_the_json_form(tmp_path, monkeypatch, settings):
    command = [*upstream_command(), "--tags=prod,eu"]
    json_form = json.dumps([entry("kit", command, "status"), "deploy@https://mcp.example.com/status"])
    settings.MCP_TRUSTED_TOOLS = read(monkeypatch, json_form)
    assert [
        entry("kit", command, "status"),
        "deploy@https://mcp.example.com/status",
    ] == settings.MCP_TRUSTED_TOOLS
    server = liar(tmp_path, monkeypatch, "kit", [])
    mcp_server_update(server=server, by=None, command=command)
    assert mcp_server_sync(server=server).accepted == ["status"]

    # The same entry in the comma form is cut at its comma: it trusts nothing (and is warned about).
    cut = read(monkeypatch, f"{entry('kit', command, 'status')}, deploy@https://mcp.example.com/status")
    assert len(cut) == 3 and not trust.trusted(
        tuple(cut),
        server="kit",
        where=trust.endpoint(transport="stdio", url="", command=command),
        tool="status",
    )


@pytest.mark.django_db(transaction=True)
def test_entries_without_a_comma_are_read_in_the_comma_form_as_before(tmp_path, monkeypatch, settings):
    plain = upstream_command()
    settings.MCP_TRUSTED_TOOLS = read(
        monkeypatch, f" deploy@https://mcp.example.com/status , {entry('old', plain, 'status')}"
    )
    assert [
        "deploy@https://mcp.example.com/status",
        entry("old", plain, "status"),
    ] == settings.MCP_TRUSTED_TOOLS
    old = liar(tmp_path, monkeypatch, "old", [])
    assert mcp_server_sync(server=old).accepted == ["status"]


ARGUMENT = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), min_size=1, max_size=12)


@hypothesis_settings(max_examples=200, deadline=None)
@given(
    arguments=st.lists(
        st.one_of(ARGUMENT, st.sampled_from([",", "a,b", "[x]", '"', "'", "/", "@", " "])), max_size=5
    )
)
def test_the_json_form_round_trips_any_command(arguments: list[str]) -> None:
    command = ["/opt/srv", *arguments]
    written = entry("kit", command, "status")
    where = trust.endpoint(transport="stdio", url="", command=command)
    with pytest.MonkeyPatch.context() as monkeypatch:
        entries = read(monkeypatch, json.dumps([written, "other@https://h/t"]))
    assert entries == [written, "other@https://h/t"]
    assert trust.trusted(tuple(entries), server="kit", where=where, tool="status")


@pytest.mark.parametrize(
    ("value", "says"),
    [('["kit@stdio:/x/status"', "not one"), ('["a", 3]', "JSON array of strings"), ('[ "a" ] x', "not one")],
)
def test_a_json_form_that_is_not_an_array_of_strings_stops_start_up(monkeypatch, value, says):
    with pytest.raises(ImproperlyConfigured) as stopped:
        read(monkeypatch, value)
    assert VARIABLE in str(stopped.value) and says in str(stopped.value)


def test_a_value_that_does_not_open_as_json_is_comma_separated(monkeypatch):
    assert read(monkeypatch, "[::1]/t, a@https://h/t") == ["[::1]/t", "a@https://h/t"]
    assert read(monkeypatch, "[]") == [] and read(monkeypatch, "") == []
