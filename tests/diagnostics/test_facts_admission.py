"""Issue 39, round four: causes that event messages and annotations name themselves (admission webhooks,
CNI address exhaustion, missing references by their kind, 401 pulls, LimitRange defaults) and an Ingress
whose Service is absent from its namespace's listing. Names appear in no case."""

from __future__ import annotations

from diagnostics.agent.evidence.analyzers import AnalysisState, ToolOutput, analyze
from diagnostics.agent.request.subject import AlertContext, from_text
from tests.support.findings import findings_of


def _rs(message: str) -> str:
    return f"""Name:           mill-55f
Namespace:      granary
Replicas:       0 current / 1 desired
Events:
  Type     Reason        Age               From                   Message
  ----     ------        ----              ----                   -------
  Warning  FailedCreate  1m (x9 over 9m)   replicaset-controller  {message}
"""


def _pod(node: str, reason: str, message: str, extra: str = "") -> str:
    return f"""Name:             mill-55f-abcde
Namespace:        granary
Node:             {node}
Status:           Pending
{extra}Containers:
  mill:
    Image:          registry.example/mill:1
    State:          Waiting
      Reason:       ContainerCreating
    Ready:          False
    Restart Count:  0
Events:
  Type     Reason   Age              From     Message
  ----     ------   ----             ----     -------
  Warning  {reason}  1m (x9 over 9m)  kubelet  {message}
"""


def _describe(text: str, kind: str = "pod", name: str = "mill-55f-abcde"):  # type: ignore[no-untyped-def]
    state = AnalysisState(AlertContext())
    out = ToolOutput("kubectl_describe", {"kind": kind, "name": name, "namespace": "granary"}, text)
    state.record(out)
    return analyze(out, state)


def test_a_webhook_that_cannot_be_called_is_the_cause_and_names_its_service():
    found = _describe(
        _rs(
            'Error creating: Internal error occurred: failed calling webhook "grain.hooks.example": failed '
            'to call webhook: Post "https://grain-hook.hooks.svc:443/check?timeout=10s": no endpoints '
            'available for service "grain-hook"'
        ),
        "replicaset",
        "mill-55f",
    )
    hook = [f for f in found if f.kind == "admission_webhook_unavailable"]
    assert hook and "admission webhook grain.hooks.example" in hook[0].summary
    assert "Service grain-hook in namespace hooks has no endpoints" in hook[0].summary
    assert hook[0].rank > max(f.rank for f in found if f is not hook[0])


def test_a_webhook_that_denies_says_its_reason():
    found = _describe(
        _rs(
            'Error creating: admission webhook "policy.example" denied the request: tag latest is not allowed'
        ),
        "replicaset",
        "mill-55f",
    )
    denied = [f for f in found if f.kind == "admission_webhook_denied"]
    assert denied and "tag latest is not allowed" in denied[0].summary


def test_a_missing_service_account_blocks_pod_creation_and_is_spelled_as_its_kind():
    found = _describe(
        _rs(
            'Error creating: pods "mill-55f-" is forbidden: error looking up service account '
            'granary/miller: serviceaccount "miller" not found'
        ),
        "replicaset",
        "mill-55f",
    )
    missing = [f for f in found if f.kind == "missing_reference"]
    assert missing and "cannot create pods" in missing[0].summary
    assert "ServiceAccount miller, which does not exist" in missing[0].summary
    assert not [f for f in found if f.kind == "create_forbidden"]


def test_a_missing_configmap_volume_keeps_the_pod_creating_and_names_the_volume():
    found = _describe(
        _pod(
            "barn-2/10.0.0.2",
            "FailedMount",
            'MountVolume.SetUp failed for volume "recipes" : configmap "mill-recipes" not found',
        )
    )
    missing = [f for f in found if f.kind == "missing_reference"]
    assert missing and "stays in ContainerCreating: its volume recipes mounts ConfigMap mill-recipes" in (
        missing[0].summary
    )


def test_an_exhausted_pod_ip_range_is_named_with_its_node():
    found = _describe(
        _pod(
            "barn-2/10.0.0.2",
            "FailedCreatePodSandBox",
            "Failed to create pod sandbox: rpc error: code = Unknown desc = failed to setup network for "
            "sandbox "
            '"abc": plugin type="bridge" failed (add): failed to allocate for range 0: no IP addresses '
            "available in range set: 10.9.1.1-10.9.1.254",
        )
    )
    ips = [f for f in found if f.kind == "pod_ips_exhausted"]
    assert ips and "on node barn-2" in ips[0].summary and "10.9.1.1-10.9.1.254" in ips[0].summary


