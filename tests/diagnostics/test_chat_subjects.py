"""Issue 39 class 4, subjects from structure first: a chat thread's markup, user ids, attached file
names, links, versions and function words are never an object's name; a search that found nothing
names no object."""

from __future__ import annotations

import pytest

from diagnostics.agent.evidence.analyzers import AnalysisState, ToolOutput, analyze
from diagnostics.agent.request.names import parse_free_text
from diagnostics.agent.request.subject import from_investigation, from_text


def test_a_slack_thread_is_about_the_workload_it_names_not_its_markup() -> None:
    thread = (
        "<@U02QW7ERT9> checkout-api in ns shop keeps restarting after the 2.4.1 rollout at 09:10\n"
        "<@W0LK55AB2C> No, the 2.4.1 deploy at noon only bumped the base image, see checkout-api-oom.log\n"
        "<#C01ABCDE|incidents> <https://grafana.example.com/d/abc-xyz/pod-health|dashboard> U09ZX8YV7Q"
    )
    subject = parse_free_text(thread)
    assert (subject.name, subject.namespace) == ("checkout-api", "shop")
    for noise in (
        "at",
        "no",
        "2.4.1",
        "checkout-api-oom",
        "u02qw7ert9",
        "u09zx8yv7q",
        "abc-xyz",
        "pod-health",
    ):
        assert noise not in [n.lower() for n in subject.names]


def test_kubectl_flags_and_chat_shorthand_name_the_namespace() -> None:
    assert parse_free_text("kubectl logs -n payments card-vault-0 shows errors").namespace == "payments"
    assert parse_free_text("ns: billing, invoicer keeps failing").namespace == "billing"
    # A duration's unit is no namespace.
    assert parse_free_text("p99 went to 900 ns today for router-7").namespace == ""


def test_a_cluster_address_in_a_link_is_kept_a_dashboard_link_is_not() -> None:
    subject = parse_free_text("calls to http://card-vault.payments.svc:8443/health time out")
    assert subject.name == "card-vault"
    assert "example" not in " ".join(parse_free_text("see https://status.example.com/page-one").names)


def test_an_upper_case_word_is_not_mistaken_for_a_user_id() -> None:
    assert from_text("UNHEALTHY: 'WEBAPP1' pod report-gen failing").subject.name == "WEBAPP1"


def test_a_thread_request_with_an_attachment_reads_the_named_workload() -> None:
    request = {
        "source": "slack",
        "title": "Slack thread in #payments",
        "description": "<@U0A1B2C3D4> billing-worker in ns money is oomkilled since the v3 deploy at 08:00, "
        "heap dump in billing-worker-heap.hprof",
        "subject": {"name": None, "namespace": None, "kind": None},
    }
    issue = {"attachments": [{"name": "billing-worker-heap.hprof"}], "description": request["description"]}
    subject = from_investigation(request, issue).subject
    assert (subject.name, subject.namespace) == ("billing-worker", "money")
    assert "billing-worker-heap" not in subject.names
    # An attachment without a file extension is still the thread's file, not an object.
    request["description"] = "<@U0A1B2C3D4> see rollout-notes-q3, billing-worker in ns money is down"
    issue = {"attachments": [{"name": "rollout-notes-q3"}]}
    subject = from_investigation(request, issue).subject
    assert (subject.name, subject.namespace) == ("billing-worker", "money")
    assert "rollout-notes-q3" not in subject.names


def test_a_search_that_found_nothing_names_no_object() -> None:
    state = AnalysisState(from_text("is at ok?"))
    analyze(
        ToolOutput(
            "kubectl_find_resource",
            {"keyword": "at", "kind": "deployment"},
            "No data: nothing matched 'at'",
            no_data=True,
        ),
        state,
    )
    analyze(
        ToolOutput(
            "kubectl_find_resource", {"keyword": "at", "kind": "pod"}, "NAMESPACE NAME\nNo data: here"
        ),
        state,
    )
    assert not state.leads
    assert "deployment:at" in state.fact_set("not_found")


def test_the_object_a_sentence_places_in_a_namespace_wins_over_a_peer_it_mentions() -> None:
    text = "Since noon inventory in namespace stock cannot reach order-db; the order-db owners see no errors."
    subject = parse_free_text(text)
    assert (subject.name, subject.namespace) == ("inventory", "stock")
    assert "order-db" in subject.names
    assert parse_free_text("search-api in the ns search keeps timing out").name == "search-api"


