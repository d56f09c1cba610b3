"""Where kopf keeps the resource it last handled, and what of the resource counts as a change to handle.

kopf compares each event's resource with the last handled one (the "essence") and calls on_spec when they
differ. Its essence holds every label and annotation: any `kubectl annotate` or `kubectl label` reconciled the
resource again. Ours holds what the reconcile reads: the spec, and the two annotations the operator's own
loops write for it to act on (Auto tuning's K, the learned draft in force).

kopf keeps the essence in an annotation, and the API server refuses an object whose annotations together pass
256 KiB; the CRD admits larger specs (its bounds are per field). Past MAX_BYTES the essence is kept as its
SHA-256 instead: an event whose essence has the same digest is no change, one with another is a change of
everything, which the reconcile loop, comparing what runs with what should, handles as any other. So an event
that does not touch what the reconcile reads costs no reconcile, whatever the spec's size.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, cast

import kopf

from specinfer_operator.api.labels import LEARNED_DRAFT_ANNOTATION, TUNED_K_ANNOTATION

MAX_BYTES = 128 * 1024  # half the API server's limit: the rest is for the other annotations
RECONCILED_ANNOTATIONS = (TUNED_K_ANNOTATION, LEARNED_DRAFT_ANNOTATION)
DIGEST = "sha256"  # the one key of a digest's essence; a resource's essence always holds "spec"


def _encoded(essence: kopf.BodyEssence) -> str:
    return json.dumps(essence, separators=(",", ":"), sort_keys=True)


def digest(essence: kopf.BodyEssence) -> str:
    return hashlib.sha256(_encoded(essence).encode()).hexdigest()


class BoundedDiffBaseStorage(kopf.AnnotationsDiffBaseStorage):
    """kopf's AnnotationsDiffBaseStorage, over what the reconcile reads, and a digest of it past MAX_BYTES."""

    def build(self, *, body: kopf.Body, extra_fields: Any = None) -> kopf.BodyEssence:
        essence: dict[str, Any] = dict(super().build(body=body, extra_fields=extra_fields))
        annotations = (essence.pop("metadata", None) or {}).get("annotations") or {}
        read = {key: annotations[key] for key in RECONCILED_ANNOTATIONS if key in annotations}
        if read:
            essence["metadata"] = {"annotations": read}
        return cast(kopf.BodyEssence, essence)

    def fetch(self, *, body: kopf.Body) -> kopf.BodyEssence | None:
        stored = super().fetch(body=body)
        if stored is None or set(stored) != {DIGEST}:
            return stored
        current = self.build(body=body)
        if cast(dict[str, Any], stored)[DIGEST] == digest(current):
            return current  # unchanged: kopf finds no difference, and calls no handler
        return cast(kopf.BodyEssence, {})  # changed: what changed is not known, so everything did

    def store(self, *, body: kopf.Body, patch: kopf.Patch, essence: kopf.BodyEssence) -> None:
        if len(_encoded(essence)) > MAX_BYTES:
            essence = cast(kopf.BodyEssence, {DIGEST: digest(essence)})
        super().store(body=body, patch=patch, essence=essence)
