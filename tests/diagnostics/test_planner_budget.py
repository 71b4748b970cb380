"""Issue 39: the planner's step budget goes where it informs. A sibling replica's reads wait behind the
reads another lead asks for; a describe that returned the object makes its event listing and its one-line
row redundant; no read is made twice. Names appear in no case."""

from __future__ import annotations

from diagnostics.agent.evidence.analyzers import AnalysisState, ToolOutput
from diagnostics.agent.findings import ObjRef
from diagnostics.agent.investigation.budget import family_of
from diagnostics.agent.investigation.observer import PROBE, InvestigationView, StepView
from diagnostics.agent.investigation.planner import RulePlanner
from diagnostics.agent.request.subject import AlertContext
from tests.support.planner import tool_spec

TOOLS = [
    tool_spec("kubectl_describe", "kind", "name", "namespace"),
    tool_spec("kubectl_get_by_name", "kind", "name", "namespace"),
    tool_spec("kubectl_events", "resource_type", "resource_name", "namespace"),
    tool_spec("fetch_pod_logs", "namespace", "pod_name"),
]
FIRST, SIBLING = "quill-7f6c5d-x2k9p", "quill-7f6c5d-m4r8t"


def _run(
    leads: list[tuple[ObjRef, int]],
    answered: bool = True,
    most: int = 30,
    listing: AnalysisState | None = None,
) -> list[tuple[str, str]]:
    """(tool, object name) of each read, in order; each read returns data when ``answered``."""
    state = listing or AnalysisState(AlertContext())
    for obj, priority in leads:
        state.lead(obj, "unhealthy", priority)
    view = InvestigationView(AlertContext(), TOOLS, [], [], [], state, 0, most)
    planner, reads = RulePlanner(max_iterations=most), []
    for _ in range(most):
        decision = planner.decide(view)
        if decision.kind != PROBE:
            break
        params = decision.params
        reads.append(
            (decision.tool, str(params.get("name") or params.get("resource_name") or params["pod_name"]))
        )
        view.steps.append(
            StepView(len(view.steps) + 1, decision.tool, dict(params), True, not answered, "read")
        )
    return reads


def test_a_sibling_replicas_reads_wait_behind_another_leads_reads():
    reads = _run(
        [
            (ObjRef("pod", FIRST, "inkwell"), 70),
            (ObjRef("pod", SIBLING, "inkwell"), 70),
            (ObjRef("service", "quill-api", "inkwell"), 60),
        ]
    )
    assert reads[0] == ("kubectl_describe", FIRST)
    # The sibling's look-alike describe waits behind the other lead; its own logs do not (replicas of one
    # template can fail differently).
    assert reads.index(("kubectl_describe", "quill-api")) < reads.index(("kubectl_describe", SIBLING)), reads
    assert reads.index(("fetch_pod_logs", SIBLING)) < reads.index(("kubectl_describe", "quill-api")), reads
    assert len(reads) == len(set(reads))  # never the same read twice


def test_a_describe_that_returned_the_object_answers_its_events_and_row():
    reads = _run([(ObjRef("pod", FIRST, "inkwell"), 70)])
    assert ("kubectl_describe", FIRST) in reads and ("fetch_pod_logs", FIRST) in reads
    assert ("kubectl_events", FIRST) not in reads and ("kubectl_get_by_name", FIRST) not in reads
    # A describe that came back empty answers nothing: the other views are still read.
    empty = _run([(ObjRef("pod", FIRST, "inkwell"), 70)], answered=False)
    assert ("kubectl_events", FIRST) in empty and ("kubectl_get_by_name", FIRST) in empty


def test_a_pods_family_is_its_template_in_one_state():
    state = AnalysisState(AlertContext())
    state.record(
        ToolOutput(
            "kubectl_get_by_kind_in_namespace",
            {"kind": "pod", "namespace": "inkwell"},
            "NAME                 READY   STATUS             RESTARTS   AGE\n"
            f"{FIRST}   0/1     ImagePullBackOff   0          5m\n"
            f"{SIBLING}   1/1     Running            0          3d\n"
            "quill-7f6c5d-q9w2e   0/1     ImagePullBackOff   0          5m\n",
        )
    )
    first, sibling = ObjRef("pod", FIRST, "inkwell"), ObjRef("pod", SIBLING, "inkwell")
    assert family_of(first, state) == family_of(ObjRef("pod", "quill-7f6c5d-q9w2e", "inkwell"), state)
    assert family_of(first, state) != family_of(sibling, state)  # running where the others cannot pull
    assert family_of(ObjRef("pod", "ledger-0", "a"), state) == family_of(
        ObjRef("pod", "ledger-1", "a"), state
    )
    assert family_of(ObjRef("service", "quill-api", "inkwell"), state) is None
    # Read in turn: the running sibling is read at full priority, the look-alike waits behind another lead.
    reads = _run(
        [
            (first, 70),
            (sibling, 70),
            (ObjRef("pod", "quill-7f6c5d-q9w2e", "inkwell"), 70),
            (ObjRef("service", "quill-api", "inkwell"), 60),
        ],
        listing=state,
    )
    describes = [name for tool, name in reads if tool == "kubectl_describe"]
    assert describes.index(SIBLING) < describes.index("quill-api") < describes.index("quill-7f6c5d-q9w2e")
