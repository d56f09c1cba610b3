"""Who may read the operator's /metrics: the bearer token's owner, as the API server judges it.

As controller-runtime's metrics filter does: a TokenReview says whose token it is (401 when nobody's), then a
SubjectAccessReview whether that user may `get` the non-resource URL /metrics (403 when not). Decisions are kept
for `ttl` seconds, at most `size` of them, keyed by a hash of the token so that no token stays in memory.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable

import urllib3
from kubernetes import client

log = logging.getLogger(__name__)
Review = Callable[[str], int]
CACHED = (200, 401, 403)  # a failed review (500) is asked again next time


class Decisions:
    """A bounded, short-lived cache in front of a review."""

    def __init__(
        self, review: Review, ttl: float = 10.0, size: int = 1024, clock: Callable[[], float] = time.monotonic
    ):
        self.review, self.ttl, self.size, self.clock = review, ttl, size, clock
        self.kept: OrderedDict[bytes, tuple[float, int]] = OrderedDict()
        self.lock = threading.Lock()  # reviews run on a pool's threads

    def status(self, token: str) -> int:
        key = hashlib.sha256(token.encode()).digest()
        with self.lock:
            cached = self.kept.get(key)
        if cached is not None and cached[0] > self.clock():
            return cached[1]
        status = self.review(token)
        with self.lock:
            self.kept.pop(key, None)
            if status in CACHED:
                self.kept[key] = (self.clock() + self.ttl, status)
                while len(self.kept) > self.size:
                    self.kept.popitem(last=False)
        return status


def bearer(authorization: str) -> str:
    scheme, _, token = authorization.partition(" ")
    return token.strip() if scheme.lower() == "bearer" else ""


def kube_review(api: client.ApiClient, path: str = "/metrics", timeout: float = 5.0) -> Review:
    """The API server's verdict on a token: 200, 401, 403, or 500 when it could not be asked."""
    authn, authz = client.AuthenticationV1Api(api), client.AuthorizationV1Api(api)

    def review(token: str) -> int:
        try:
            tokens = authn.create_token_review(
                client.V1TokenReview(spec=client.V1TokenReviewSpec(token=token)), _request_timeout=timeout
            )
            if not tokens.status or not tokens.status.authenticated or not tokens.status.user:
                return 401
            user = tokens.status.user
            access = authz.create_subject_access_review(
                client.V1SubjectAccessReview(
                    spec=client.V1SubjectAccessReviewSpec(
                        user=user.username,
                        uid=user.uid,
                        groups=user.groups,
                        extra=user.extra,
                        non_resource_attributes=client.V1NonResourceAttributes(path=path, verb="get"),
                    )
                ),
                _request_timeout=timeout,
            )
        except (client.ApiException, urllib3.exceptions.HTTPError, OSError) as error:
            log.warning("could not review a /metrics token: %s", str(error)[:200])
            return 500
        return 200 if access.status and access.status.allowed else 403

    return review
