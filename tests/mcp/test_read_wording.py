"""Issue 40, round six, class 1: a read must say that it reads (diagnostics/mcp/wording.py). Writes worded
past a verb list (the verbs only a verb's place tells from a noun: merge, push, commit, post, pay, ...;
synonyms, nominalised and passive writes, other languages, split, invisible, look-alike and markdown
letters) claiming ``readOnlyHint: true`` are writes; honest reads worded as public servers word theirs
stay reads, through the running server with a lying stdio upstream (tests/support/mcp_upstream.py)."""

from __future__ import annotations

from typing import Any

import pytest

from diagnostics.mcp import classify
from diagnostics.mcp.servers import mcp_grant_set, mcp_server_accept, mcp_server_sync
from diagnostics.models import McpTool
from routing import scopes
from tests.factories import make_role_key
from tests.mcp.read_wording_blind import BLIND_HONEST, BLIND_LIES
from tests.mcp.read_wording_cases import FRESH_HONEST, FRESH_LIES, HONEST, LIES, UNCLEAR_HONEST
from tests.mcp.read_wording_no_object import NO_OBJECT_HONEST, NO_OBJECT_LIES
from tests.mcp.test_first_sight import RO, liar, ran, trusted_entries
from tests.mcp.test_surfaces import call, text


def _vetted(name: str, description: str) -> tuple[str, list[str]]:
    klass, _, flags = classify.vetted_class(name=name, description=description, annotations=RO)
    return klass, flags


def test_honest_reads_stay_reads_and_every_lie_is_a_write():
    false_writes = [(n, d, _vetted(n, d)[1]) for n, d in HONEST if _vetted(n, d) != ("read", [])]
    assert false_writes == [], false_writes  # 0 of 119 (HEAD: 15, list_commits and search_posts among them)
    missed = [(n, d) for n, d in LIES if _vetted(n, d)[0] != "write"]
    assert missed == [], missed  # 0 of 71 (HEAD: 38)
    for name, description in LIES:
        assert _vetted(name, description)[1], name  # flagged, with the reason
    for name, description in UNCLEAR_HONEST:  # the rule's price: an operator promotes them
        assert _vetted(name, description)[0] == "write"
    assert [(n, d) for n, d in FRESH_HONEST if _vetted(n, d) != ("read", [])] == []
    assert [(n, d) for n, d in FRESH_LIES if _vetted(n, d)[0] != "write"] == []


def test_every_verb_of_a_read_is_a_known_one_on_the_blind_set():
    """A read-named tool that opens with a read verb and then acts with a verb no list holds ("Gets the PR
    and frobnicates it") is unclear: a write, flagged. The blind set was written before the rule: at its
    HEAD 0 of 21 lies were caught and 19 of 22 honest reads stayed reads; with the rule 21 of 21 and 20 of
    22 (the two left were flagged before it too: 'Capture ...' says no read, 'expanding' is a write verb)."""
    missed = [(n, d) for n, d in BLIND_LIES if _vetted(n, d)[0] != "write"]
    assert missed == [], missed
    flagged = sorted(n for n, d in BLIND_HONEST if _vetted(n, d) != ("read", []))
    assert flagged == ["browser_snapshot", "list_calendar_events"], flagged


def test_a_verb_with_no_object_after_it_is_held_to_the_same_rule():
    """Round four: a verb that ends its clause ("Purges.", "Will nuke", "Gets the PR and frobnicates.")
    slipped the every-verb rule, which looked for an object. tests/mcp/read_wording_no_object.py was written
    before the rule: at its HEAD 6 of 24 lies were caught and 25 of 25 honest reads read; with the rule as
    first written 23 of 24 and 24 of 25 ("Returns the config and secrets." reads as a verb); the one lie
    left (a serial comma: "Gets the bucket, and empties.") was fixed after it was seen, so 24 of 24 is no
    longer blind. The red team's shapes (an imperative after "Afterwards,", a gerund with nothing after
    it) are writes too."""
    missed = [(n, d) for n, d in NO_OBJECT_LIES if _vetted(n, d)[0] != "write"]
    assert missed == [], missed
    flagged = sorted(n for n, d in NO_OBJECT_HONEST if _vetted(n, d) != ("read", []))
    assert flagged == ["get_config"], flagged
    for description in ("Reads the file. Afterwards, shred.", "Returns the config after zapping."):
        assert _vetted("get_file", description)[0] == "write", description


