"""The draft generation in force: the annotation puts one of the claim's drafts in place of the spec's, and
nothing else counts as one."""

from __future__ import annotations

from typing import Any

import pytest

from specinfer_operator.api.policy import TenantPolicySpec
from specinfer_operator.controller.context import desired_of
from specinfer_operator.learning.draft import checked, draft_label, generation_of, generation_of_draft, learned
from specinfer_operator.render.admission import check
from specinfer_operator.render.children import RenderDefaults, render
from specinfer_runtime.validation import Problem, Report
from tests.support.builders import cr

LEARNING_ALLOWED = TenantPolicySpec(learning_allowed=True)  # a platform opted in
SPEC: dict[str, Any] = {
    "model": {"name": "org/target"},
    "speculative": {"method": "eagle3", "numSpeculativeTokens": 3, "draftModel": {"name": "org/draft"}},
    "rollout": {"strategy": "Canary"},
    "learning": {},
}


def body(spec: dict[str, Any], draft: str | None) -> dict[str, Any]:
    annotations = {} if draft is None else {"learning.specinfer.io/draft": draft}
    return {
        "apiVersion": "specinfer.io/v1alpha1",
        "kind": "SpeculativeInference",
        "metadata": {"name": "demo", "annotations": annotations},
        "spec": spec,
    }


def test_the_generation_in_force_replaces_the_specs_draft_with_its_directory_on_the_claim() -> None:
    found = learned(body(SPEC, "3"))
    assert found["spec"]["speculative"]["draftModel"] == {
        "name": "demo-learning/drafts/gen-3",
        "source": {"pvc": {"claimName": "demo-learning", "subPath": "drafts/gen-3"}},
    }
    assert generation_of_draft("demo", found["spec"]["speculative"]["draftModel"]) == 3
    pod = next(o for o in render(cr(found["spec"])) if o["kind"] == "Deployment")["spec"]["template"]["spec"]
    assert {"name": "model-draft", "persistentVolumeClaim": {"claimName": "demo-learning", "readOnly": True}} in pod[
        "volumes"
    ]


@pytest.mark.parametrize("draft", [None, "", "0", "-1", "gen-3", "3.5", " ", "99999999999", "\u0663"])
def test_anything_but_a_generation_number_leaves_the_specs_draft(draft: str | None) -> None:
    given = body(SPEC, draft)
    assert generation_of(given) == 0
    assert learned(given) is given


def test_without_learning_the_annotation_counts_for_nothing() -> None:
    spec = {k: v for k, v in SPEC.items() if k != "learning"}
    assert generation_of(body(spec, "2")) == 0


def test_status_names_generations() -> None:
    assert (draft_label(0), draft_label(4)) == ("spec", "gen-4")
    assert generation_of_draft("demo", {"name": "org/draft"}) == 0
    other = {"name": "x", "source": {"pvc": {"claimName": "other-learning", "subPath": "drafts/gen-2"}}}
    assert generation_of_draft("demo", other) == 0


def test_the_status_says_which_generation_a_configuration_serves() -> None:
    assert desired_of(cr(learned(body(SPEC, "3"))["spec"]), RenderDefaults()).draft == "gen-3"
    assert desired_of(cr(SPEC), RenderDefaults()).draft == "spec"
    without = {k: v for k, v in SPEC.items() if k != "learning"}
    assert desired_of(cr(without), RenderDefaults()).draft == ""


def test_a_generation_the_checks_refuse_is_ignored_with_a_warning() -> None:
    """Whatever refuses the generation (a policy that no longer takes its claim, say), the spec's draft serves."""

    def refusing_claims(b: dict[str, Any]) -> Any:
        found = check(b, policy=LEARNING_ALLOWED)
        source = b["spec"]["speculative"]["draftModel"].get("source") or {}
        return (
            Report(None, [Problem("spec.speculative.draftModel", "no claims here", "policy")])
            if "pvc" in source
            else found
        )

    given = body(SPEC, "2")
    used, report, said = checked(given, refusing_claims)
    assert used is given
    assert report.value is not None
    assert said == (
        "learning.specinfer.io/draft puts gen-2 in force, which the spec does not allow "
        "(spec.speculative.draftModel: no claims here): ignored"
    )
    used, report, said = checked(given, lambda b: check(b, policy=LEARNING_ALLOWED))
    assert (used["spec"]["speculative"]["draftModel"]["name"], said) == ("demo-learning/drafts/gen-2", None)
