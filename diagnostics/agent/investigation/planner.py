"""The analyzers-only Observer: a deterministic plan, no LLM.

It works from tool specs, not tool names it knows in advance: it fills each tool's parameters from
the object under inspection (kind, name, namespace, pod_name, service, trace_id, app_name, url...).
1. Locate the subject: inspect it where the incident says it is, search for it by name, and call
   the overview tools (status/health) and tools named after it.
2. Inspect what analyzers point at (leads): a workload's pods, a pod's PVC, the nodes when a node
   selector does not match, the slowest traces, the Argo CD app named like the subject...
3. Follow the topic of the alert or question (latency -> traces; scaling -> autoscalers; DNS -> network
   policies and Services; storage -> PVCs; a service down or unreachable -> its pods, Services and
   NetworkPolicies; quota/overcommit -> ResourceQuotas, LimitRanges and, with no namespace, each node's
   allocated resources; CPU -> pod CPU use against limits). A PromQL tool runs the alert's own
   expression and the query of its topic (params.TOPIC_QUERIES). An alert that names nothing starts
   from the cluster's nodes and the overviews.
4. Fall back: an object that is not where it was said to be is looked for in the other namespaces;
   a subject found nowhere is looked for in the listings of the overview tools.
5. Propose the standard fix of the top finding when the environment offers that action, then
   submit a diagnosis written from the findings.
"""

from __future__ import annotations

import heapq
import json
from dataclasses import dataclass, field
from typing import Any

from diagnostics import conf
from diagnostics.agent import rx
from diagnostics.agent.findings import ObjRef
from diagnostics.agent.investigation.budget import (
    answered_by_describe,
    checked_probes,
    family_of,
    sibling_weight,
    within_enums,
)
from diagnostics.agent.investigation.diagnosis import build_diagnosis
from diagnostics.agent.investigation.observer import (
    PROBE,
    PROPOSE,
    SUBMIT,
    Decision,
    InvestigationView,
    Observer,
)
from diagnostics.agent.investigation.params import (
    CLUSTER_KINDS,
    CLUSTER_TOPICS,
    DEFAULT_KINDS,
    GENERIC_TOKENS,
    K8S_KINDS,
    OVERVIEW_WORDS,
    TOPIC_LISTS,
    TOPIC_QUERIES,
    WORKLOAD_KINDS,
    enumerated_services,
    fill_action_args,
    fill_params,
    props_of,
    required_of,
    tool_weight,
)
from diagnostics.agent.request.names import namespaces_named


@dataclass(order=True)
class _Task:
    sort: tuple[int, int]
    tool: str = field(compare=False)
    params: dict[str, Any] = field(compare=False)
    purpose: str = field(compare=False)
    obj: ObjRef | None = field(compare=False, default=None)
    describe_only: bool = field(compare=False, default=False)


def _key(tool: str, params: dict[str, Any]) -> str:
    return f"{tool} {json.dumps(params, sort_keys=True, default=str)}"


