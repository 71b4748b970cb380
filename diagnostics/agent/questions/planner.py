"""The plan of read-only calls for each question intent (the analyzers-only floor; no LLM).

1. Resolve: list the namespaces, and look each candidate name up in the environment's listings
   (``kubectl get -A | grep``-style finders, by the kinds the intent is about); a namespace the question
   names is listed for the kind it counts or lists.
2. Read what the intent needs about what resolved: the listing a count or list is over (narrowed to a
   namespace when one resolved), the logs of the pods a name stands for (with the question's time
   window in the tool's own parameters, where it takes one), their describe and events for errors and
   timelines, the finding an explain question refers to.
3. Submit: the runner builds the answer shape from what was read (``question_answers``).

``status`` questions (and every alert) go to the root-cause planner (``RulePlanner``) unchanged; so does
an ``explain`` question once the finding it refers to is read (its subject becomes the subject).
"""

from __future__ import annotations

import heapq
from typing import Any

import yaml

from diagnostics.agent import rx
from diagnostics.agent.evidence.analyzers import AnalysisState
from diagnostics.agent.evidence.inventory import CLUSTER_SCOPED, Resolution
from diagnostics.agent.findings import ObjRef, normalize_kind
from diagnostics.agent.investigation.observer import PROBE, SUBMIT, Decision, InvestigationView
from diagnostics.agent.investigation.params import props_of, required_of
from diagnostics.agent.investigation.planner import RulePlanner, _key
from diagnostics.agent.questions.asked import asked_names
from diagnostics.agent.questions.metric_answers import (
    asks_of,
    counts_in_logs,
    has_query_tool,
    metric_diagnosis,
    metric_reads,
    next_metric_read,
)
from diagnostics.agent.questions.objects import ObjectPlan
from diagnostics.agent.questions.promql import predictions
from diagnostics.agent.questions.workload_facts import answered_first
from diagnostics.agent.request.intent import (
    CHANGES,
    COUNT,
    ERRORS,
    EXPLAIN,
    LIST,
    LOGS,
    SEARCH,
    STATUS,
    TIMELINE,
    specific_name,
)
from diagnostics.agent.request.timewindow import window_params
from diagnostics.toolsets.base import ToolSpec
from routing.json_body import loads_answer

MAX_NAMES = 4
MAX_PODS = 3
# The kinds a name is looked up as, per intent (a pod first: logs, restarts and errors live there).
LOOKUP_KINDS = {
    COUNT: ("pod", "deployment"),
    LIST: ("pod", "deployment"),
    LOGS: ("pod", "deployment"),
    SEARCH: ("pod", "deployment"),
    ERRORS: ("pod", "deployment"),
    TIMELINE: ("pod", "deployment", "job"),
    CHANGES: ("deployment", "pod", "statefulset"),
}


def resolutions(state: AnalysisState) -> list[Resolution]:
    """Each candidate name of the question, resolved against what the listings returned so far."""
    intent = state.intent
    if intent is None:
        return []
    namespaces = set(state.inventory.namespaces)
    return [
        state.inventory.resolve(name)
        for name in intent.names[:MAX_NAMES]
        if name != intent.namespace and name not in namespaces
    ]


def question_namespace(state: AnalysisState) -> str:
    """The namespace the question is about: named as one, or a candidate name that is a namespace."""
    intent = state.intent
    if intent is None:
        return ""
    namespaces = state.inventory.namespaces
    if intent.namespace:
        return intent.namespace
    return next((n for n in intent.names if n in namespaces), "")


def _spec(view: InvestigationView, test: Any) -> ToolSpec | None:
    return next((s for s in view.tools if test(s)), None)


def _finder(spec: ToolSpec) -> bool:
    return "keyword" in props_of(spec)


def _lister(spec: ToolSpec, *, namespaced: bool) -> bool:
    required = set(required_of(spec))
    return required == ({"kind", "namespace"} if namespaced else {"kind"})