@pytest.mark.parametrize(
    ("text", "kind", "namespace", "name"),
    [
        (
            "is https://console.acme.io/#/pods/billing/invoicer-5f7c9-k2j4d?ns=billing ok?",
            "pod",
            "billing",
            "invoicer-5f7c9-k2j4d",
        ),
        (
            "look at https://lens.acme.io/c/prod/deployments/checkout?namespace=shop",
            "deployment",
            "shop",
            "checkout",
        ),
        ("https://grafana.acme.io/d/abc/overview?namespace=media&var-statefulset=x broke", "", "media", ""),
    ],
)
def test_a_console_link_names_the_object_its_path_addresses(text, kind, namespace, name):
    subject = parse_free_text(text)
    assert (subject.kind, subject.namespace) == (kind, namespace)
    assert subject.name == name


def test_a_ticket_link_that_addresses_no_object_names_nothing():
    subject = parse_free_text("see https://tracker.acme.io/browse/OPS-4411 for the thread")
    assert subject.names == [] and subject.namespace == ""


@pytest.mark.parametrize(
    ("text", "subject", "never"),
    [
        (
            "we set LOG_LEVEL=debug on ledger at 12:20 and now the app itself looks broken, namespace fin",
            "ledger",
            {"log_level", "itself", "broken", "debug"},
        ),
        (
            "after MAX_POOL_SIZE went to 5 the worker is impossible to reach; invoicer-api in ns billing",
            "invoicer-api",
            {"max_pool_size", "impossible"},
        ),
        (
            "card-vault-0 restarts since --max-connections=50 was passed; the container itself never exits",
            "card-vault-0",
            {"max-connections", "itself", "never"},
        ),
        (
            "feature_flags.enable_v2=true was flipped for search-indexer, the process themselves is fine",
            "search-indexer",
            {"feature_flags.enable_v2", "themselves", "fine"},
        ),
    ],
)
def test_settings_pronouns_and_states_are_no_object_s_name(text: str, subject: str, never: set[str]) -> None:
    """A setting (an environment variable's shape, an assignment's key), a reflexive pronoun after a kind
    word ("the app itself") and the state after "is" ("is impossible", "is fine") name no object: the
    workload the sentence is about stays the subject (issue 39 class 4: n92's thread was 'Diagnosis of
    itself')."""
    parsed = parse_free_text(text)
    names = [n.lower() for n in parsed.names]
    assert parsed.name == subject, parsed
    assert not never & set(names), names


@pytest.mark.parametrize(
    ("text", "kind", "name"),
    [
        ("the orders pods keep restarting since the billing rollout. namespace orders", "pod", "orders"),
        (
            "in ns payments, deployment payments is crash looping after the ledger migration",
            "deployment",
            "payments",
        ),
        ("billing statefulset in namespace billing lost a replica at noon", "statefulset", "billing"),
    ],
)
def test_a_workload_named_after_its_namespace_is_the_subject_when_a_kind_word_says_so(
    text: str, kind: str, name: str
) -> None:
    subject = parse_free_text(text)
    assert (subject.kind, subject.name, subject.namespace) == (kind, name, name)


def test_the_namespace_s_bare_name_is_still_no_object() -> None:
    subject = parse_free_text("everything in namespace orders is slow since noon, the checkout-api too")
    assert subject.namespace == "orders"
    assert "orders" not in [n.lower() for n in subject.names]
    assert subject.name == "checkout-api"


def test_a_search_for_a_workload_named_after_its_namespace_leads_to_its_pods_not_the_namespace() -> None:
    state = AnalysisState(from_text("the orders pods keep restarting, namespace orders"))
    headed = "NAMESPACE   NAME\norders   orders-6f8d7c9b5-4kq2x\norders   orders-db-0\n"
    grepped = "orders   orders-6f8d7c9b5-r2t6n   2/2   CrashLoopBackOff   15 (1m ago)   2h\n"
    for text in (headed, grepped):
        analyze(ToolOutput("kubectl_find_resource", {"kind": "pod", "keyword": "orders"}, text), state)
    leads = {lead.obj.label for lead in state.leads}
    assert "pod/orders/orders-6f8d7c9b5-4kq2x" in leads
    assert "pod/orders/orders-6f8d7c9b5-r2t6n" in leads
    assert not any(label.endswith("/orders") for label in leads), leads
