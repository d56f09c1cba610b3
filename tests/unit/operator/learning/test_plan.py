"""When a training run starts: only while the resource serves quietly, after the least interval, with prompts
recorded since the last run; then on enough prompts, on drifted acceptance, or on the schedule."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from specinfer_operator.api.learning import LearningSettings
from specinfer_operator.learning.plan import Moment, next_generation, recorded, trigger

SETTINGS = LearningSettings.model_validate(
    {"sampling": {"percent": 10}, "triggers": {"minNewSamples": 100, "minIntervalMinutes": 60, "intervalHours": 24}}
)
NOW = "2026-11-29T12:00:00Z"
QUIET = Moment(now=NOW, requests=0, acceptance_length=2.0, quiet=True, running=False)
RAN = {"generations": [{"generation": 1, "startedAt": "2026-11-29T10:00:00Z"}], "promotedAcceptanceLength": 2.0}


def test_the_recorder_takes_its_share_of_requests() -> None:
    assert recorded(SETTINGS, 999) == 99


def test_enough_new_prompts_start_a_run() -> None:
    assert trigger(SETTINGS, RAN, replace(QUIET, requests=999)) is None
    said = trigger(SETTINGS, RAN, replace(QUIET, requests=1000))
    assert said == "100 prompts recorded since the last run (triggers.minNewSamples 100)"


def test_no_run_beside_another_a_canary_or_too_soon() -> None:
    many = replace(QUIET, requests=10_000)
    assert trigger(SETTINGS, RAN, replace(many, running=True)) is None
    assert trigger(SETTINGS, RAN, replace(many, quiet=False)) is None
    soon: dict[str, Any] = {"generations": [{"generation": 1, "startedAt": "2026-11-29T11:30:00Z"}]}
    assert trigger(SETTINGS, soon, many) is None


def test_drifted_acceptance_starts_a_run_with_a_tenth_of_the_prompts() -> None:
    drifted = replace(QUIET, requests=100, acceptance_length=1.7)
    said = trigger(SETTINGS, RAN, drifted)
    assert said is not None
    assert said.startswith("mean acceptance length 1.70 is below 1.80, 10% under its 2.00")
    assert trigger(SETTINGS, RAN, replace(drifted, acceptance_length=1.85)) is None
    assert trigger(SETTINGS, RAN, replace(drifted, requests=99)) is None  # 9 prompts: under a tenth of 100


def test_the_schedule_needs_one_new_prompt_and_counts_from_when_learning_began() -> None:
    day: dict[str, Any] = {"generations": [{"generation": 1, "startedAt": "2026-11-28T11:00:00Z"}]}
    assert trigger(SETTINGS, day, replace(QUIET, requests=10)) == (
        "24 h since the last run (triggers.intervalHours), with 1 prompts recorded since"
    )
    assert trigger(SETTINGS, day, replace(QUIET, requests=9)) is None  # no prompt recorded yet
    assert trigger(SETTINGS, {"since": "2026-11-28T11:00:00Z"}, replace(QUIET, requests=10)) is not None
    assert trigger(SETTINGS, {"since": "2026-11-29T11:00:00Z"}, replace(QUIET, requests=10)) is None


def test_generations_are_numbered_on() -> None:
    assert next_generation({}) == 1
    assert next_generation({"generations": [{"generation": 2}, {"generation": 5}]}) == 6
