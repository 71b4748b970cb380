"""Secrets that another controller writes, and why it does not: External Secrets Operator's status.

A Secret a pod needs may not be written by people but synced by a controller from an outside store:
an ``ExternalSecret`` (external-secrets.io) names a ``SecretStore``/``ClusterSecretStore`` and the remote
keys; its status condition ``Ready`` says whether the last sync worked (reasons ``SecretSynced``,
``SecretSyncedError``, ``SecretDeleted``) and the message carries the provider's error. While it fails,
its target Secret is never created (creationPolicy Owner) and every pod that references it stays in
``CreateContainerConfigError``. The store's own ``Ready`` condition tells a store that cannot be reached
from a key that is missing in a reachable store.
"""

from __future__ import annotations

from typing import Any

from diagnostics.agent import rx
from diagnostics.agent.evidence.analyzers.base import AnalysisState, Analyzer, ToolOutput, clip, register
from diagnostics.agent.evidence.analyzers.kubernetes.manifests import manifest_of
from diagnostics.agent.findings import Finding, ObjRef, Severity

_MISSING_SECRET = rx.compile(r"secrets? \"([a-z0-9][-a-z0-9.]*)\" not found", rx.IGNORECASE)
_NAMESPACE = rx.compile(r"^Namespace:\s+(\S+)", rx.MULTILINE)
_STORES = ("SecretStore", "ClusterSecretStore")
_NOT_THERE = rx.compile(r"does not exist|not found|no such|404|NoSuchKey|ResourceNotFound", rx.IGNORECASE)


def _get(obj: Any, *keys: str) -> Any:
    for key in keys:
        obj = obj.get(key) if isinstance(obj, dict) else None
    return obj


def _ready(status: Any) -> dict[str, Any] | None:
    conditions = _get(status, "conditions") or []
    return next((c for c in conditions if isinstance(c, dict) and c.get("type") == "Ready"), None)