class RulePlanner(Observer):
    mode = "analyzers"

    def __init__(self, *, max_iterations: int | None = None) -> None:
        self.max_iterations = max_iterations or conf.get().agent.max_probes
        self._heap: list[_Task] = []
        self._seq = 0
        self._done: set[str] = set()
        self._inspected: set[ObjRef] = set()
        self._families: set[tuple[str, str, str]] = set()  # pod templates read (budget.family_of)
        self._task_for: dict[str, _Task] = {}
        self._results: dict[ObjRef, list[bool]] = {}
        self._steps_seen = 0
        self._leads_seen = 0
        self._started = False
        self._topic_namespaces: set[str] = set()
        self._listed_namespaces = False
        self._relocated: set[ObjRef] = set()
        self._placed = False
        self._overview_done = False
        self._proposed = False
        self._top_read = False

    # -- queue ---------------------------------------------------------------------------------

    def _push(
        self,
        tool: str,
        params: dict[str, Any],
        priority: int,
        purpose: str,
        obj: ObjRef | None = None,
        *,
        describe_only: bool = False,
    ) -> None:
        key = _key(tool, params)
        if key in self._done or key in self._task_for:
            return
        self._seq += 1
        task = _Task((-priority, self._seq), tool, params, purpose, obj, describe_only)
        self._task_for[key] = task
        heapq.heappush(self._heap, task)

    def decide(self, view: InvestigationView) -> Decision:
        if not self._started:
            self._started = True
            self._start(view)
        self._digest(view)
        made = {_key(step.tool, step.params) for step in view.steps}  # by anyone (e.g. an LLM Observer)
        for _ in range(2):
            while self._heap:
                task = heapq.heappop(self._heap)
                key = _key(task.tool, task.params)
                if key in self._done or key in made:
                    self._done.add(key)
                    continue
                self._done.add(key)
                return Decision(PROBE, reason=task.purpose, tool=task.tool, params=task.params)
            if not self._fallbacks(view):
                break
        proposal = self._proposal(view)
        if proposal is not None:
            return proposal
        diagnosis = build_diagnosis(
            view.alert,
            view.findings,
            view.state,
            calls=len(view.steps),
            no_data=sum(1 for s in view.steps if s.no_data),
            proposed=[f"{a} {json.dumps(args, sort_keys=True)}" for a, args in view.proposed],
            checked=checked_probes(view),
        )
        return Decision(
            SUBMIT,
            reason="no more leads to follow",
            diagnosis=diagnosis.text,
            root_cause=diagnosis.root_cause,
        )

    # -- planning ------------------------------------------------------------------------------

    def _start(self, view: InvestigationView) -> None:
        alert, subject = view.alert, view.alert.subject
        for url in alert.runbook_urls:
            for spec in view.tools:
                if required_of(spec) == ["url"]:
                    self._push(spec.name, {"url": url}, 55, "read the alert's runbook")
        query_tools = [s for s in view.tools if required_of(s) == ["query"] and "range" not in s.name.lower()]
        for spec in query_tools:
            for query in alert.queries[:3]:
                self._push(spec.name, {"query": query}, 85, "the alert's own expression, now")
            for topic, query in TOPIC_QUERIES.items():
                if topic in alert.topics or (topic == "network" and not alert.queries):
                    self._push(spec.name, {"query": query}, 68, f"{topic}: the metrics that show it")
        for spec in view.tools:
            if not required_of(spec) and any(w in spec.name.lower() for w in OVERVIEW_WORDS):
                self._push(spec.name, {}, 65, "overview of the system's health")
        services = enumerated_services(view.tools)
        if services:
            # Tools that take a service from a closed list (the local lab): inspect the services the
            # incident names first, then every other one, so a vague report still gets localized.
            named = [n for n in subject.names if n in services]
            for i, name in enumerate([*named, *(s for s in services if s not in named)]):
                self._inspect(view, ObjRef("service", name), (95 if name in named else 60) - i)
            for spec in view.tools:  # a small system: every whole-system view (top, disk, events)
                if not required_of(spec):
                    self._push(spec.name, {}, 64, "whole-system view")
        elif subject.name:
            if not subject.namespace:  # the words may name one: the cluster's namespaces say which
                self._list(view, "namespace", "", 86, "the namespaces, to place the incident's words")
            if subject.namespace or subject.kind in CLUSTER_KINDS:
                kinds = [subject.kind] if subject.kind else ["deployment", "pod"]
                for i, kind in enumerate(kinds):
                    self._inspect(view, ObjRef(kind, subject.name, subject.namespace), 100 - 5 * i)
                if subject.kind == "service" and subject.namespace:
                    self._list(view, "pod", subject.namespace, 60, f"pods behind service {subject.name}")
                if subject.namespace:
                    # Warnings of the objects around the subject (its Service, claims, controllers).
                    self._list(
                        view, "event", subject.namespace, 35, f"events in namespace {subject.namespace}"
                    )
            else:
                # Environments whose tools take a service/process name rather than Kubernetes coordinates.
                self._inspect(view, ObjRef(subject.kind or "service", subject.name), 95)
            self._discover(view)
            self._named_tools(view)
        elif subject.namespace:
            for kind in ("deployment", "pod"):
                self._list(view, kind, subject.namespace, 85, "what runs in the namespace")
            self._list(view, "event", subject.namespace, 35, f"events in namespace {subject.namespace}")
        else:
            # Nothing named: the alert is about the cluster; start from its nodes and the overviews.
            self._list(view, "node", "", 80, "the cluster's nodes")
            for spec in view.tools:
                if not required_of(spec) and "top" in spec.name.lower():
                    self._push(spec.name, {}, 60, "resource use across the cluster")
        if alert.topics & {"cpu", "memory"}:
            for spec in view.tools:
                if not required_of(spec) and "top" in spec.name.lower() and "pod" in spec.name.lower():
                    self._push(spec.name, {}, 70, "cpu/memory: pod use against limits")
        if not subject.namespace and any(t in alert.topics for t in CLUSTER_TOPICS):
            self._list(view, "node", "", 70, "capacity: the nodes' allocated resources")
        if alert.topics & {"job", "schedule"} and subject.namespace and subject.kind in ("", "namespace"):
            # Work that did not run, in a namespace: what schedules it (suspended, late, failing).
            for kind in ("cronjob", "job"):
                self._list(view, kind, subject.namespace, 84, f"scheduled work in {subject.namespace}")
        self._topics(view, subject.namespace)

    def _discover(self, view: InvestigationView) -> None:
        subject = view.alert.subject
        finders = [s for s in view.tools if "keyword" in props_of(s)]
        kinds = [subject.kind] if subject.kind and subject.kind in K8S_KINDS else list(DEFAULT_KINDS)
        if subject.kind == "service":
            # A service alert (latency, errors, target down) is about the workload behind the Service,
            # which usually has its name; a Service object may not exist at all.
            kinds += [k for k in DEFAULT_KINDS if k != "job"]
        for n, name in enumerate(subject.names[:2]):
            for i, kind in enumerate(kinds):
                for spec in finders:
                    params: dict[str, Any] = {"keyword": name}
                    if "kind" in props_of(spec):
                        params["kind"] = kind
                    self._push(spec.name, params, 90 - i - 10 * n, f"find {kind} named like {name}")

    def _named_tools(self, view: InvestigationView) -> None:
        """Tools whose name mentions the subject or a technology the incident names (e.g. rabbitmq)."""
        words = {w for n in view.alert.subject.names for w in rx.split(r"[-_.]", n.lower()) if len(w) > 2}
        words |= {w for w in view.alert.words if len(w) > 3}
        words -= GENERIC_TOKENS
        subject = view.alert.subject
        for spec in view.tools:
            tokens = set(rx.split(r"[_\W]+", spec.name.lower())) - GENERIC_TOKENS
            if not tokens & words:
                continue
            if not required_of(spec):
                self._push(spec.name, {}, 75, "a tool named after the subject")
            else:
                params = fill_params(spec, ObjRef(subject.kind or "service", subject.name, subject.namespace))
                if params is not None:
                    self._push(spec.name, params, 75, "a tool named after the subject")

    def _topics(self, view: InvestigationView, namespace: str) -> None:
        topics = view.alert.topics
        if namespace and namespace not in self._topic_namespaces:
            self._topic_namespaces.add(namespace)
            for topic, kinds in TOPIC_LISTS.items():
                if topic in topics:
                    for kind in kinds:
                        self._list(view, kind, namespace, 70, f"{topic}: {kind} objects in {namespace}")
            if "dns" in topics:
                self._list(view, "pod", "kube-system", 40, "dns: the cluster DNS pods")
        if "latency" in topics and not namespace:
            for spec in view.tools:
                name = spec.name.lower()
                if not required_of(spec) and any(w in name for w in ("trace", "span", "latency", "tempo")):
                    self._push(spec.name, {}, 80, "latency: recent traces")
                elif not required_of(spec) and "top" in name:
                    self._push(spec.name, {}, 30, "latency: resource use")
        if "latency" in topics and namespace:
            self._topics(view, "")

    def _list(self, view: InvestigationView, kind: str, namespace: str, priority: int, purpose: str) -> None:
        for spec in view.tools:
            required = set(required_of(spec))
            if namespace and required == {"kind", "namespace"}:
                self._push(spec.name, {"kind": kind, "namespace": namespace}, priority, purpose)
                return
            if not namespace and required == {"kind"}:
                self._push(spec.name, {"kind": kind}, priority, purpose)
                return

    def _inspect(
        self, view: InvestigationView, obj: ObjRef, priority: int, *, describe_only: bool = False
    ) -> None:
        if obj in self._inspected and not describe_only:
            return
        sibling = False
        if not describe_only:
            self._inspected.add(obj)
            family = family_of(obj, view.state)
            sibling = family is not None and family in self._families  # waits behind other leads
            self._families.update([family] if family is not None else [])
        if obj.name == "*":
            self._list(
                view,
                obj.kind,
                obj.namespace if obj.kind not in CLUSTER_KINDS else "",
                priority,
                f"list {obj.kind}",
            )
            return
        for spec in view.tools:
            if "keyword" in props_of(spec):
                continue
            required = set(required_of(spec))
            if required in ({"kind"}, {"kind", "namespace"}):
                continue
            if describe_only and "describe" not in spec.name.lower():
                continue
            params = fill_params(spec, obj)
            if params is None or not within_enums(spec, params):
                continue
            weight = sibling_weight(spec.name, tool_weight(spec.name, obj.kind), sibling=sibling)
            if not weight:
                continue
            self._push(
                spec.name,
                params,
                priority * weight // 100,
                f"inspect {obj.label}",
                obj,
                describe_only=describe_only,
            )
        if obj.kind in WORKLOAD_KINDS and obj.namespace and not describe_only:
            self._list(view, "pod", obj.namespace, priority // 2, f"pods of {obj.label}")

    def _digest(self, view: InvestigationView) -> None:
        for step in view.steps[self._steps_seen :]:
            task = self._task_for.get(_key(step.tool, step.params))
            if task is None or task.obj is None:
                continue
            got = step.ok and not step.no_data and "not found" not in step.summary.lower()
            self._results.setdefault(task.obj, []).append(got)
            if not got and task.obj.namespace and task.obj.kind in ("pod", *WORKLOAD_KINDS):
                # An empty read of an object: its namespace's event listing holds its events too.
                self._list(view, "event", task.obj.namespace, 84, f"events of {task.obj.label}")
            if got:
                view.state.facts["data_about_subject"] = True
                if "describe" in step.tool.lower():  # its events and row are read: not again
                    same = [k for k, t in self._task_for.items() if t.obj == task.obj]
                    self._done.update(k for k in same if answered_by_describe(self._task_for[k].tool))
                if task.describe_only:
                    self._inspect(view, task.obj, 80)
        self._steps_seen = len(view.steps)
        for lead in view.state.leads[self._leads_seen :]:
            self._inspect(view, lead.obj, lead.priority)
            if lead.obj.namespace:
                self._topics(view, lead.obj.namespace)
        self._leads_seen = len(view.state.leads)
        self._place_in_namespaces(view)
        if not self._top_read and any(
            f.kind == "probe_failed" and rx.search(r"deadline exceeded|timeout", f.summary, rx.IGNORECASE)
            for f in view.findings
        ):
            # A probe that times out: the process answers too slowly; its CPU against the limit says why.
            self._top_read = True
            for spec in view.tools:
                if not required_of(spec) and "top" in spec.name.lower() and "pod" in spec.name.lower():
                    self._push(spec.name, {}, 72, "a probe times out: pod CPU use against limits")

    def _fallbacks(self, view: InvestigationView) -> bool:
        """Push more work when the queue ran dry; False when there is nothing left to try."""
        missing = [
            o
            for o, got in self._results.items()
            if got and not any(got) and o.namespace and o not in self._relocated and o.kind in K8S_KINDS
        ]
        if missing and not self._listed_namespaces:
            self._listed_namespaces = True
            before = len(self._heap)
            self._list(view, "namespace", "", 20, "list namespaces to find misplaced objects")
            if len(self._heap) > before:
                return True
        namespaces = sorted(view.state.fact_set("namespaces"))
        pushed = False
        for obj in missing:
            self._relocated.add(obj)
            for namespace in namespaces[:8]:
                moved = ObjRef(obj.kind, obj.name, namespace)
                self._relocated.add(moved)
                if namespace != obj.namespace and moved not in self._inspected:
                    self._inspect(view, moved, 60, describe_only=True)
                    pushed = True
        if pushed or self._place_in_namespaces(view):
            return True
        subject = view.alert.subject
        if subject.name and not self._overview_done and not view.state.facts.get("data_about_subject"):
            self._overview_done = True
            for spec in view.tools:
                if not required_of(spec):
                    self._push(spec.name, {}, 10, f"look for {subject.name} in the overview listings")
                    pushed = True
        return pushed

    def _place_in_namespaces(self, view: InvestigationView) -> bool:
        """A subject found nowhere, in no namespace: list what runs in the namespaces its words name."""
        alert, known = view.alert, view.state.fact_set("namespaces")
        found = any(any(got) for o, got in self._results.items() if o.name == alert.subject.name)
        if alert.subject.namespace or found or self._placed or not known:
            return False
        self._placed = True
        named = namespaces_named(f"{alert.title}\n{alert.text}", known)
        for namespace in named[:2]:
            for kind, priority in (("deployment", 87), ("pod", 87), ("event", 86)):
                self._list(view, kind, namespace, priority, f"{kind} objects in {namespace}, named")
            self._topics(view, namespace)
        return bool(named)

    def _proposal(self, view: InvestigationView) -> Decision | None:
        if self._proposed or not view.actions:
            return None
        self._proposed = True
        problems = sorted((f for f in view.findings if f.is_problem and f.remedy), key=lambda f: -f.rank)
        by_name = {a.name: a for a in view.actions}
        for finding in problems[:5]:
            assert finding.remedy is not None
            for candidate in finding.remedy.actions:
                spec = by_name.get(candidate) or next(
                    (a for a in view.actions if candidate in a.name.lower()), None
                )
                if spec is None:
                    continue
                args = fill_action_args(spec, finding)
                # A target the action cannot take (e.g. an address, not one of its services): next.
                if args is None or not within_enums(spec, args):
                    continue
                return Decision(
                    PROPOSE,
                    reason=f"{finding.remedy.description or spec.name}: {finding.summary}",
                    action=spec.name,
                    args=args,
                )
        return None