def test_another_sandbox_failure_keeps_its_message():
    found = _describe(
        _pod("barn-2/10.0.0.2", "FailedCreatePodSandBox", "Failed to create pod sandbox: plugin timed out")
    )
    assert [f.kind for f in found if f.kind.startswith(("sandbox", "pod_ips"))] == ["sandbox_failed"]


def test_a_401_pull_says_unauthorized_and_that_the_pod_has_no_pull_secrets():
    message = (
        'Failed to pull image "reg.example/mill:1": failed to resolve reference "reg.example/mill:1": pull '
        "access denied, repository does not exist or may require authorization: authorization failed: "
        "no basic auth credentials: 401 Unauthorized"
    )
    text = _pod("barn-2/10.0.0.2", "Failed", message).replace(
        "Events:", "Image Pull Secrets:  <none>\nEvents:"
    )
    pull = [f for f in _describe(text) if f.kind == "image_pull"]
    assert pull and "401 Unauthorized" in pull[0].summary and "no imagePullSecrets" in pull[0].summary


def test_a_pull_of_a_missing_tag_is_not_called_unauthorized():
    message = 'Failed to pull image "reg.example/mill:9": reg.example/mill:9: not found'
    pull = [f for f in _describe(_pod("barn-2", "Failed", message)) if f.kind == "image_pull"]
    assert pull and "does not exist" in pull[0].summary and "401" not in pull[0].summary


SET = "LimitRanger plugin set: memory request for container mill; memory limit for container mill"
OOM_POD = f"""Name:             mill-55f-abcde
Namespace:        granary
Annotations:      kubernetes.io/limit-ranger: {SET}
Status:           Running
Containers:
  mill:
    State:          Waiting
      Reason:       CrashLoopBackOff
    Last State:     Terminated
      Reason:       OOMKilled
      Exit Code:    137
    Ready:          False
    Restart Count:  4
    Limits:
      memory:  32Mi
Events:           <none>
"""


def test_an_oom_at_a_limit_a_limitrange_defaulted_names_the_limitrange():
    state = AnalysisState(AlertContext())
    params = {"kind": "pod", "name": "mill-55f-abcde", "namespace": "granary"}
    out = ToolOutput("kubectl_describe", params, OOM_POD)
    state.record(out)
    analyze(out, state)
    lead = [lead.obj for lead in state.leads if lead.obj.kind == "limitrange"]
    assert lead and lead[0].name == "*" and lead[0].namespace == "granary"
    listing = ToolOutput(
        "kubectl_get_by_kind_in_namespace",
        {"kind": "limitrange", "namespace": "granary"},
        "NAME          CREATED AT\nsmall-bins    2030-01-01T00:00:00Z\n",
    )
    state.record(listing)
    found = [f for f in analyze(listing, state) if f.kind == "limitrange_default_oom"]
    assert found and "the LimitRange small-bins default gave it" in found[0].summary
    assert "memory limit of 32Mi it never set" in found[0].summary


def test_an_oom_at_a_limit_the_container_set_itself_does_not_blame_a_limitrange():
    text = OOM_POD.replace(f"Annotations:      kubernetes.io/limit-ranger: {SET}\n", "")
    found, state = findings_of(text, params={"kind": "pod", "name": "mill-55f-abcde", "namespace": "granary"})
    assert not [lead for lead in state.leads if lead.obj.kind == "limitrange"]
    assert "oom_killed" in {f.kind for f in found}


INGRESS = """Name:             granary-web
Namespace:        granary
Ingress Class:    nginx
Rules:
  Host              Path  Backends
  ----              ----  --------
  granary.example
                    /   silo-web:80 (<error: endpoints "silo-web" not found>)
Events:           <none>
"""


def test_an_ingress_backend_absent_from_the_service_listing_is_a_missing_service():
    state = AnalysisState(from_text("granary-web returns 503"))
    out = ToolOutput("kubectl_describe", {"kind": "ingress", "name": "granary-web"}, INGRESS)
    state.record(out)
    analyze(out, state)
    listing = ToolOutput(
        "kubectl_get_by_kind_in_namespace",
        {"kind": "service", "namespace": "granary"},
        "NAME   TYPE        CLUSTER-IP   PORT(S)   AGE\nsilo   ClusterIP   10.9.0.1     80/TCP    1d\n",
    )
    state.record(listing)
    found = [f for f in analyze(listing, state) if f.kind == "ingress_service_missing"]
    assert (
        found and "Service silo-web (port 80), which does not exist in namespace granary" in found[0].summary
    )
    assert "(it has silo)" in found[0].summary