@register
class SecretSourceAnalyzer(Analyzer):
    name = "secret_sources"

    def applies(self, out: ToolOutput) -> bool:
        return "not found" in out.text or "external-secrets.io" in out.text

    def analyze(self, out: ToolOutput, state: AnalysisState) -> list[Finding]:
        obj = manifest_of(out.text) if "external-secrets.io" in out.text else None
        if obj is None:
            self._lead_producers(out, state)
            return []
        kind = str(obj.get("kind"))
        if kind in _STORES:
            return self._store(obj, state)
        if kind == "ExternalSecret":
            return self._external_secret(obj, state)
        return []

    @staticmethod
    def _lead_producers(out: ToolOutput, state: AnalysisState) -> None:
        """A Secret that does not exist: the ExternalSecret of that name (if any) says why."""
        namespace = str(out.params.get("namespace") or "")
        if not namespace and (found := _NAMESPACE.search(out.text)):
            namespace = found.group(1)
        for name in dict.fromkeys(m.group(1) for m in _MISSING_SECRET.finditer(out.text)):
            state.fact_dict("missing_secrets")[name] = namespace
            if namespace:
                state.lead(ObjRef("externalsecret", name, namespace), f"who should write Secret {name}", 65)

    @staticmethod
    def _external_secret(obj: dict[str, Any], state: AnalysisState) -> list[Finding]:
        name = str(_get(obj, "metadata", "name") or "")
        namespace = str(_get(obj, "metadata", "namespace") or "")
        ready = _ready(obj.get("status"))
        if ready is None or str(ready.get("status")) == "True":
            return []
        reason = str(ready.get("reason") or "not Ready")
        message = str(ready.get("message") or "")
        store_kind = str(_get(obj, "spec", "secretStoreRef", "kind") or "SecretStore")
        store = str(_get(obj, "spec", "secretStoreRef", "name") or "")
        target = str(_get(obj, "spec", "target", "name") or name)
        keys = [
            str(_get(item, "remoteRef", "key"))
            for item in (_get(obj, "spec", "data") or [])
            if isinstance(item, dict) and _get(item, "remoteRef", "key")
        ]
        keys += [
            str(_get(item, "extract", "key"))
            for item in (_get(obj, "spec", "dataFrom") or [])
            if _get(item, "extract", "key")
        ]
        failing = state.fact_dict("failing_external_secrets")
        failing[f"{store_kind}/{store}"] = (name, keys, message)
        provider = str(state.fact_dict("secret_store_providers").get(f"{store_kind}/{store}") or "")
        where = f"the {provider} store {store}" if provider else f"the store {store}"
        # The key the provider's message names; never one guessed from the list it reads.
        missing = next((k for k in keys if k in message), "")
        if missing and _NOT_THERE.search(message):
            cause = f"the key {missing} does not exist in {where}"
        elif keys and _NOT_THERE.search(message):
            cause = (
                f"one of the keys it reads ({', '.join(keys)}) is not in {where}, which the provider's "
                f"answer does not name: {clip(message, 200)}"
            )
        else:
            cause = f"{where} answers: {clip(message, 240)}"
        seen = target in state.fact_dict("missing_secrets")
        effect = (
            f"so Secret {target} is never created and the pods that use it fail with "
            f'CreateContainerConfigError (secret "{target}" not found)'
            if seen
            else f"so Secret {target} is never created and a pod that uses it cannot start (no pod's error "
            "naming it was read)"
        )
        if store:
            state.lead(
                ObjRef(store_kind.lower(), store, "" if store_kind == "ClusterSecretStore" else namespace),
                f"the store of ExternalSecret {name}",
                60,
            )
        return [
            Finding(
                "external_secret_not_synced",
                f"The ExternalSecret {name} cannot sync ({reason}): {cause}, {effect}.",
                Severity.CRITICAL,
                f"externalsecret/{namespace}/{name}",
                clip(message or reason),
                94,  # the cause of the missing Secret ranks above it
                f"Create the key {missing} in {where} (or correct remoteRef.key in ExternalSecret {name}); "
                "the operator syncs it at the next refresh (annotate force-sync to sync now)."
                if missing
                else f"Fix what {where} answers, then force a sync of ExternalSecret {name}.",
            )
        ]

    @staticmethod
    def _store(obj: dict[str, Any], state: AnalysisState) -> list[Finding]:
        name = str(_get(obj, "metadata", "name") or "")
        provider_spec = _get(obj, "spec", "provider")
        provider = next(iter(provider_spec), "") if isinstance(provider_spec, dict) else ""
        provider = {
            "vault": "Vault",
            "aws": "AWS Secrets Manager",
            "gcpsm": "GCP Secret Manager",
            "azurekv": "Azure Key Vault",
        }.get(provider, provider)
        state.fact_dict("secret_store_providers")[f"{obj.get('kind')}/{name}"] = provider
        ready = _ready(obj.get("status"))
        failing = state.fact_dict("failing_external_secrets").get(f"{obj.get('kind')}/{name}")
        if ready is None:
            return []
        if str(ready.get("status")) != "True":
            why = clip(str(ready.get("message") or ready.get("reason") or ""), 240)
            return [
                Finding(
                    "secret_store_not_ready",
                    f"{obj.get('kind')} {name} ({provider or 'its provider'}) is not Ready: {why}; no "
                    "ExternalSecret that uses it can sync.",
                    Severity.CRITICAL,
                    f"{str(obj.get('kind')).lower()}/{name}",
                    why,
                    86,
                    f"Fix {name}'s connection or credentials to {provider or 'the provider'}.",
                )
            ]
        if not failing:
            return []
        secret, keys, message = failing
        named = [k for k in keys if k in message]
        which = (
            f"its key {named[0]} itself: it is not in"
            if len(named) == 1
            else f"one of its keys ({', '.join(keys)}) itself, which the provider's answer does not name: "
            "it is not in"
        )
        return [
            Finding(
                "external_secret_key_missing",
                f"The {provider or ''} store {name} is Ready (reachable, authenticated), "
                f"so the ExternalSecret {secret} fails on {which} the {provider or ''} store.".replace(
                    "  ", " "
                ),
                Severity.WARNING,
                f"{str(obj.get('kind')).lower()}/{name}",
                "store Ready True",
                70,
            )
        ]