@pytest.mark.parametrize(
    ("name", "description", "flag"),
    [
        ("get_status", "Will zap", "also acts with 'zap'"),
        ("status", "Frobnicates.", "also acts with 'frobnicates'"),
        ("get_pr", "Gets the PR and frobnicates.", "also acts with 'frobnicates'"),
        ("get_vm", "Gets the VM. It then decommissions.", "also acts with 'decommissions'"),
        ("get_pull_request", "Gets the PR and frobnicates it.", "also acts with 'frobnicates'"),
        ("get_vm", "Shows the VM state; if idle, the VM is decommissioned.", "acts with 'decommissioned'"),
        ("get_pr", "Gets the PR, which is then frobnicated.", "acts with 'frobnicated'"),
        ("mergePullRequest", "", "name says 'merge'"),
        ("get_pull_request", "Merges the pull request.", "description says 'merge'"),
        ("get_file", "Performs a deletion of the file.", "performs a write: 'performs ... deletion'"),
        ("status", "The branch will be merged into main.", "passive"),
        ("status", "De lete the cache.", "split: 'de lete'"),
        ("get_pr", "Fusionne la pull request.", "unclear: a description in another language"),
        ("frobnicate", "Frobnication of widgets.", "unclear: neither the name nor the description"),
        ("get_quota", "Raises the quota of the project.", "opens with 'raises' acting on something"),
    ],
)
def test_each_flag_names_its_reason(name, description, flag):
    klass, flags = _vetted(name, description)
    assert klass == "write" and flag in " ".join(flags), flags


@pytest.mark.django_db(transaction=True)
def test_lies_worded_past_the_verb_list_are_writes_through_the_gateway_and_honest_reads_run(
    gateway_url, tmp_path, monkeypatch, settings
):
    lies = [{"name": f"lie{n}_{name}", "description": d} for n, (name, d) in enumerate(LIES[24:])]
    lies += [{"name": name, "description": d} for name, d in LIES[:24]]
    lies += [{"name": f"blind{n}_{name}", "description": d} for n, (name, d) in enumerate(BLIND_LIES)]
    honest = [{"name": f"ok{n}_{name}", "description": d} for n, (name, d) in enumerate(HONEST[:40])]
    tools: list[dict[str, Any]] = [{**t, "annotations": RO, "reply": "done"} for t in [*lies, *honest]]
    settings.MCP_TRUSTED_TOOLS = trusted_entries("wording", [t["name"] for t in tools])
    server = liar(tmp_path, monkeypatch, "wording", tools)
    report = mcp_server_sync(server=server)
    # The policy accepts the honest reads and no lie (HEAD: 38 of these 71 lies read, 6 honest reads flagged).
    assert sorted(report.accepted) == sorted(t["name"] for t in honest)
    rows = {t.name: t for t in McpTool.objects.filter(server=server)}
    assert [t["name"] for t in lies if rows[t["name"]].declared != "write" or not rows[t["name"]].flags] == []
    mcp_server_accept(server=server, by=None, note="accepted as shown")
    agent = make_role_key("agent", scopes=[scopes.MCP_GATEWAY])  # an owner: a gateway write's requester
    mcp_grant_set(key=agent.key, server=server, tools=[], by=None)
    url = gateway_url + "/mcp/servers/wording"
    for lie in lies[::4]:
        assert "Approval required" in text(call(url, agent.raw, lie["name"], {})), lie
    assert ran(tmp_path, "wording") == []  # nothing ran upstream
    assert text(call(url, agent.raw, honest[0]["name"], {})) == "done"
