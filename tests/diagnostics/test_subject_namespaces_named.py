"""Issue 39 class 4 (round eleven): prose places objects in namespaces without the word "namespace"
("ranker-api in relevance", "[ml-serving] embedder"); the cluster's namespace listing says which words
are namespaces, and the planner lists what runs there. Counts in words and a tracker's ticket keys are
no object's names. The replay derives a cluster-scoped listing from the objects its recordings address."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from diagnostics.agent.evidence.analyzers import AnalysisState
from diagnostics.agent.request.names import namespaces_named, parse_free_text
from diagnostics.agent.request.subject import from_text
from diagnostics.toolsets.replay import ReplayToolset
from tests.support.planner import planned_reads, tool_spec


def test_counts_in_words_and_ticket_keys_are_no_names() -> None:
    subject = parse_free_text("OPS-118: three workers of invoice-runner never start after the upgrade")
    assert subject.name == "invoice-runner"
    assert "three" not in subject.names and "ops-118" not in subject.names
    # A lower-case name with a number is a Kubernetes name (a StatefulSet's pod), not a ticket.
    assert parse_free_text("kafka-4 is Pending since the node refresh").name == "kafka-4"


def test_namespaces_named_are_the_cluster_namespaces_the_words_name_in_order() -> None:
    known = {"billing", "ml-serving", "default", "kube-system"}
    text = "<@U01ABCDEF> [ml-serving] embedder backlog; billing looks fine"
    assert namespaces_named(text, known) == ["ml-serving", "billing"]
    assert namespaces_named("nothing here", known) == []


def _reads(text: str, namespaces: set[str]) -> list[dict[str, Any]]:
    alert = from_text(text)
    tools = [
        tool_spec("kubectl_get_by_kind_in_namespace", "kind", "namespace"),
        tool_spec("kubectl_get_by_kind_in_cluster", "kind"),
        tool_spec("kubectl_describe", "kind", "name", "namespace"),
    ]
    state = AnalysisState(alert)

    def listed(params: dict[str, Any]) -> None:
        if params == {"kind": "namespace"}:
            state.fact_set("namespaces").update(namespaces)  # what the listing would have said

    return planned_reads(alert, tools, 40, state=state, after=listed)


def test_a_namespace_the_words_name_is_listed_when_the_subject_has_none() -> None:
    reads = _reads("Since 05:20 the ranker-api in relevance is at 4 of 6 ready", {"relevance", "default"})
    assert {"kind": "namespace"} in reads
    for kind in ("pod", "event", "deployment"):
        assert {"kind": kind, "namespace": "relevance"} in reads
    assert not any(r.get("namespace") == "default" for r in reads)


def test_no_namespace_is_guessed_from_words_the_cluster_does_not_have() -> None:
    reads = _reads("Since 05:20 the ranker-api in relevance is at 4 of 6 ready", {"default"})
    assert not any(r.get("namespace") == "relevance" for r in reads)


def test_the_replay_derives_a_cluster_scoped_listing(tmp_path: Path) -> None:
    (tmp_path / "pv.txt").write_text(
        '{"toolset_name": "kubernetes/core", "tool_name": "kubectl_get_yaml", "match_params": '
        '{"kind": "persistentvolume", "name": "pv-1"}}\n{"status": "success"}\nkind: PersistentVolume\n'
    )
    result = ReplayToolset(tmp_path).call("kubectl_get_by_kind_in_cluster", {"kind": "persistentvolume"})
    assert not result.no_data and result.output.splitlines()[1:] == ["NAME", "pv-1"]
    none = ReplayToolset(tmp_path).call("kubectl_get_by_kind_in_cluster", {"kind": "storageclass"})
    assert none.no_data
