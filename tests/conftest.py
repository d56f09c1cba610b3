"""Settings of every suite."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

# No deadline: the suites run beside image builds on two cores, where an example may take seconds; speed is
# measured in bench/, not here. `ci` is repeatable; HYPOTHESIS_PROFILE=explore searches wider.
settings.register_profile(
    "ci",
    max_examples=300,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile("explore", max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
