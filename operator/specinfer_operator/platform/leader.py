"""Leader election on a coordination.k8s.io Lease, so that several operator replicas are safe: one
reconciles, the others wait to take over when its Lease expires."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from specinfer_operator.platform.kube import Conflict, Kube

log = logging.getLogger(__name__)
LEASES = ("coordination.k8s.io/v1", "leases")


def _now() -> datetime:
    return datetime.now(UTC)


def _micro(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _parse(text: str) -> datetime:
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)


def expired(lease: dict[str, Any], now: datetime) -> bool:
    spec = lease.get("spec", {})
    renewed = spec.get("renewTime")
    if not spec.get("holderIdentity") or not renewed:
        return True
    return _parse(renewed) + timedelta(seconds=spec.get("leaseDurationSeconds", 15)) < now


class Elector:
    def __init__(self, kube: Kube, namespace: str, name: str, identity: str, duration: int = 15) -> None:
        self.kube, self.namespace, self.name, self.identity, self.duration = kube, namespace, name, identity, duration

    def _spec(self, now: datetime, acquired: str | None) -> dict[str, Any]:
        return {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": self.duration,
            "acquireTime": acquired or _micro(now),
            "renewTime": _micro(now),
        }

    def attempt(self) -> bool:
        """Take or renew the Lease; optimistic concurrency makes two candidates never both win."""
        now = _now()
        lease = self.kube.get(LEASES[0], LEASES[1], self.namespace, self.name)
        try:
            if lease is None:
                body = {"apiVersion": LEASES[0], "kind": "Lease", "metadata": {"name": self.name}}
                self.kube.create(LEASES[0], LEASES[1], self.namespace, {**body, "spec": self._spec(now, None)})
                return True
            holder = lease.get("spec", {}).get("holderIdentity")
            if holder != self.identity and not expired(lease, now):
                return False
            acquired = lease["spec"].get("acquireTime") if holder == self.identity else None
            lease["spec"] = self._spec(now, acquired)
            self.kube.replace(LEASES[0], LEASES[1], self.namespace, self.name, lease)
            return True
        except Conflict:
            return False

    def acquire(self) -> None:
        """Block until this process leads."""
        announced = False
        while not self.attempt():
            if not announced:
                log.info("waiting for Lease %s/%s held by another replica", self.namespace, self.name)
                announced = True
            time.sleep(self.duration / 3)
        log.info("leading as %s (Lease %s/%s)", self.identity, self.namespace, self.name)

    def keep(self, lost: Callable[[], None]) -> threading.Thread:
        """Renew in the background; call `lost` once renewals failed for a whole Lease duration."""

        def renew() -> None:
            last = time.monotonic()
            while True:
                time.sleep(self.duration / 3)
                try:
                    if self.attempt():
                        last = time.monotonic()
                        continue
                except Exception:  # the API server may be briefly away; keep trying until the Lease runs out
                    log.warning("renewing the Lease failed", exc_info=True)
                if time.monotonic() - last > self.duration:
                    log.error("lost the Lease %s/%s; stopping", self.namespace, self.name)
                    lost()
                    return

        thread = threading.Thread(target=renew, name="lease", daemon=True)
        thread.start()
        return thread
