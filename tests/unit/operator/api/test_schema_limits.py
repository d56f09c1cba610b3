"""What pods report is fitted into the CRD's status schema before a patch: the API server would refuse the whole."""

from __future__ import annotations

from specinfer_operator.api.schema_limits import ELLIPSIS, clamp, status_schema


def test_the_limits_come_from_the_generated_crd() -> None:
    observed = status_schema()["properties"]["speculation"]["properties"]["observed"]["properties"]
    assert observed["positionAcceptanceRates"]["maxItems"] == 64
    assert observed["scrapeFailures"]["items"]["properties"]["reason"]["maxLength"] == 256


def test_what_the_schema_refuses_is_fitted() -> None:
    patch = {
        "speculation": {
            "observed": {
                "drafts": 1 << 70,
                "acceptanceRate": float("inf"),
                "meanAcceptanceLength": float("nan"),
                "positionAcceptanceRates": [0.5] * 100,
                "scrapeFailures": [{"pod": "p", "result": "timeout", "reason": "x" * 1000}],
            }
        },
        "conditions": [{"type": "Ready", "status": "False", "message": "y" * 5000}],
        "tuning": {"profiles": [{"acceptedPerStep": [0.1] * 40}]},
    }
    fitted = clamp(patch)
    observed = fitted["speculation"]["observed"]
    assert observed["drafts"] == (1 << 63) - 1
    assert observed["acceptanceRate"] is None  # in a merge patch: no figure, rather than a refused patch
    assert observed["meanAcceptanceLength"] is None
    assert len(observed["positionAcceptanceRates"]) == 64
    reason = observed["scrapeFailures"][0]["reason"]
    assert len(reason) == 256
    assert reason.endswith(ELLIPSIS)
    assert len(fitted["conditions"][0]["message"]) == 4096
    assert len(fitted["tuning"]["profiles"][0]["acceptedPerStep"]) == 16


def test_what_fits_is_left_as_it_is() -> None:
    patch = {"speculation": {"observed": {"drafts": 30, "acceptanceRate": 0.5, "configHash": None}}, "ready": "1/1"}
    assert clamp(patch) == patch
