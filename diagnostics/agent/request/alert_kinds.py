"""The kind an alert's name says, for series that name their object only in a ``name`` label.

Prometheus alert names conventionally spell the object they are about in CamelCase
(``KubeDeploymentReplicasMismatch``, ``KubePersistentVolumeClaimPending``); an operator's exporter often
uses the kind's short name as ``kubectl api-resources`` lists it (cert-manager's Certificate is ``cert``).
The longest run of the name's words that is a kind, a plural or a short name wins; none: ''.
"""

from __future__ import annotations

from diagnostics.agent import rx

# Kinds and their api-resources short names: built-in ones and those of widely installed operators.
_KINDS = {
    "pod": "pod",
    "po": "pod",
    "deployment": "deployment",
    "deploy": "deployment",
    "statefulset": "statefulset",
    "sts": "statefulset",
    "daemonset": "daemonset",
    "ds": "daemonset",
    "replicaset": "replicaset",
    "job": "job",
    "cronjob": "cronjob",
    "cj": "cronjob",
    "service": "service",
    "svc": "service",
    "ingress": "ingress",
    "ing": "ingress",
    "persistentvolumeclaim": "persistentvolumeclaim",
    "pvc": "persistentvolumeclaim",
    "persistentvolume": "persistentvolume",
    "pv": "persistentvolume",
    "horizontalpodautoscaler": "horizontalpodautoscaler",
    "hpa": "horizontalpodautoscaler",
    "poddisruptionbudget": "poddisruptionbudget",
    "pdb": "poddisruptionbudget",
    "certificate": "certificate",
    "cert": "certificate",
    "certificaterequest": "certificaterequest",
    "issuer": "issuer",
    "clusterissuer": "clusterissuer",
    "scaledobject": "scaledobject",
    "kustomization": "kustomization",
    "helmrelease": "helmrelease",
}
# Kinds of custom resources (their objects are read like any Kubernetes object's).
CUSTOM_KINDS = frozenset(
    {
        "certificate",
        "certificaterequest",
        "issuer",
        "clusterissuer",
        "scaledobject",
        "kustomization",
        "helmrelease",
        "externalsecret",
        "secretstore",
        "clustersecretstore",
        # progressive delivery (Argo Rollouts), the Prometheus operator, Istio's security and traffic
        "rollout",
        "analysisrun",
        "analysistemplate",
        "servicemonitor",
        "podmonitor",
        "prometheus",
        "peerauthentication",
        "destinationrule",
    }
)
_WORD = rx.compile(r"[A-Z][a-z]+|[A-Z]+|[a-z]+|\d+")


def kind_from_alertname(alertname: str) -> str:
    words = [w.lower() for w in _WORD.findall(alertname)]
    best = ""
    best_len = 0
    for start in range(len(words)):
        for end in range(len(words), start, -1):
            joined = "".join(words[start:end])
            kind = _KINDS.get(joined) or (_KINDS.get(joined[:-1]) if joined.endswith("s") else None)
            if kind and end - start > best_len:
                best, best_len = kind, end - start
                break
    return best
