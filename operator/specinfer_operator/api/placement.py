"""Tolerations and affinity (core/v1), typed, with the checks Kubernetes applies to a pod template.

They reach the Deployment unchanged. Typing them here means the API server refuses a bad one when
the SpeculativeInference is applied, with the field path, instead of refusing the operator's apply.
Not supported: pod (anti-)affinity `matchLabelKeys` / `mismatchLabelKeys`.
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import Field

from specinfer_runtime.base import Section
from specinfer_runtime.celrules import Rule
from specinfer_runtime.names import DNS_LABEL, DNS_SUBDOMAIN, LABEL_VALUE, QUALIFIED_NAME_FORMAT, qualified_name

# Kubernetes takes int64 here, but a CRD keeps minimum and maximum as float64: bounds beyond 2^53 do not
# survive the trip (2^63 - 1 comes back as -2^63).
INT_BOUND = 2**53 - 1
LabelValue = Annotated[str, Field(max_length=63, pattern=LABEL_VALUE)]
# Label keys, taint keys and topology keys: a DNS-subdomain prefix (253), '/' and a name (63).
Key = Annotated[str, Field(min_length=1, max_length=317)]
# Keys in a map cannot be bounded in a CRD schema, so CEL cannot afford to check them there: the
# ValidatingAdmissionPolicy generated next to the CRD does (see resource.ADMISSION_RULES).
LabelMap = dict[str, LabelValue]
# Annotations: keys as for labels (the admission policy checks them), values up to 4 KiB each.
AnnotationMap = dict[str, Annotated[str, Field(max_length=4096)]]
# Kubernetes bounds none of these. Each term and requirement is checked by rules of its own, at admission
# and by the operator at every reconcile: these bounds keep the largest spec's check within its budget
# (docs/security.md, "Admission cost"), well above what the placement of a few engine pods needs.
MAX_TERMS = 8  # node selector terms, preferred node terms, pod (anti-)affinity terms of each kind
MAX_REQUIREMENTS = 4  # matchExpressions of a node selector term or a label selector
MAX_LABELS = 8  # matchLabels of a label selector


def key_rule(field: str, what: str) -> Rule:
    return Rule(
        id="kubernetes",
        rule=f"!has(self.{field}) || self.{field} == '' || {qualified_name(f'self.{field}')}",
        message=f"{what} %s is not a qualified name: {QUALIFIED_NAME_FORMAT}",
        args=(f"self.{field}",),
        field_path=f".{field}",
    )


class Toleration(Section):
    """A Kubernetes toleration (core/v1 Toleration)."""

    key: str | None = Field(default=None, max_length=317, description="Taint key; empty matches all keys.")
    operator: Literal["Exists", "Equal"] | None = Field(default=None, description="Exists or Equal (default).")
    value: LabelValue | None = Field(default=None, description="Taint value for operator Equal.")
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = Field(
        default=None, description="Taint effect to tolerate; empty matches all effects."
    )
    toleration_seconds: int | None = Field(
        default=None,
        ge=-INT_BOUND,
        le=INT_BOUND,
        description="How long a NoExecute taint is tolerated; forever when unset.",
    )

    cel_rules: ClassVar[tuple[Rule, ...]] = (
        key_rule("key", "key"),
        Rule(
            id="kubernetes",
            rule="(has(self.key) && self.key != '') || (has(self.operator) && self.operator == 'Exists')",
            message="operator must be Exists when key is empty (which tolerates every taint): set key or "
            "operator: Exists",
            field_path=".operator",
        ),
        Rule(
            id="kubernetes",
            rule="!(has(self.operator) && self.operator == 'Exists') || !has(self.value) || self.value == ''",
            message="value must be empty when operator is Exists: remove value, or use operator Equal",
            field_path=".value",
        ),
        Rule(
            id="kubernetes",
            rule="!has(self.tolerationSeconds) || (has(self.effect) && self.effect == 'NoExecute')",
            message="tolerationSeconds only applies to effect NoExecute: set effect: NoExecute or remove it",
            field_path=".effect",
        ),
    )


def _operator_values(numeric: bool) -> tuple[Rule, ...]:
    """How many values each selector operator takes, in Kubernetes' words; node selectors also have Gt/Lt."""
    rules: tuple[Rule, ...] = (
        Rule(
            id="kubernetes",
            rule="!(self.operator in ['In', 'NotIn']) || (has(self.values) && size(self.values) > 0)",
            message="values must be given when operator is In or NotIn",
            field_path=".values",
            reason="FieldValueRequired",
        ),
        Rule(
            id="kubernetes",
            rule="!(self.operator in ['Exists', 'DoesNotExist']) || !has(self.values) || size(self.values) == 0",
            message="values may not be given when operator is Exists or DoesNotExist",
            field_path=".values",
            reason="FieldValueForbidden",
        ),
    )
    if numeric:
        rules += (
            Rule(
                id="kubernetes",
                rule="!(self.operator in ['Gt', 'Lt']) || (has(self.values) && size(self.values) == 1)",
                message="exactly one value must be given when operator is Gt or Lt",
                field_path=".values",
                reason="FieldValueRequired",
            ),
        )
    return rules


