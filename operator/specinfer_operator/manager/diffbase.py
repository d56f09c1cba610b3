"""Where kopf keeps the spec it last handled: an annotation, as kopf does, but never one too long to write.

The API server refuses an object whose annotations together pass 256 KiB. The CRD admits specs larger than
that (its bounds are per field), and kopf writes the last-handled spec into every patch it makes: for such a
resource each patch was refused, and a resource with a timer (spec.learning's) could not even be deleted, its
finalizer never removed. Past MAX_BYTES the spec is not kept: kopf then handles each event of the resource as
a new one, and the reconcile loop, which compares what runs with what should, does the same work once more.
"""

from __future__ import annotations

import json

import kopf

MAX_BYTES = 128 * 1024  # half the API server's limit: the rest is for the other annotations


class BoundedDiffBaseStorage(kopf.AnnotationsDiffBaseStorage):
    """kopf's AnnotationsDiffBaseStorage, which removes its annotation instead of writing one past MAX_BYTES."""

    def store(self, *, body: kopf.Body, patch: kopf.Patch, essence: kopf.BodyEssence) -> None:
        if len(json.dumps(essence, separators=(",", ":"))) <= MAX_BYTES:
            super().store(body=body, patch=patch, essence=essence)
            return
        for key in self.make_keys(self.key, body=body):
            if key in body.metadata.annotations:  # a spec that grew past the bound: no stale copy is compared
                patch.metadata.annotations[key] = None
