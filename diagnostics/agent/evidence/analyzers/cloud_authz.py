"""A controller the cloud refuses: its calls are denied by the provider's IAM, named in an event.

Controllers that act on the cloud (CSI drivers provisioning disks, load balancer controllers, the cluster
autoscaler, external-dns) call the provider's API with some identity. The provider says which identity
and which action it refused: AWS "User: arn:aws:sts::<account>:assumed-role/<role>/<session> is not
authorized to perform: ec2:CreateVolume" (UnauthorizedOperation, AccessDenied), GCP "Required
'compute.disks.create' permission", Azure "does not have authorization to perform action '<action>'"
(AuthorizationFailed). An assumed role whose session is an EC2 instance id (``i-...``) is the node's
instance role: the controller found no credentials of its own (its ServiceAccount's IRSA role annotation
missing or not projected) and fell back to the node's, which rarely has the controller's permissions.

Read from events (a PVC's ProvisioningFailed, a Service's SyncLoadBalancerFailed) and logs; the objects
waiting on it (a pod Pending on an unbound claim) come from the same namespace's events.
"""

from __future__ import annotations

from typing import Any

from diagnostics.agent import rx
from diagnostics.agent.evidence.analyzers.base import (
    AnalysisState,
    ToolOutput,
    clip,
    parse_events,
    register,
)
from diagnostics.agent.evidence.analyzers.once import OnceAnalyzer
from diagnostics.agent.findings import Finding, ObjRef, Severity

_AWS = rx.compile(
    r"User: (arn:aws:(?:sts|iam)::\d+:(?:assumed-role|role|user)/([\w+=,.@\-]+)(?:/([\w+=,.@\-]+))?) is not "
    r"authorized to perform:? ([\w:*\-]+)"
)
_GCP = rx.compile(r"Required '([\w.]+)' permission|Permission '([\w.]+)' denied")
_AZURE = rx.compile(r"does not have authorization to perform action '([^']+)'")
_CODE = rx.compile(
    r"\b(UnauthorizedOperation|AccessDenied\w*|AuthorizationFailed|PERMISSION_DENIED|Forbidden)\b"
)
_PROVISIONER = rx.compile(r"provisioner '([\w.\-]+)'")
_UNBOUND = rx.compile(r"(?i)unbound (?:immediate )?PersistentVolumeClaims")


def _driver(name: str) -> str:
    """'ebs.csi.aws.com' -> 'the EBS CSI driver (ebs.csi.aws.com)'."""
    if ".csi." in name:
        return f"the {name.split('.', 1)[0].upper()} CSI driver ({name})"
    return f"the provisioner {name}" if name else "the controller"


@register
class CloudAuthzAnalyzer(OnceAnalyzer):
    name = "cloud_authz"

    def applies(self, out: ToolOutput) -> bool:
        return not out.is_log

    def gather(self, out: ToolOutput, state: AnalysisState, facts: dict[str, Any], namespace: str) -> None:
        for event in parse_events(out.text):
            if provisioner := _PROVISIONER.search(event.message):
                facts["provisioner"] = provisioner.group(1)
            if _UNBOUND.search(event.message) and event.obj:
                facts.setdefault("waiting", []).append(event.obj.rsplit("/", 1)[-1])
            if "denied" in facts:
                continue
            denial = _denial(event.message)
            if denial is not None:
                facts["denied"] = {**denial, "obj": event.obj, "reason": event.reason, "namespace": namespace}
                facts["line"] = event.message
                if namespace:
                    state.lead(ObjRef("event", "*", namespace), "what waits on the refused call", 70)

    def conclude(self, facts: dict[str, Any]) -> list[Finding]:
        return [_finding(facts)] if "denied" in facts else []


def _denial(message: str) -> dict[str, str] | None:
    code = _CODE.search(message)
    if aws := _AWS.search(message):
        return {
            "cloud": "AWS",
            "principal": aws.group(2),
            "session": aws.group(3) or "",
            "action": aws.group(4),
            "code": code.group(1) if code else "AccessDenied",
        }
    if gcp := _GCP.search(message):
        return {
            "cloud": "GCP",
            "principal": "",
            "session": "",
            "action": gcp.group(1) or gcp.group(2),
            "code": "PERMISSION_DENIED",
        }
    if azure := _AZURE.search(message):
        return {
            "cloud": "Azure",
            "principal": "",
            "session": "",
            "action": azure.group(1),
            "code": "AuthorizationFailed",
        }
    return None


def _finding(facts: dict[str, Any]) -> Finding:
    denied: dict[str, str] = facts["denied"]
    kind, _, name = denied["obj"].partition("/")
    who = _driver(str(facts.get("provisioner") or ""))
    waiting = [p for p in dict.fromkeys(facts.get("waiting") or []) if p]
    what = f"its {kind} {name}" if name else "what it manages"
    lead = (
        f"Pod {', '.join(waiting[:3])} is Pending because its PVC {name} is never provisioned: "
        if kind.lower() == "persistentvolumeclaim" and waiting
        else f"{denied['reason']} on {denied['obj'] or 'an object'}: "
    )
    text = (
        f"{lead}{who} gets {denied['code']} from {denied['cloud']}: it is not authorized to perform "
        f"{denied['action']} ({what})"
    )
    if denied["principal"]:
        text += f". It calls {denied['cloud']} as {denied['principal']}"
        if rx.match(r"i-[0-9a-f]{8,}$", denied["session"]):
            text += (
                f", assumed by the node instance {denied['session']}: the node group's instance role, which "
                "is not allowed to do it, instead of the controller's own IAM role (its ServiceAccount's "
                "role, IRSA)"
            )
    text += f". '{clip(str(facts['line']), 220)}'"
    return Finding(
        "cloud_call_denied",
        clip(text, 900),
        Severity.CRITICAL,
        f"{denied['obj']}" if denied["obj"] else "cloud",
        clip(str(facts["line"])),
        92,
        f"Give the controller its own identity with {denied['action']} (the IRSA role annotation on its "
        "ServiceAccount, then restart it), or grant the action to the identity it uses.",
    )
