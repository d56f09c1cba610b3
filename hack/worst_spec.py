"""The costliest SpeculativeInferences the CRD admits: every list and map at its maxItems, every string at its
maxLength (or as short as it can be, for as many items as the bounds allow), filled from the generated CRD's
schema and within what the API server can store.

`worst(valid=True)` passes every rule (of the CRD, the admission policies and the chart's default tenant
policy), so that the check runs to its end, warnings included. `worst(valid=False)` passes the schema and
breaks the rules on every object it can (all alternatives set, the last value of every enum), so that
every rule finds something to report.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Callable
from typing import Any, Literal

from specinfer_operator.api.crd import openapi_schema
from specinfer_operator.api.policy import TenantPolicySpec
from specinfer_runtime.methods import METHOD_NAMES
from specinfer_runtime.passthrough import (
    ASCEND_ADDITIONAL_KEYS,
    COMPILATION_KEYS,
    MAX_VALUE_ENTRIES,
    OWNED_ADDITIONAL_KEYS,
    OWNED_COMPILATION_KEYS,
)

Shape = Literal["long", "dense"]
# etcd's default --max-request-bytes: the largest object the API server can store (metadata and its
# managedFields included), hence the largest spec the operator can be given.
STORED_BYTES = 1536 * 1024
# What the spec may take of it: the rest is metadata, and managedFields list every map key and list entry.
SPEC_BYTES = 1024 * 1024
# The chart's default tenant policy, with learning opted in and every pull Secret allowed: the worst spec learns
# and pulls with the most Secrets, which a platform allows.
POLICY = TenantPolicySpec(learning_allowed=True, allowed_image_pull_secrets=["*"])
DENSE_LENGTH = 8  # strings of the dense shape: long enough to be distinct
OMIT = object()

Choice = Any | Callable[["_Filler"], Any]


def _schedule() -> list[dict[str, int]]:
    """Eight ranges from batch size 1 on, K falling from 3 to 1."""
    starts = [1, 2, 4, 8, 16, 32, 64, 128]
    ends = [s - 1 for s in starts[1:]] + [65536]
    return [
        {"minBatchSize": a, "maxBatchSize": b, "numSpeculativeTokens": 3 - i // 3}
        for i, (a, b) in enumerate(zip(starts, ends, strict=True))
    ]


def _capture_sizes() -> list[int]:
    """The decode step of every batch size from 1 to 64 under the schedule: n x (K(n) + 1)."""
    k = {
        n: r["numSpeculativeTokens"]
        for r in _schedule()
        for n in range(r["minBatchSize"], min(r["maxBatchSize"], 64) + 1)
    }
    return sorted({n * (k[n] + 1) for n in range(1, 65)})


class _Filler:
    """One walk of the schema, every list and map holding up to `cap` entries."""

    def __init__(self, cap: int, shape: Shape, choices: dict[str, Choice], last_enum: bool) -> None:
        self.cap, self.shape, self.choices, self.last_enum = cap, shape, choices, last_enum
        self.serial = itertools.count()
        self.index = 0  # of the list item being filled
        self.used: set[str] = set()

    def fill(self, node: dict[str, Any], path: str) -> Any:
        if path in self.choices:
            self.used.add(path)
            choice = self.choices[path]
            return choice(self) if callable(choice) else choice
        if "enum" in node:
            return node["enum"][-1 if self.last_enum else 0]
        if node.get("x-kubernetes-int-or-string"):  # a quantity: the longest string, digits so that it is one
            return "9" * min(node["maxLength"], DENSE_LENGTH if self.shape == "dense" else node["maxLength"])
        kind = node.get("type")
        if kind == "object":
            return self._object(node, path)
        if kind == "array":
            return self._array(node, path)
        if kind == "string":
            return self._string(node)
        if kind in ("integer", "number"):
            return node.get("maximum", 1)
        if kind == "boolean":
            return True
        if node.get("x-kubernetes-preserve-unknown-fields"):
            return list(range(MAX_VALUE_ENTRIES))  # the most entries a passthrough value may hold
        raise ValueError(f"{path}: no way to fill {node}")

    def _object(self, node: dict[str, Any], path: str) -> dict[str, Any]:
        out = {}
        for key, inner in node.get("properties", {}).items():
            value = self.fill(inner, f"{path}.{key}")
            if value is not OMIT:
                out[key] = value
        values = node.get("additionalProperties")
        if isinstance(values, dict):
            keys = self.choices.get(f"{path} keys")
            self.used.add(f"{path} keys")
            for i in range(
                min(node.get("maxProperties", self.cap), self.cap, len(keys) if isinstance(keys, list) else self.cap)
            ):
                key = keys[i] if isinstance(keys, list) else self._key()
                out[key] = self.fill(values, f"{path}{{}}")
        return out

    def _array(self, node: dict[str, Any], path: str) -> list[Any]:
        count = min(node.get("maxItems", self.cap), self.cap)
        items = node["items"]
        if items.get("type") in ("integer", "number"):  # distinct, as sets must be
            return [_distinct(items, i, count) for i in range(count)]
        out = []
        for i in range(count):
            self.index = i
            item = self.fill(items, f"{path}[]")
            for key in node.get("x-kubernetes-list-map-keys", ()):  # distinct, as the keys of a list-map must be
                if isinstance(item.get(key), int):
                    item[key] = _distinct(items["properties"][key], i, count)
            out.append(item)
        return out

    def _key(self) -> str:
        """A map key: a qualified name, as label and annotation keys must be (the longest: 253 + 1 + 63)."""
        tag = f"k{next(self.serial):x}"
        return tag if self.shape == "dense" else ("k" * 253 + tag)[-253:] + "/" + (tag + "k" * 63)[:63]

    def _string(self, node: dict[str, Any]) -> str:
        longest = node.get("maxLength", 64)
        pattern = node.get("pattern")
        for length in (min(longest, DENSE_LENGTH), longest) if self.shape == "dense" else (longest,):
            tag = f"a{next(self.serial):x}"
            for text in _candidates(tag, length):
                if 0 < len(text) <= length and (pattern is None or re.search(pattern.replace("$", r"\Z"), text)):
                    return text
        raise ValueError(f"no string of at most {longest} characters matches {pattern}")


_CONTAINERS = ("spec.runtime", "spec.podTemplate.spec.containers[]", "spec.podTemplate.spec.initContainers[]")
_SOURCES = ("hostPath", "configMap", "secret", "persistentVolumeClaim", "nfs", "csi")  # all but emptyDir
# Where the valid resource chooses: one of each set of alternatives, values the rules across fields accept.
VALID: dict[str, Choice] = {
    "spec.model.source.hostPath": OMIT,
    "spec.model.source.huggingFace": OMIT,
    "spec.speculative.draftModel.source.hostPath": OMIT,
    "spec.speculative.draftModel.source.huggingFace": OMIT,
    "spec.parallelism.tensor": 8,
    "spec.parallelism.pipeline": 1,
    "spec.parallelism.data": 1,
    "spec.parallelism.nodes": 1,
    "spec.resources.npusPerPod": 8,
    "spec.resources.modelCacheClaim": OMIT,
    "spec.speculative.method": "eagle3",
    "spec.speculative.numSpeculativeTokens": 3,
    "spec.speculative.draftTensorParallelSize": 1,
    "spec.speculative.disablePaddedDrafterBatch": OMIT,
    "spec.speculative.rejectionSampleMethod": OMIT,
    "spec.speculative.syntheticAcceptanceRates": OMIT,
    "spec.speculative.syntheticAcceptanceLength": OMIT,
    **{f"spec.speculative.{m}": OMIT for m in ("ngram", "suffix", "hiddenStates", "dspark", "dynamicVerification")},
    "spec.speculative.numSpeculativeTokensPerBatchSize": lambda _: _schedule(),
    "spec.speculative.tuning.mode": "Recommend",
    "spec.speculative.tuning.minK": 1,
    "spec.graph.mode": "FULL_DECODE_ONLY",
    "spec.graph.maxBatchSize": OMIT,
    "spec.graph.captureSizes": lambda _: _capture_sizes(),
    "spec.runtime.engineVersions.vllmAscend": "9999.9999.9999rc9999",
    "spec.runtime.engineVersions.vllm": "9999.9999.9999rc9999",
    "spec.placement.tolerations[].operator": "Equal",
    "spec.placement.tolerations[].effect": "NoExecute",
    "spec.rollout.canary.percent": OMIT,
    "spec.rollout.strategy": "Canary",  # spec.learning's, and tuning Auto's
    "spec.telemetry.enabled": True,
    "spec.disruptionBudget.minAvailable": OMIT,
    "spec.podTemplate.spec.serviceAccountName": OMIT,
    # What the chart's default tenant policy allows.
    "spec.podTemplate.spec.runtimeClassName": OMIT,
    "spec.podTemplate.spec.terminationGracePeriodSeconds": 3600,
    "spec.resources.npuResourceName": "huawei.com/Ascend910",
    "spec.placement.schedulerName": "default-scheduler",
    "spec.podTemplate.spec.volumes[].name": lambda f: f"v{f.index}",
    **{f"spec.podTemplate.spec.volumes[].{s}": OMIT for s in _SOURCES},
    **{f"{c}.env[].valueFrom": OMIT for c in _CONTAINERS},
    **{f"{c}.envFrom[].secretRef": OMIT for c in _CONTAINERS},
    **{f"{c}.volumeMounts[].name": (lambda f: f"v{f.index % 16}") for c in _CONTAINERS},
    **{f"{c}.securityContext.allowPrivilegeEscalation": False for c in _CONTAINERS[1:]},
    "spec.compilationConfig keys": [k for k in COMPILATION_KEYS if k not in OWNED_COMPILATION_KEYS],
    "spec.additionalConfig keys": [k for k in ASCEND_ADDITIONAL_KEYS if k not in OWNED_ADDITIONAL_KEYS],
}
# The invalid resource only keeps the schema: passthrough keys are still strings, set sizes still distinct.
# The method is the last name the schema takes (arctic, which a rule refuses), as the last value of an enum would be.
INVALID: dict[str, Choice] = {"spec.speculative.method": METHOD_NAMES[-1]}


def _distinct(node: dict[str, Any], i: int, count: int) -> int | float:
    """The `i`th of `count` distinct numbers from the schema's maximum down, within its minimum."""
    high, low = node.get("maximum", count), node.get("minimum", 0)
    if node.get("type") == "integer":
        return int(max(high - i, low))
    return float(high - (high - low) * i / count)