class NodeSelectorRequirement(Section):
    """A node label requirement (core/v1 NodeSelectorRequirement)."""

    key: Key = Field(description="Node label key.")
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"] = Field(
        description="How key and values relate."
    )
    values: list[LabelValue] | None = Field(default=None, max_length=32, description="Label values.")

    cel_rules: ClassVar[tuple[Rule, ...]] = (key_rule("key", "key"), *_operator_values(numeric=True))


class NodeFieldSelectorRequirement(Section):
    """A node field requirement (core/v1 NodeSelectorRequirement in matchFields): only metadata.name."""

    key: Literal["metadata.name"] = Field(description="The node field; only metadata.name is supported.")
    operator: Literal["In", "NotIn"] = Field(description="In or NotIn.")
    values: Annotated[
        list[Annotated[str, Field(max_length=253, pattern=DNS_SUBDOMAIN)]],
        Field(min_length=1, max_length=1, description="Exactly one node name."),
    ]


class NodeSelectorTerm(Section):
    """Requirements that must all hold (core/v1 NodeSelectorTerm)."""

    match_expressions: list[NodeSelectorRequirement] | None = Field(
        default=None, max_length=MAX_REQUIREMENTS, description="Requirements on node labels."
    )
    match_fields: list[NodeFieldSelectorRequirement] | None = Field(
        default=None, max_length=8, description="Requirements on node fields."
    )


class NodeSelector(Section):
    """Terms of which one must hold (core/v1 NodeSelector)."""

    node_selector_terms: list[NodeSelectorTerm] = Field(min_length=1, max_length=MAX_TERMS, description="ORed terms.")


class PreferredSchedulingTerm(Section):
    """A weighted node preference (core/v1 PreferredSchedulingTerm)."""

    weight: int = Field(ge=1, le=100, description="Weight, 1-100.")
    preference: NodeSelectorTerm = Field(description="The preferred node term.")


class NodeAffinity(Section):
    """Node affinity (core/v1 NodeAffinity)."""

    required_during_scheduling_ignored_during_execution: NodeSelector | None = Field(
        default=None, description="Nodes the pods must run on."
    )
    preferred_during_scheduling_ignored_during_execution: list[PreferredSchedulingTerm] | None = Field(
        default=None, max_length=MAX_TERMS, description="Nodes the pods prefer."
    )


class LabelSelectorRequirement(Section):
    """A label requirement (meta/v1 LabelSelectorRequirement)."""

    key: Key = Field(description="Label key.")
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"] = Field(description="How key and values relate.")
    values: list[LabelValue] | None = Field(default=None, max_length=32, description="Label values.")

    cel_rules: ClassVar[tuple[Rule, ...]] = (key_rule("key", "key"), *_operator_values(numeric=False))


class LabelSelector(Section):
    """A label selector (meta/v1 LabelSelector)."""

    match_labels: LabelMap | None = Field(
        default=None, max_length=MAX_LABELS, description="Labels that must all match."
    )
    match_expressions: list[LabelSelectorRequirement] | None = Field(
        default=None, max_length=MAX_REQUIREMENTS, description="Requirements that must all hold."
    )


class PodAffinityTerm(Section):
    """Pods to run near or away from (core/v1 PodAffinityTerm)."""

    label_selector: LabelSelector | None = Field(default=None, description="The pods.")
    namespace_selector: LabelSelector | None = Field(default=None, description="Namespaces of the pods.")
    namespaces: list[Annotated[str, Field(max_length=63, pattern=DNS_LABEL)]] | None = Field(
        default=None, max_length=32, description="Namespaces of the pods; the resource's own when unset."
    )
    topology_key: Key = Field(description='Node label whose value defines "near", e.g. kubernetes.io/hostname.')

    cel_rules: ClassVar[tuple[Rule, ...]] = (key_rule("topologyKey", "topologyKey"),)


class WeightedPodAffinityTerm(Section):
    """A weighted pod affinity term (core/v1 WeightedPodAffinityTerm)."""

    weight: int = Field(ge=1, le=100, description="Weight, 1-100.")
    pod_affinity_term: PodAffinityTerm = Field(description="The term.")


