"""Kubernetes API calls the operator makes, as plain dicts. Children are written with server-side apply
under one field manager, so drift is corrected and GitOps tools owning other fields are left alone."""

from __future__ import annotations

import json
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from specinfer_operator.api.labels import MANAGER
from specinfer_operator.api.resource import GROUP, PLURAL, VERSION
from specinfer_operator.api.schema_limits import clamp
from specinfer_operator.api.service import INFERENCE_POOL_KIND, INFERENCE_POOL_PLURAL

_PLURALS = {
    "ConfigMap": "configmaps",
    "PersistentVolumeClaim": "persistentvolumeclaims",
    "Job": "jobs",
    "Service": "services",
    "Deployment": "deployments",
    "PodDisruptionBudget": "poddisruptionbudgets",
    "HorizontalPodAutoscaler": "horizontalpodautoscalers",
    "ScaledObject": "scaledobjects",
    "LeaderWorkerSet": "leaderworkersets",
    INFERENCE_POOL_KIND: INFERENCE_POOL_PLURAL,
}


def plural_of(kind: str) -> str:
    return _PLURALS[kind]


class Conflict(Exception):  # noqa: N818 (reads as "raise Conflict")
    """The object changed since it was read (HTTP 409)."""


def collection(api_version: str, plural: str, namespace: str | None) -> str:
    """The URL path of a collection, core (`v1`) or grouped (`apps/v1`)."""
    base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    return f"{base}/namespaces/{namespace}/{plural}" if namespace else f"{base}/{plural}"


class Kube:
    """The few requests reconciliation needs, on a shared client."""

    def __init__(self, api: client.ApiClient) -> None:
        self.api = api

    def _call(
        self,
        method: str,
        path: str,
        body: Any = None,
        query: dict[str, str] | None = None,
        content_type: str = "application/json",
    ) -> dict[str, Any] | None:
        """One request; None for 404, Conflict for 409, ApiException for any other failure."""
        method, url, headers, payload, _ = self.api.param_serialize(
            method=method,
            resource_path=path,
            query_params=list((query or {}).items()),
            header_params={"Content-Type": content_type, "Accept": "application/json"},
            body=body,
            auth_settings=["BearerToken"],
        )
        response = self.api.call_api(method, url, header_params=headers, body=payload, _request_timeout=30)
        data: bytes = response.read()  # type: ignore[no-untyped-call]
        if response.status == 404:
            return None
        if response.status == 409:
            raise Conflict(data.decode(errors="replace"))
        if response.status >= 400:
            raise ApiException(status=response.status, reason=response.reason, body=data.decode(errors="replace"))
        loaded: dict[str, Any] = json.loads(data) if data else {}
        return loaded

    def apply(self, obj: dict[str, Any], dry_run: bool = False) -> dict[str, Any]:
        """Server-side apply, taking ownership of every field we set; a dry run persists nothing but goes
        through validation and admission like the real thing."""
        meta = obj["metadata"]
        path = f"{collection(obj['apiVersion'], _PLURALS[obj['kind']], meta['namespace'])}/{meta['name']}"
        query = {"fieldManager": MANAGER, "force": "true", **({"dryRun": "All"} if dry_run else {})}
        result = self._call("PATCH", path, obj, query, "application/apply-patch+yaml")
        assert result is not None
        return result

    def get(self, api_version: str, plural: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        return self._call("GET", f"{collection(api_version, plural, namespace)}/{name}")

    def list(
        self, api_version: str, plural: str, namespace: str | None, selector: str | None = None
    ) -> list[dict[str, Any]]:
        query = {"labelSelector": selector} if selector else None
        result = self._call("GET", collection(api_version, plural, namespace), query=query)
        items: list[dict[str, Any]] = (result or {}).get("items", [])
        return items

    def create(self, api_version: str, plural: str, namespace: str | None, body: dict[str, Any]) -> None:
        self._call("POST", collection(api_version, plural, namespace), body)

    def replace(self, api_version: str, plural: str, namespace: str, name: str, body: dict[str, Any]) -> None:
        """PUT with the body's resourceVersion: Conflict if someone wrote in between."""
        self._call("PUT", f"{collection(api_version, plural, namespace)}/{name}", body)

    def delete(self, api_version: str, plural: str, namespace: str | None, name: str, uid: str | None = None) -> None:
        """Delete; with `uid`, only the object of that uid (Conflict when the name now holds another)."""
        body = {"preconditions": {"uid": uid}} if uid else None
        self._call("DELETE", f"{collection(api_version, plural, namespace)}/{name}", body)

    def serves(self, api_version: str, plural: str) -> bool:
        """Whether the API server serves `plural` in `api_version` (discovery, which any user may read)."""
        found = self._call("GET", f"/apis/{api_version}")
        return any(r.get("name") == plural for r in (found or {}).get("resources", []))

    def resource(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.get(f"{GROUP}/{VERSION}", PLURAL, namespace, name)

    def event(self, body: dict[str, Any], type: str, reason: str, message: str, now: str) -> None:
        """A core/v1 Event about `body`, as `kubectl describe` and `kubectl get events` show them."""
        meta = body["metadata"]
        self.create(
            "v1",
            "events",
            meta["namespace"],
            {
                "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
                "involvedObject": {
                    "apiVersion": body.get("apiVersion", f"{GROUP}/{VERSION}"),
                    "kind": body.get("kind", "SpeculativeInference"),
                    "name": meta["name"],
                    "namespace": meta["namespace"],
                    "uid": meta.get("uid"),
                    "resourceVersion": meta.get("resourceVersion"),
                },
                "type": type,
                "reason": reason,
                "message": message[:1024],
                "source": {"component": MANAGER},
                "reportingComponent": MANAGER,
                "firstTimestamp": now,
                "lastTimestamp": now,
                "count": 1,
            },
        )

    def patch_metadata(self, namespace: str, name: str, metadata: dict[str, Any]) -> None:
        """Merge-patch a resource's metadata (a consumed annotation); keys set to None are removed."""
        path = f"{collection(f'{GROUP}/{VERSION}', PLURAL, namespace)}/{name}"
        self._call("PATCH", path, {"metadata": metadata}, content_type="application/merge-patch+json")

    def patch_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        """Merge-patch the status subresource; keys set to None are removed. Every writer's patch is fitted
        into the CRD's limits here, as what pods report is not: one oversized figure would refuse it all."""
        path = f"{collection(f'{GROUP}/{VERSION}', PLURAL, namespace)}/{name}/status"
        self._call("PATCH", path, {"status": clamp(status)}, content_type="application/merge-patch+json")