def _log_tool(spec: ToolSpec, *, previous: bool = False) -> bool:
    name = spec.name.lower()
    return "log" in name and "pod_name" in props_of(spec) and (("previous" in name) == previous)


class QuestionPlanner(RulePlanner):
    """The root-cause planner, plus a plan for each question intent."""

    def __init__(self, *, max_iterations: int | None = None) -> None:
        super().__init__(max_iterations=max_iterations)
        self._phase = ""
        self._read_pods: set[tuple[str, str]] = set()
        self._listed_for_pods: set[str] = set()
        self._queries: set[str] = set()
        self._predicted = False
        self._objects = ObjectPlan()  # a certificate or Helm release asked about

    def decide(self, view: InvestigationView) -> Decision:
        intent = view.state.intent
        if self._phase != "status" and (metric := self._metric(view)) is not None:
            return metric
        if self._phase != "status" and (about := self._objects.decide(view)) is not None:
            return about
        if view.alert.queries and not self._predicted:
            self._predicted = True
            self._prediction_reads(view)
        if intent is not None and intent.kind == STATUS and (asked := self._asked_read(view)) is not None:
            return asked
        if intent is None or intent.kind == STATUS or self._phase == "status":
            return answered_first(view.state, super().decide(view), asked_names(view.state))
        if intent.kind == EXPLAIN:
            return self._explain(view)
        if not self._phase:
            self._phase = "resolve"
            self._resolve(view)
        for _ in range(4):
            decision = self._next(view)
            if decision is not None:
                return decision
            if not self._read(view):
                break
        return Decision(SUBMIT, reason="the question's plan is done")

    def _metric(self, view: InvestigationView) -> Decision | None:
        """A question only a metrics query answers: the PromQL written from it, each measure's forms in
        turn; submitted when one answered, else the question's own plan goes on (it says what was tried)."""
        if not asks_of(view.state) or not has_query_tool(view):
            return None
        decision = next_metric_read(view, self._queries)
        if decision is not None:
            return decision
        if any(read.answered for read in metric_reads(view.state)):
            diagnosis, root_cause = metric_diagnosis(view.state)
            return Decision(
                SUBMIT, reason="the metric reads answered", diagnosis=diagnosis, root_cause=root_cause
            )
        return None

    def _prediction_reads(self, view: InvestigationView) -> None:
        """An alert's ``predict_linear(M[W], H)``: M's range over W (with a range tool), else M now and
        ``deriv(M[W])``, narrowed by the alert's labels, after the alert's own expression."""
        ranged = _spec(view, lambda s: "range" in s.name.lower() and "query" in required_of(s))
        instant = _spec(view, lambda s: required_of(s) == ["query"] and "range" not in s.name.lower())
        for prediction in predictions(view.alert)[:2]:
            reason = f"how fast {prediction.metric} moves (the alert predicts it)"
            if ranged is not None and "start" in props_of(ranged):
                params: dict[str, Any] = {"query": prediction.series, "start": f"-{prediction.window}"}
                if "step" in props_of(ranged):  # about 60 points over the window
                    params["step"] = max(1, prediction.seconds // 60)
                self._push(ranged.name, params, 83, reason)
            elif instant is not None:
                self._push(instant.name, {"query": prediction.series}, 84, f"{prediction.metric} now")
                self._push(instant.name, {"query": prediction.deriv}, 83, reason)
            if instant is not None and prediction.capacity:
                self._push(instant.name, {"query": prediction.capacity}, 84, "what it is out of (capacity)")

    def _asked_read(self, view: InvestigationView) -> Decision | None:
        """The read a status question's asked fact needs before the root-cause plan: the wide listing of
        every pod for an address, the pods' CPU and memory (``kubectl top``) for a usage question."""
        intent = view.state.intent
        assert intent is not None
        wanted: list[tuple[ToolSpec | None, dict[str, Any], str]] = []
        if intent.addresses:
            lister = _spec(view, lambda s: _lister(s, namespaced=False))
            wanted.append((lister, {"kind": "pod"}, "find what has the address"))
        if "usage" in intent.asks:
            top = _spec(
                view, lambda s: "top" in s.name.lower() and "pod" in s.name.lower() and not required_of(s)
            )
            wanted.append((top, {}, "the pods' CPU and memory use"))
        for spec, params, reason in wanted:
            key = _key(spec.name, params) if spec is not None else ""
            if spec is not None and key not in self._done:
                self._done.add(key)
                return Decision(PROBE, reason=reason, tool=spec.name, params=params)
        return None

    def _next(self, view: InvestigationView) -> Decision | None:
        made = {_key(step.tool, step.params) for step in view.steps}
        while self._heap:
            task = heapq.heappop(self._heap)
            key = _key(task.tool, task.params)
            if key in self._done or key in made:
                self._done.add(key)
                continue
            self._done.add(key)
            return Decision(PROBE, reason=task.purpose, tool=task.tool, params=task.params)
        return None

    # -- 1. resolve ----------------------------------------------------------------------------------

    def _resolve(self, view: InvestigationView) -> None:
        intent = view.state.intent
        assert intent is not None
        self._list(view, "namespace", "", 100, "the namespaces (to resolve names)")
        finder = _spec(view, _finder)
        kinds = LOOKUP_KINDS.get(intent.kind, ("pod",))
        if intent.object_kind and intent.object_kind not in ("restart", "error", "event", "container"):
            kinds = (intent.object_kind, *(k for k in kinds if k != intent.object_kind))
        for n, name in enumerate(intent.names[:MAX_NAMES]):
            if name == intent.namespace or finder is None:
                continue
            for i, kind in enumerate(kinds):
                params: dict[str, Any] = {"keyword": name}
                if "kind" in props_of(finder):
                    params["kind"] = kind
                self._push(finder.name, params, 95 - 10 * n - i, f"look up {name!r} as a {kind}")
        self._nodes(view)
        if intent.namespace:
            self._listings(view, intent.namespace, 90)
        elif intent.kind in (COUNT, LIST, CHANGES) and not intent.names:
            self._listings(view, "", 90)

    def _nodes(self, view: InvestigationView) -> None:
        """A name the question calls a node ("node pool-b-3"): the nodes' listing and its describe (nodes are
        cluster-scoped: no finder by namespace finds them)."""
        intent = view.state.intent
        assert intent is not None
        lowered = (view.alert.text or "").lower()
        describe = _spec(
            view, lambda s: "describe" in s.name.lower() and {"kind", "name"} <= set(required_of(s))
        )
        for name in intent.names[:MAX_NAMES]:
            if describe is not None and rx.search(rf"\bnodes?\s+[`'\"]?{rx.escape(name)}\b", lowered):
                self._list(view, "node", "", 93, "the nodes")
                self._push(describe.name, {"kind": "node", "name": name}, 92, f"describe node {name}")

    def _listings(self, view: InvestigationView, namespace: str, priority: int) -> None:
        intent = view.state.intent
        assert intent is not None
        kind = self._listed_kind(intent.object_kind, intent.kind)
        if kind in CLUSTER_SCOPED or not namespace:
            self._list(view, kind, "", priority, f"list every {kind}")
        if namespace and kind not in CLUSTER_SCOPED:
            self._list(view, kind, namespace, priority, f"list {kind} in {namespace}")

    @staticmethod
    def _listed_kind(object_kind: str, intent_kind: str) -> str:
        if intent_kind == CHANGES:
            return "event"  # rollouts, scaling and restarts are events of the namespace
        if object_kind in ("restart", "container", "error", "") or intent_kind not in (COUNT, LIST):
            return "pod"
        return normalize_kind(object_kind)

    # -- 2. read ---------------------------------------------------------------------------------------

    def _read(self, view: InvestigationView) -> bool:
        """Pushes the reads the intent needs about what resolved so far; False when there are none."""
        intent = view.state.intent
        assert intent is not None
        before = len(self._heap)
        namespace = question_namespace(view.state)
        resolved = [r for r in resolutions(view.state) if r.known]
        if namespace and not intent.namespace and intent.kind in (COUNT, LIST):
            self._listings(view, namespace, 85)
        if intent.kind in (COUNT, LIST) and not resolved and not namespace:
            self._listings(view, "", 80)
        if intent.kind == CHANGES and namespace:
            # Each ReplicaSet is a revision of its Deployment (its age and images say when and what rolled
            # out): the next form of "what changed" when the namespace's events are empty or aged out.
            self._list(view, "replicaset", namespace, 60, f"the revisions (replica sets) in {namespace}")
        if "replicas" in intent.asks:  # the controller's own count of its replicas
            for resolution in resolved[:2]:
                for row in resolution.matches[:2]:
                    self._inspect_workload(view, row.kind, row.name, row.namespace)
        in_logs = counts_in_logs(view.state, has_query_tool(view))
        wants_pods = in_logs or intent.kind in (LOGS, SEARCH, ERRORS, TIMELINE, CHANGES)
        wants_pods = wants_pods or intent.object_kind in (
            "restart",
            "error",
            "event",
            "container",
        )
        if wants_pods:
            for resolution in resolved[:2]:
                pods = view.state.inventory.pods_of(resolution)
                for row in resolution.matches[:3]:
                    if row.kind != "pod":
                        self._inspect_workload(view, row.kind, row.name, row.namespace)
                if not pods:
                    for row in resolution.matches[:2]:
                        if row.namespace and row.namespace not in self._listed_for_pods:
                            self._listed_for_pods.add(row.namespace)
                            self._list(view, "pod", row.namespace, 70, f"the pods of {row.name}")
                        self._inspect_workload(view, row.kind, row.name, row.namespace)
                for pod in pods[:MAX_PODS]:
                    if not pod.restarts and pod.namespace and pod.namespace not in self._listed_for_pods:
                        # A finder's row without its RESTARTS column: the namespace's listing has it.
                        self._listed_for_pods.add(pod.namespace)
                        self._list(view, "pod", pod.namespace, 70, f"the pods in {pod.namespace}")
                    self._pod_reads(view, pod.name, pod.namespace, restarted=_restarted(pod.restarts))
            named_unknown = any(specific_name(r.name) for r in resolutions(view.state) if not r.known)
            if (
                not resolved
                and namespace
                and not named_unknown
                and intent.kind in (LOGS, ERRORS, SEARCH, TIMELINE)
            ):
                if namespace not in self._listed_for_pods:
                    self._listed_for_pods.add(namespace)
                    self._list(view, "pod", namespace, 70, f"the pods in {namespace}")
                for pod in view.state.inventory.of_kind("pod", namespace)[:MAX_PODS]:
                    self._pod_reads(view, pod.name, pod.namespace, restarted=_restarted(pod.restarts))
        return len(self._heap) > before

    def _inspect_workload(self, view: InvestigationView, kind: str, name: str, namespace: str) -> None:
        intent = view.state.intent
        assert intent is not None
        replicas = "replicas" in intent.asks and kind not in ("pod", "namespace")
        if (intent.kind not in (TIMELINE, ERRORS, CHANGES) and not replicas) or not namespace:
            return
        obj = ObjRef(kind, name, namespace)
        describe = _spec(
            view, lambda s: "describe" in s.name.lower() and {"kind", "name"} <= set(required_of(s))
        )
        if describe is not None:
            self._push(
                describe.name,
                {"kind": kind, "name": name, "namespace": namespace},
                60,
                f"describe {obj.label}",
            )

    def _pod_reads(self, view: InvestigationView, pod: str, namespace: str, *, restarted: bool) -> None:
        if (pod, namespace) in self._read_pods or not namespace:
            return
        self._read_pods.add((pod, namespace))
        intent = view.state.intent
        assert intent is not None
        count_only = intent.kind in (COUNT, LIST)
        if intent.object_kind == "restart" or intent.kind in (TIMELINE, ERRORS, CHANGES) or count_only:
            describe = _spec(
                view, lambda s: "describe" in s.name.lower() and {"kind", "name"} <= set(required_of(s))
            )
            if describe is not None:
                self._push(
                    describe.name,
                    {"kind": "pod", "name": pod, "namespace": namespace},
                    65,
                    f"describe pod {pod}",
                )
        if intent.kind in (TIMELINE, ERRORS, CHANGES) or intent.object_kind == "event":
            events = _spec(view, lambda s: "event" in s.name.lower() and "resource_name" in props_of(s))
            if events is not None:
                params = {"resource_type": "pod", "resource_name": pod, "namespace": namespace}
                params.update(window_params(props_of(events), intent.window))
                self._push(events.name, params, 55, f"events of pod {pod}")
        if count_only and intent.object_kind not in ("error",) and not counts_in_logs(view.state, False):
            return
        for previous in (False, True):
            spec = _spec(view, lambda s, p=previous: _log_tool(s, previous=p))
            if spec is None or (previous and not restarted and intent.kind != ERRORS and not intent.previous):
                continue
            params = {"pod_name": pod, "namespace": namespace}
            for name, schema in props_of(spec).items():
                if name not in params and isinstance(schema, dict) and "default" in schema:
                    params[name] = schema["default"]
            params.update(window_params(props_of(spec), intent.window))
            which = "previous logs" if previous else "logs"
            self._push(spec.name, params, 75 if not previous else 50, f"the {which} of pod {pod}")

    # -- explain ---------------------------------------------------------------------------------------

    def _explain(self, view: InvestigationView) -> Decision:
        intent = view.state.intent
        assert intent is not None
        if not self._phase:
            self._phase = "explain"
            tool = _spec(
                view,
                lambda s: required_of(s) == ["id"] or ("finding" in s.name.lower() and "id" in props_of(s)),
            )
            if intent.finding_ref and tool is not None:
                return Decision(
                    PROBE,
                    reason="read the finding the question refers to",
                    tool=tool.name,
                    params={"id": intent.finding_ref},
                )
        if self._phase == "explain":
            self._phase = "status"
            subject = finding_subject(view)
            if subject is not None:
                view.alert.subject.kind, view.alert.subject.name, view.alert.subject.namespace = subject
                view.alert.subject.names = [subject[1], *view.alert.subject.names]
                view.state.related.add(subject[1].lower())
        return super().decide(view)


def _restarted(restarts: str) -> bool:
    match = rx.match(r"\d+", restarts or "")
    return bool(match and int(match.group(0)) > 0)


def finding_subject(view: InvestigationView) -> tuple[str, str, str] | None:
    """The object a fetched finding (a JSON document with ``subject_*`` fields) is about."""
    for out in view.state.outputs:
        if "id" not in out.params or out.no_data:
            continue
        data = finding_document(out.text)
        if data and data.get("subject_name"):
            kind = normalize_kind(str(data.get("subject_type") or "pod"))
            return kind, str(data["subject_name"]), str(data.get("subject_namespace") or "")
    return None


def finding_document(text: str) -> dict[str, Any] | None:
    """A fetched finding as a mapping: a JSON document, else a YAML one (safe loader, bounded size)."""
    start = text.find("{")
    value: Any = None
    if start != -1:
        try:
            value = loads_answer(text[start:])
        except ValueError:
            value = None
    if not isinstance(value, dict) and len(text) <= 200_000:
        try:
            value = yaml.safe_load(text)
        except yaml.YAMLError:
            return None
    return value if isinstance(value, dict) else None