def test_an_ingress_backend_whose_service_is_listed_is_not_called_missing():
    state = AnalysisState(from_text("granary-web returns 503"))
    out = ToolOutput("kubectl_describe", {"kind": "ingress", "name": "granary-web"}, INGRESS)
    state.record(out)
    analyze(out, state)
    listing = ToolOutput(
        "kubectl_get_by_kind_in_namespace",
        {"kind": "service", "namespace": "granary"},
        "NAME       TYPE        PORT(S)   AGE\nsilo-web   ClusterIP   81/TCP    1d\n",
    )
    state.record(listing)
    assert not [f for f in analyze(listing, state) if f.kind == "ingress_service_missing"]


def test_nodes_short_of_memory_and_tainted_nodes_are_told_apart():
    message = (
        "0/4 nodes are available: 1 node(s) had untolerated taint {lane: slow}, 3 Insufficient memory. "
        "preemption: 0/4 nodes are available: 4 Preemption is not helpful for scheduling."
    )
    found = _describe(_pod("<none>", "FailedScheduling", message).replace("kubelet", "default-scheduler"))
    taint = [f for f in found if f.kind == "untolerated_taint"]
    assert taint and "3 node(s) lack free memory; the other 1 node(s) carry the taint lane=slow" in (
        taint[0].summary
    )
    assert "no node has enough free memory" not in taint[0].summary


DEPLOYMENT = """Name:                   mill
Namespace:              granary
Replicas:               2 desired | 1 updated | 3 total | 2 available | 1 unavailable
Conditions:
  Type           Status  Reason
  ----           ------  ------
  Available      True    MinimumReplicasAvailable
  Progressing    False   ProgressDeadlineExceeded
OldReplicaSets:  mill-41a (2/2 replicas created)
NewReplicaSet:   mill-55f (1/1 replicas created)
Events:          <none>
"""


def test_a_rollout_past_its_deadline_is_chained_to_why_its_new_pods_fail():
    state = AnalysisState(AlertContext())
    first = ToolOutput(
        "kubectl_describe", {"kind": "deployment", "name": "mill", "namespace": "granary"}, DEPLOYMENT
    )
    state.record(first)
    assert not [f for f in analyze(first, state) if f.kind == "rollout_blocked"]
    probe = "Readiness probe failed: HTTP probe failed with statuscode: 502"
    text = _pod("barn-2", "Unhealthy", probe).replace("ContainerCreating", "Running")
    pod = ToolOutput(
        "kubectl_describe", {"kind": "pod", "name": "mill-55f-abcde", "namespace": "granary"}, text
    )
    state.record(pod)
    found = analyze(pod, state)
    chain = [f for f in found if f.kind == "rollout_blocked"]
    assert chain and "rollout of Deployment mill is stuck (ProgressDeadlineExceeded)" in chain[0].summary
    assert "statuscode: 502" in chain[0].summary
    assert chain[0].rank > max(f.rank for f in found if f is not chain[0])


def test_a_pod_of_an_old_replicaset_does_not_explain_a_stuck_rollout():
    state = AnalysisState(AlertContext())
    first = ToolOutput(
        "kubectl_describe", {"kind": "deployment", "name": "mill", "namespace": "granary"}, DEPLOYMENT
    )
    state.record(first)
    analyze(first, state)
    text = _pod("barn-2", "Unhealthy", "Readiness probe failed: timeout").replace(
        "mill-55f-abcde", "mill-41a-abcde"
    )
    pod = ToolOutput(
        "kubectl_describe", {"kind": "pod", "name": "mill-41a-abcde", "namespace": "granary"}, text
    )
    state.record(pod)
    assert not [f for f in analyze(pod, state) if f.kind == "rollout_blocked"]


def test_an_alert_naming_its_object_only_by_name_gets_the_kind_its_alertname_spells():
    from diagnostics.agent.request.subject import subject_from_labels

    cert = subject_from_labels({"alertname": "GrainCertNotReady", "namespace": "granary", "name": "silo-tls"})
    assert (cert.kind, cert.name, cert.namespace) == ("certificate", "silo-tls", "granary")
    claim = subject_from_labels(
        {"alertname": "KubePersistentVolumeClaimStuck", "namespace": "g", "name": "c"}
    )
    assert claim.kind == "persistentvolumeclaim"
    assert subject_from_labels({"alertname": "TargetDown", "namespace": "g", "name": "c"}).kind == ""


def test_a_custom_resource_subject_is_described_like_a_kubernetes_object():
    from diagnostics.agent.findings import ObjRef
    from diagnostics.agent.investigation.params import fill_params
    from diagnostics.toolsets.base import ToolSpec

    spec = ToolSpec(
        "kubectl_describe",
        "describe",
        {
            "type": "object",
            "properties": {"kind": {}, "name": {}, "namespace": {}},
            "required": ["kind", "name"],
        },
    )
    got = fill_params(spec, ObjRef("certificate", "silo-tls", "granary"))
    assert got is not None and got["kind"] == "certificate" and got["name"] == "silo-tls"
