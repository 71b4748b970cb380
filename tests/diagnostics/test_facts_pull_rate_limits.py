"""Pods that cannot pull their image because the registry rate-limits pulls (issue 39, round eight): the
kubelet's pull events in several registries' wordings, the pod and node listings (new nodes fail, old
nodes run), the service account's pull secrets; over when the listing shows the pods running. Names
appear in no case."""

from __future__ import annotations

from diagnostics.agent.evidence.analyzers import AnalysisState, ToolOutput, analyze
from diagnostics.agent.evidence.analyzers.pull_rate_limits import age_seconds, registry_of
from diagnostics.agent.findings import Finding
from diagnostics.agent.request.subject import AlertContext

_DESCRIBE = """Name:             ledger-55f6c7d8e9-aaaaa
Namespace:        money
Service Account:  ledger
Node:             node-new-1/10.1.0.9
Start Time:       Tue, 02 Mar 2027 07:10:00 +0000
Status:           Pending
Events:
  Type     Reason            Age               From                Message
  ----     ------            ----              ----                -------
  Normal   TriggeredScaleUp  12m               cluster-autoscaler  pod triggered scale-up: [{pool-a 3->5}]
  Warning  Failed            8m (x3 over 10m)  kubelet             Failed to pull image \
"library/redis:7.2.4": Error response from daemon: toomanyrequests: You have reached your pull rate limit. \
You may increase the limit by authenticating and upgrading: https://www.docker.com/increase-rate-limit
"""
_PODS = """NAME                      READY   STATUS             RESTARTS   AGE   IP          NODE
ledger-55f6c7d8e9-aaaaa   0/1     ImagePullBackOff   0          10m   10.1.0.20   node-new-1
ledger-55f6c7d8e9-bbbbb   0/1     ErrImagePull       0          10m   10.1.0.21   node-new-2
ledger-55f6c7d8e9-ccccc   1/1     Running            0          9d    10.1.0.22   node-old-1
other-6b7c8d9e0f-ddddd    0/1     ImagePullBackOff   0          3m    10.1.0.23   node-old-1
"""
_NODES = """NAME         STATUS   ROLES    AGE   VERSION
node-new-1   Ready    <none>   11m   v1.30.1
node-new-2   Ready    <none>   11m   v1.30.1
node-old-1   Ready    <none>   60d   v1.30.1
"""
_SA = """Name:                ledger
Namespace:           money
Image pull secrets:  <none>
Mountable secrets:   <none>
"""


def _run(*outs: ToolOutput) -> list[Finding]:
    state = AnalysisState(AlertContext())
    found: list[Finding] = []
    for out in outs:
        found += analyze(out, state)
    return [f for f in found if f.kind == "pull_rate_limited"]


def _out(text: str, tool: str = "kubectl_describe") -> ToolOutput:
    return ToolOutput(tool, {"namespace": "money"}, text)


def test_new_nodes_fail_to_pull_anonymously_while_old_nodes_run():
    (finding,) = _run(_out(_DESCRIBE), _out(_SA), _out(_PODS, "list"), _out(_NODES, "list"))
    # Now is the pod's start plus its listed age (07:20); the new nodes are 11 minutes old.
    assert finding.summary.startswith(
        "The two ledger pods on the nodes the cluster autoscaler added at 07:09 (node-new-1, node-new-2) "
        "cannot pull library/redis:7.2.4: Docker Hub answers 429 toomanyrequests, its pull rate limit "
        "(no imagePullSecrets on the pod template or its service account)."
    )
    assert (
        "The one running pods are on older nodes (node-old-1) that already had the image" in finding.summary
    )
    assert not finding.history and finding.rank > 90


def test_ecr_public_wording_from_the_event_listing_with_pull_secrets_and_no_clock():
    events = """LAST SEEN   TYPE      REASON   OBJECT                        MESSAGE
4m          Warning   Failed   pod/ledger-55f6c7d8e9-bbbbb   Failed to pull image \
"public.ecr.aws/acme/ledger:2.0": rpc error: code = Unknown desc = failed to pull and unpack image: \
unexpected status from GET request to https://public.ecr.aws/v2/acme/ledger/manifests/2.0: \
429 Too Many Requests toomanyrequests: Rate exceeded
"""
    with_secret = _SA.replace("Image pull secrets:  <none>", "Image pull secrets:  ecr-public")
    (finding,) = _run(_out(events, "list"), _out(with_secret), _out(_PODS, "list"), _out(_NODES, "list"))
    assert "cannot pull public.ecr.aws/acme/ledger:2.0: ECR Public answers 429" in finding.summary
    assert "were added 11 min before this read (node-new-1, node-new-2)" in finding.summary
    assert "imagePullSecrets" not in finding.summary


def test_a_quay_refusal_without_listings_is_stated_after_a_few_reads():
    crio = _DESCRIBE.replace(
        'Failed to pull image "library/redis:7.2.4": Error response from daemon:',
        'Failed to pull image "quay.io/acme/ledger:1.4": reading manifest 1.4 in quay.io/acme/ledger:',
    ).replace("toomanyrequests: You have reached your pull rate limit.", "TOOMANYREQUESTS: slow down.")
    other = _out("nothing here", "list")
    assert _run(_out(crio)) == []
    (finding,) = _run(_out(crio), other, other, other, other, other)
    assert "cannot pull quay.io/acme/ledger:1.4: Quay answers 429 toomanyrequests" in finding.summary


def test_pods_all_running_again_make_it_history():
    healed = _PODS.replace("ImagePullBackOff   0          10m", "Running            0          10m")
    healed = healed.replace("ErrImagePull       0", "Running            0")
    (finding,) = _run(_out(_DESCRIBE), _out(healed, "list"), _out(_NODES, "list"))
    assert finding.history and finding.rank < 50 and "It is over" in finding.summary


def test_a_missing_tag_or_an_application_429_is_no_rate_limit():
    missing = _DESCRIBE.replace(
        "Error response from daemon: toomanyrequests: You have reached your pull rate limit.",
        "manifest unknown: manifest unknown.",
    ).replace("You may increase the limit by authenticating and upgrading: ", "")
    missing = missing.replace("https://www.docker.com/increase-rate-limit", "")
    assert _run(_out(missing), _out(_PODS, "list"), _out(_NODES, "list")) == []
    app = "2027-03-02T07:00:00Z WARN upstream answered 429 Too Many Requests, retrying\n"
    assert _run(ToolOutput("fetch_pod_logs", {"pod_name": "x"}, app), _out(_PODS, "list")) == []


def test_helpers():
    assert age_seconds("3h12m") == 3 * 3600 + 12 * 60 and age_seconds("41d") == 41 * 86400
    assert age_seconds("<none>") is None
    assert registry_of("nginx:1.27", "") == "Docker Hub"
    assert registry_of("registry.corp:5000/app:1", "") == "registry.corp:5000"