class PodAffinity(Section):
    """Pod affinity or anti-affinity (core/v1 PodAffinity / PodAntiAffinity)."""

    required_during_scheduling_ignored_during_execution: list[PodAffinityTerm] | None = Field(
        default=None, max_length=MAX_TERMS, description="Terms that must hold."
    )
    preferred_during_scheduling_ignored_during_execution: list[WeightedPodAffinityTerm] | None = Field(
        default=None, max_length=MAX_TERMS, description="Terms preferred to hold."
    )


class Affinity(Section):
    """Affinity of the engine pods (core/v1 Affinity)."""

    node_affinity: NodeAffinity | None = Field(default=None, description="Node affinity.")
    pod_affinity: PodAffinity | None = Field(default=None, description="Pod affinity.")
    pod_anti_affinity: PodAffinity | None = Field(default=None, description="Pod anti-affinity.")


# Where label maps (keys unbounded in a CRD schema) sit under spec.placement.affinity, for the
# admission policy: each path is a chain of fields, `[]` marking a list.
AFFINITY_LABEL_MAPS: tuple[str, ...] = tuple(
    f"{kind}.{term}.{selector}.matchLabels"
    for kind in ("podAffinity", "podAntiAffinity")
    for term in (
        "requiredDuringSchedulingIgnoredDuringExecution[]",
        "preferredDuringSchedulingIgnoredDuringExecution[].podAffinityTerm",
    )
    for selector in ("labelSelector", "namespaceSelector")
)


class TopologySpreadConstraint(Section):
    """How the pods spread across zones or nodes (core/v1 TopologySpreadConstraint)."""

    max_skew: int = Field(ge=1, le=2**31 - 1, description="The most the pod count may differ between domains.")
    topology_key: Key = Field(description="Node label whose values are the domains, e.g. topology.kubernetes.io/zone.")
    when_unsatisfiable: Literal["DoNotSchedule", "ScheduleAnyway"] = Field(
        description="DoNotSchedule keeps a pod pending rather than skew; ScheduleAnyway only prefers."
    )
    label_selector: LabelSelector | None = Field(
        default=None, description="The pods counted; this resource's engine pods when unset."
    )
    min_domains: int | None = Field(
        default=None, ge=1, le=2**31 - 1, description="Domains to count as existing (DoNotSchedule only)."
    )
    node_affinity_policy: Literal["Honor", "Ignore"] | None = Field(
        default=None, description="Whether the pods' node affinity limits the domains (Honor)."
    )
    node_taints_policy: Literal["Honor", "Ignore"] | None = Field(
        default=None, description="Whether untolerated taints limit the domains (Ignore)."
    )

    cel_rules: ClassVar[tuple[Rule, ...]] = (
        key_rule("topologyKey", "topologyKey"),
        Rule(
            id="kubernetes",
            rule="!has(self.minDomains) || self.whenUnsatisfiable == 'DoNotSchedule'",
            message="minDomains only applies with whenUnsatisfiable DoNotSchedule",
            field_path=".minDomains",
        ),
    )


class PlacementSettings(Section):
    """Where the pods may run."""

    node_selector: LabelMap | None = Field(default=None, max_length=32, description="Node labels the pods require.")
    tolerations: list[Toleration] | None = Field(
        default=None, max_length=32, description="Taints the pods tolerate (NPU nodes are often tainted)."
    )
    affinity: Affinity | None = Field(default=None, description="Node and pod affinity of the pods (core/v1 Affinity).")
    topology_spread_constraints: list[TopologySpreadConstraint] | None = Field(
        default=None,
        max_length=8,
        description="How the pods spread across zones or nodes; a constraint without labelSelector counts this "
        "resource's engine pods.",
    )
    scheduler_name: str | None = Field(
        default=None,
        max_length=253,
        pattern=DNS_SUBDOMAIN,
        description="Scheduler for the pods, e.g. volcano for gang scheduling.",
    )
    priority_class_name: str | None = Field(
        default=None, max_length=253, pattern=DNS_SUBDOMAIN, description="PriorityClass of the pods."
    )
    spread_across_nodes: bool = Field(
        default=True,
        description="Spread the engine pods over nodes (maxSkew 1 on kubernetes.io/hostname, ScheduleAnyway: a "
        "small cluster still schedules them), so a node drain or failure takes few engines. Applies unless "
        "topologySpreadConstraints or affinity.podAntiAffinity are set, which then decide; false turns it off.",
    )


# Label maps under spec.placement, for the admission policy: each a chain of fields, `[]` marking a list.
PLACEMENT_LABEL_MAPS = (
    "nodeSelector",
    *(f"affinity.{p}" for p in AFFINITY_LABEL_MAPS),
    "topologySpreadConstraints[].labelSelector.matchLabels",
)
