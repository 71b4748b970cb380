"""A newcomer looking for one key's or one profile's calls (issue 41's "search the ledger" as a daily
flow): the Keys and Profiles pages and a profile's own page link to the ledger filtered to it, and the
link lists that key's (profile's) calls and no others."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
from django.test import Client

from tests.factories import ApiKeyFactory, InvocationFactory, TaskProfileFactory

pytestmark = pytest.mark.django_db


def _links(page: str, marker: str) -> list[str]:
    return re.findall(rf'<a href="(/calls/\?\w+=\d+)" {marker}>', page)


def test_keys_and_profiles_link_to_their_calls(as_role: Callable[[str], Client]) -> None:
    mine, other = ApiKeyFactory.create(name="mine"), ApiKeyFactory.create(name="other")
    extract, chat = TaskProfileFactory.create(name="extract"), TaskProfileFactory.create(name="chat")
    ours = InvocationFactory.create(api_key=mine, profile=extract)
    theirs = InvocationFactory.create(api_key=other, profile=chat)
    viewer = as_role("viewer")

    def listed(link: str) -> tuple[bool, bool]:
        body = viewer.get(link).content.decode()
        return f"/calls/{ours.pk}/" in body, f"/calls/{theirs.pk}/" in body

    key_links = _links(viewer.get("/keys/").content.decode(), "data-key-calls")
    assert sorted(key_links) == sorted([f"/calls/?key={mine.pk}", f"/calls/?key={other.pk}"])
    assert listed(f"/calls/?key={mine.pk}") == (True, False)

    profile_links = _links(viewer.get("/profiles/").content.decode(), "data-profile-calls")
    assert f"/calls/?profile={chat.pk}" in profile_links
    assert listed(f"/calls/?profile={chat.pk}") == (False, True)

    own_page = _links(viewer.get(f"/profiles/{extract.pk}/").content.decode(), "data-profile-calls")
    assert own_page == [f"/calls/?profile={extract.pk}"]
    assert listed(own_page[0]) == (True, False)