def _candidates(tag: str, length: int) -> list[str]:
    """Strings of `length` that the patterns of the schema accept, one of them for each pattern."""
    filler = (tag + "a" * length)[:length]
    qualified = ""
    if 70 < length <= 317:  # a qualified name: DNS subdomain prefix, '/', name (taint and topology keys)
        qualified = ("a" * 253 + tag)[-min(length - 64, 253) :] + "/" + (tag + "a" * 62)[:63]
    return [
        qualified,
        filler,
        ("/" + filler)[:length],
        ("1." + "0" * length)[: length - 2] + "Gi",
        "metadata.annotations['" + filler[: length - 24] + "']",
        "9999.9999.9999rc9999",
    ]


def filled(cap: int, shape: Shape = "dense", valid: bool = True) -> dict[str, Any]:
    """The resource with every list and map holding up to `cap` entries."""
    choices = VALID if valid else INVALID
    filler = _Filler(cap, shape, choices, last_enum=not valid)
    spec = filler.fill(openapi_schema()["properties"]["spec"], "spec")
    unused = set(choices) - filler.used
    if unused:
        raise ValueError(f"the schema has no {sorted(unused)}: update the choices")
    return {
        "apiVersion": "specinfer.io/v1alpha1",
        "kind": "SpeculativeInference",
        "metadata": {"name": "worst"},
        "spec": spec,
    }


def size(resource: dict[str, Any]) -> int:
    """Bytes of the resource as compact JSON, as the API server stores it."""
    return len(json.dumps(resource, separators=(",", ":")))


def worst(valid: bool = True, shape: Shape = "dense", budget: int = SPEC_BYTES) -> dict[str, Any]:
    """The resource with the most entries in every list and map that fits `budget` bytes: every bound the
    CRD sets, as far as what the API server can store allows."""
    cap, resource = 1, filled(1, shape, valid)
    while True:  # double the cap while it fits and still adds entries
        bigger = filled(cap * 2, shape, valid)
        if size(bigger) > budget:
            break
        if size(bigger) == size(resource):
            return resource  # every list and map at its bound
        cap, resource = cap * 2, bigger
    low, high = cap, cap * 2
    while high - low > 1:
        middle = (low + high) // 2
        candidate = filled(middle, shape, valid)
        low, high, resource = (middle, high, candidate) if size(candidate) <= budget else (low, middle, resource)
    return resource
